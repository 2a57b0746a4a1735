import type { ErrorBody, FieldError } from "./types";

/** A non-2xx answer of the API, with its `{code, message, errors}` body when it had one. */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly errors: FieldError[];

  constructor(status: number, body: unknown, fallback?: string) {
    const b = asErrorBody(body);
    super(b?.message ?? fallback ?? `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.code = b?.code ?? `http_${status}`;
    this.errors = b?.errors ?? [];
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The body as the API's error shape, or undefined when it is something else (a proxy's
 * HTML page, an empty body). */
export function asErrorBody(v: unknown): ErrorBody | undefined {
  if (!isRecord(v) || typeof v.message !== "string") return undefined;
  const errors: FieldError[] = Array.isArray(v.errors)
    ? v.errors.filter(isRecord).map((e) => ({
        field: typeof e.field === "string" ? e.field : "",
        message: typeof e.message === "string" ? e.message : String(e.message),
      }))
    : [];
  return {
    code: typeof v.code === "string" ? v.code : "error",
    message: v.message,
    errors,
    details: isRecord(v.details) ? v.details : {},
  };
}

export const FORBIDDEN_TEXT = "Your token's role cannot do this.";

/** One sentence for a failed request, for banners and toasts. */
export function describeError(err: unknown): string {
  if (err instanceof ApiError) {
    if (err.status === 403) return `${FORBIDDEN_TEXT} (${err.message})`;
    if (err.status === 401) return `Not signed in: ${err.message}`;
    if (err.status === 0) return err.message;
    return err.message;
  }
  if (err instanceof Error) return err.message;
  return String(err);
}
