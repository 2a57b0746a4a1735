import { useQueryClient } from "@tanstack/react-query";
import { useEffect, useRef } from "react";
import { DONE, invalidatePipeline, useOperation } from "../api/queries";
import type { Operation } from "../api/types";
import { formatBytes } from "../lib/format";
import { showToast } from "../lib/toast";
import { StateBadge } from "./StateBadge";

/** What an operation's result says, in a few words. */
export function summarizeResult(op: Operation): string {
  const r = op.result;
  if (!r) return "";
  const parts: string[] = [];
  const num = (k: string) => (typeof r[k] === "number" ? (r[k] as number) : undefined);
  const str = (k: string) => (typeof r[k] === "string" ? (r[k] as string) : undefined);
  if (str("checkpoint") ?? str("uuid")) parts.push(`checkpoint ${(str("checkpoint") ?? str("uuid") ?? "").split("-")[0]}`);
  if (num("step") !== undefined) parts.push(`step ${num("step")}`);
  if (Array.isArray(r.deleted)) parts.push(`deleted ${r.deleted.length}`);
  else if (num("deleted") !== undefined) parts.push(`deleted ${num("deleted")}`);
  if (num("files_removed") !== undefined) parts.push(`${num("files_removed")} files removed`);
  if (num("bytes_freed") !== undefined) parts.push(`${formatBytes(num("bytes_freed"))} freed`);
  if (str("note")) parts.push(str("note") ?? "");
  return parts.length ? parts.join(", ") : JSON.stringify(r);
}

/** One operation, polled until it succeeded or failed; refreshes the pipeline then. */
export function OperationItem({ op, pipeline }: { op: Operation; pipeline: string }) {
  const qc = useQueryClient();
  const q = useOperation(op);
  const cur = q.data ?? op;
  const done = DONE.includes(cur.status);
  const announced = useRef(DONE.includes(op.status));
  useEffect(() => {
    if (!done) return;
    void invalidatePipeline(qc, pipeline);
    if (announced.current) return;
    announced.current = true;
    if (cur.status === "succeeded") showToast("success", `${cur.kind.replace("_", " ")} succeeded`);
    else showToast("error", `${cur.kind.replace("_", " ")} failed: ${cur.error ?? "unknown error"}`);
  }, [done, cur.status, cur.kind, cur.error, qc, pipeline]);

  return (
    <li className="op" data-testid={`operation-${cur.id}`} data-kind={cur.kind} data-status={cur.status}>
      <span className="op-kind">{cur.kind.replace("_", " ")}</span>
      <StateBadge state={cur.status} testId="operation-status" />
      {!done && <span className="spinner" aria-label="in progress" />}
      {cur.status === "succeeded" && <span className="op-result">{summarizeResult(cur)}</span>}
      {cur.status === "failed" && (
        <span className="op-error" role="alert">
          {cur.error ?? "failed"}
        </span>
      )}
    </li>
  );
}

export interface PendingRequest {
  key: string;
  label: string;
}

/** The operations started from this page, newest first, and requests still in flight. */
export function OperationList({
  ops,
  pending,
  pipeline,
}: {
  ops: readonly Operation[];
  pending: readonly PendingRequest[];
  pipeline: string;
}) {
  if (ops.length === 0 && pending.length === 0) return null;
  return (
    <section className="card ops" aria-label="Operations">
      <h3 className="h4">Operations</h3>
      <ul data-testid="operations">
        {pending.map((p) => (
          <li key={p.key} className="op" data-status="requested">
            <span className="op-kind">{p.label}</span>
            <span className="badge badge-warn">requested</span>
            <span className="spinner" aria-label="in progress" />
          </li>
        ))}
        {ops.map((op) => (
          <OperationItem key={op.id} op={op} pipeline={pipeline} />
        ))}
      </ul>
    </section>
  );
}
