// TanStack Query hooks over the typed client. Keys: ["pipelines"] for the list and
// ["pipeline", name, ...] for everything of one pipeline, so invalidating ["pipeline", name]
// refreshes a whole detail page.
import { useQuery, type QueryClient } from "@tanstack/react-query";
import { api, ok } from "./client";
import type { Operation } from "./types";

export const POLL_MS = 2000;

export const keys = {
  pipelines: ["pipelines"] as const,
  pipeline: (name: string) => ["pipeline", name] as const,
  checkpoints: (name: string) => ["pipeline", name, "checkpoints"] as const,
  runs: (name: string) => ["pipeline", name, "runs"] as const,
  dataflow: (name: string) => ["pipeline", name, "dataflow"] as const,
  metrics: (name: string, limit: number) => ["pipeline", name, "metrics", limit] as const,
  retention: (name: string) => ["pipeline", name, "retention"] as const,
  logs: (name: string, run: number | null) => ["pipeline", name, "logs", run] as const,
  view: (
    name: string,
    view: string,
    offset: number,
    limit: number,
    key: readonly string[],
    asOf: string,
  ) => ["pipeline", name, "view", view, offset, limit, key, asOf] as const,
  viewDiff: (name: string, view: string, from: string, to: string, limit: number) =>
    ["pipeline", name, "view-diff", view, from, to, limit] as const,
  operation: (id: string) => ["operation", id] as const,
  version: ["version"] as const,
};

const path = (name: string) => ({ params: { path: { name } } });

/** The installed release's version (the console's footer); it changes only with a deploy. */
export function useVersion() {
  return useQuery({
    queryKey: keys.version,
    queryFn: ({ signal }) => ok(api.GET("/api/v1/version", { signal })),
    staleTime: Infinity,
  });
}

export function usePipelines() {
  return useQuery({
    queryKey: keys.pipelines,
    queryFn: ({ signal }) => ok(api.GET("/api/v1/pipelines", { signal })),
    refetchInterval: POLL_MS,
  });
}

export function usePipeline(name: string) {
  return useQuery({
    queryKey: keys.pipeline(name),
    queryFn: ({ signal }) => ok(api.GET("/api/v1/pipelines/{name}", { ...path(name), signal })),
    refetchInterval: POLL_MS,
  });
}

export function useCheckpoints(name: string, refetchInterval: number | false = POLL_MS) {
  return useQuery({
    queryKey: keys.checkpoints(name),
    queryFn: ({ signal }) =>
      ok(api.GET("/api/v1/pipelines/{name}/checkpoints", { ...path(name), signal })),
    refetchInterval,
  });
}

export function useRuns(name: string) {
  return useQuery({
    queryKey: keys.runs(name),
    queryFn: ({ signal }) =>
      ok(
        api.GET("/api/v1/pipelines/{name}/runs", {
          params: { path: { name }, query: { limit: 100 } },
          signal,
        }),
      ),
    refetchInterval: POLL_MS,
  });
}

export function useDataflow(name: string) {
  return useQuery({
    queryKey: keys.dataflow(name),
    queryFn: ({ signal }) => ok(api.GET("/api/v1/pipelines/{name}/dataflow", { ...path(name), signal })),
    refetchInterval: POLL_MS,
  });
}

export function useMetricsHistory(name: string, limit = 60) {
  return useQuery({
    queryKey: keys.metrics(name, limit),
    queryFn: ({ signal }) =>
      ok(
        api.GET("/api/v1/pipelines/{name}/metrics", {
          params: { path: { name }, query: { limit } },
          signal,
        }),
      ),
    refetchInterval: POLL_MS,
  });
}

export function useRetention(name: string) {
  return useQuery({
    queryKey: keys.retention(name),
    queryFn: ({ signal }) =>
      ok(api.GET("/api/v1/pipelines/{name}/retention", { ...path(name), signal })),
  });
}

export function useLogs(name: string, run: number | null, lines = 300) {
  return useQuery({
    queryKey: keys.logs(name, run),
    queryFn: ({ signal }) =>
      ok(
        api.GET("/api/v1/pipelines/{name}/logs", {
          params: { path: { name }, query: run === null ? { lines } : { lines, run } },
          signal,
        }),
      ),
    refetchInterval: POLL_MS,
  });
}

/** A view's rows as of a checkpoint (`asOf`: "latest", or a checkpoint's uuid). */
export function useView(
  name: string,
  view: string | null,
  offset: number,
  limit: number,
  key: readonly string[],
  asOf = "",
) {
  // "": now (the running pipeline's newest step, else the newest checkpoint).
  const at = asOf ? { as_of: asOf } : {};
  return useQuery({
    queryKey: keys.view(name, view ?? "", offset, limit, key, asOf),
    enabled: view !== null && view !== "",
    queryFn: ({ signal }) =>
      ok(
        api.GET("/api/v1/pipelines/{name}/views/{view}", {
          params: {
            path: { name, view: view ?? "" },
            query: key.length ? { key: [...key], limit, ...at } : { offset, limit, ...at },
          },
          signal,
        }),
      ),
    placeholderData: (prev) => prev,
    // A live read follows the running pipeline.
    refetchInterval: (q) => (q.state.data?.live ? 2000 : false),
  });
}

/** What changed in a view from checkpoint `from` to `to` (null `from`: nothing asked). */
export function useViewDiff(
  name: string,
  view: string | null,
  from: string | null,
  to: string,
  limit: number,
) {
  return useQuery({
    queryKey: keys.viewDiff(name, view ?? "", from ?? "", to, limit),
    enabled: view !== null && view !== "" && from !== null,
    queryFn: ({ signal }) =>
      ok(
        api.GET("/api/v1/pipelines/{name}/views/{view}/diff", {
          params: { path: { name, view: view ?? "" }, query: { from: from ?? "", to, limit } },
          signal,
        }),
      ),
  });
}

export const DONE: readonly Operation["status"][] = ["succeeded", "failed"];

/** Polls an operation every 500 ms until it succeeded or failed. */
export function useOperation(op: Operation) {
  return useQuery({
    queryKey: keys.operation(op.id),
    queryFn: ({ signal }) =>
      ok(api.GET("/api/v1/operations/{op_id}", { params: { path: { op_id: op.id } }, signal })),
    initialData: op,
    initialDataUpdatedAt: 0,
    refetchInterval: (q) => (q.state.data && DONE.includes(q.state.data.status) ? false : 500),
  });
}

export async function invalidatePipeline(qc: QueryClient, name: string): Promise<void> {
  await Promise.all([
    qc.invalidateQueries({ queryKey: keys.pipeline(name) }),
    qc.invalidateQueries({ queryKey: keys.pipelines }),
  ]);
}
