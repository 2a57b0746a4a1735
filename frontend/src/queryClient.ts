import { MutationCache, QueryClient } from "@tanstack/react-query";
import { ApiError, describeError } from "./api/errors";
import { showToast } from "./lib/toast";

/** Retry only what may pass on a second try: network errors and 5xx, twice. */
function retry(count: number, err: unknown): boolean {
  if (err instanceof ApiError && err.status >= 400 && err.status < 500) return false;
  return count < 2;
}

export function makeQueryClient(): QueryClient {
  return new QueryClient({
    defaultOptions: {
      queries: { retry, staleTime: 1000, refetchOnWindowFocus: true },
      mutations: { retry: false },
    },
    mutationCache: new MutationCache({
      // Every failed action is said, unless the form shows it itself (meta.inlineErrors).
      onError: (err, _vars, _ctx, mutation) => {
        if (err instanceof ApiError && err.status === 401) return; // back to sign-in instead
        if (mutation.meta?.inlineErrors) return;
        showToast("error", describeError(err));
      },
    }),
  });
}

declare module "@tanstack/react-query" {
  interface Register {
    mutationMeta: { inlineErrors?: boolean };
  }
}
