import { useEffect, useState } from "react";
import { asErrorBody } from "../api/errors";
import { getToken, reportUnauthorized } from "../auth/token";
import { appendSamples, type Sample } from "./metrics";
import { connectSse, type SseStatus } from "./sse";

export const KEEP_SAMPLES = 300;

function isSample(v: unknown): v is Sample {
  if (typeof v !== "object" || v === null) return false;
  const o = v as Record<string, unknown>;
  return ["id", "ts", "step", "rows_in", "rows_out", "step_ms"].every((k) => typeof o[k] === "number");
}

export interface MetricStream {
  samples: readonly Sample[];
  status: SseStatus;
  /** Why the stream is reconnecting or closed. */
  error?: string;
}

/** The pipeline's per-step samples, live: the newest 120 first, then each step as it
 * lands; the newest KEEP_SAMPLES are kept. Reconnects (Last-Event-ID) after errors. */
export function useMetricStream(name: string, backlog = 120): MetricStream {
  const [samples, setSamples] = useState<readonly Sample[]>([]);
  const [status, setStatus] = useState<{ status: SseStatus; error?: string }>({ status: "connecting" });

  useEffect(() => {
    setSamples([]);
    const url = `/api/v1/pipelines/${encodeURIComponent(name)}/metrics/stream?backlog=${backlog}`;
    const stop = connectSse({
      url,
      headers: (): Record<string, string> => {
        const token = getToken();
        return token ? { Authorization: `Bearer ${token}` } : {};
      },
      onEvent: (ev) => {
        if (ev.event !== "step") return;
        let data: unknown;
        try {
          data = JSON.parse(ev.data);
        } catch {
          return;
        }
        if (!isSample(data)) return;
        const sample = data;
        setSamples((prev) => appendSamples(prev, [sample], KEEP_SAMPLES));
      },
      onStatus: (s, error) => setStatus(error === undefined ? { status: s } : { status: s, error }),
      onHttpError: (code, body) => {
        const message = asErrorBody(body)?.message ?? `HTTP ${code}`;
        if (code === 401) reportUnauthorized(message);
        if (code === 401 || code === 403 || code === 404) {
          setStatus({ status: "closed", error: code === 403 ? "Your token's role cannot do this." : message });
          return false;
        }
        return true;
      },
      retryMs: 1000,
    });
    return stop;
  }, [name, backlog]);

  return { samples, ...status };
}
