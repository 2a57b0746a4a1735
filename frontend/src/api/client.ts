import createClient, { type Middleware } from "openapi-fetch";
import { getToken, reportUnauthorized } from "../auth/token";
import { ApiError, asErrorBody } from "./errors";
import type { paths } from "./schema";

/** Every request carries `Authorization: Bearer <token>`; a 401 signs the console out. */
const auth: Middleware = {
  onRequest({ request }) {
    const token = getToken();
    if (token) request.headers.set("Authorization", `Bearer ${token}`);
    return request;
  },
  async onResponse({ response }) {
    if (response.status === 401) {
      const body: unknown = await response
        .clone()
        .json()
        .catch(() => undefined);
      reportUnauthorized(asErrorBody(body)?.message ?? "the API rejected the token");
    }
    return response;
  },
};

export const api = createClient<paths>({ baseUrl: "" });
api.use(auth);

interface Outcome<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** The data of a successful call; throws ApiError for any other answer, and for network
 * failures (status 0). Use with openapi-fetch calls: `ok(await api.GET(...))`. */
export async function ok<T>(call: Promise<Outcome<T>>): Promise<T> {
  let out: Outcome<T>;
  try {
    out = await call;
  } catch (e) {
    throw new ApiError(0, undefined, `cannot reach the API: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (out.error !== undefined || !out.response.ok) {
    throw new ApiError(out.response.status, out.error, out.response.statusText || undefined);
  }
  return out.data as T;
}
