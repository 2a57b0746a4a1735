import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useId, useMemo, useState } from "react";
import { CartesianGrid, Scatter, ScatterChart, Tooltip, XAxis, YAxis, ZAxis } from "recharts";
import { api, ok } from "../../api/client";
import { invalidatePipeline, keys, useCheckpoints } from "../../api/queries";
import type { Checkpoint, Operation } from "../../api/types";
import { axisProps, ChartCard, tooltipProps } from "../../components/charts";
import { ConfirmDialog } from "../../components/ConfirmDialog";
import { ErrorNote } from "../../components/ErrorNote";
import { OperationList, type PendingRequest } from "../../components/Operations";
import { StartDialog } from "../../components/StartDialog";
import { STARTABLE } from "../../lib/lifecycle";
import { formatBytes, formatDateTime, formatMs, parseTime, shortId } from "../../lib/format";
import { usePipelineContext } from "../PipelineDetail";
import { RetentionEditor } from "./RetentionEditor";

type Confirm = { kind: "restore" | "delete"; cp: Checkpoint } | null;

export function Checkpoints() {
  const { pipeline } = usePipelineContext();
  const name = pipeline.name;
  const qc = useQueryClient();
  const list = useCheckpoints(name);
  const [ops, setOps] = useState<Operation[]>([]);
  const [pending, setPending] = useState<PendingRequest[]>([]);
  const [confirm, setConfirm] = useState<Confirm>(null);
  const [startFrom, setStartFrom] = useState<string | null>(null);
  const startable = STARTABLE.includes(pipeline.state);
  const [identifier, setIdentifier] = useState("");
  const [keep, setKeep] = useState("");
  const ids = { ident: useId(), keep: useId() };
  const running = pipeline.current_run !== null && pipeline.current_run !== undefined && ["running", "paused", "starting"].includes(pipeline.state);

  const track = (op: Operation) => setOps((prev) => [op, ...prev.filter((o) => o.id !== op.id)].slice(0, 8));
  const withPending = async <T,>(label: string, f: () => Promise<T>): Promise<T> => {
    const key = `${label}-${Date.now()}-${Math.random()}`;
    setPending((p) => [{ key, label }, ...p]);
    try {
      return await f();
    } finally {
      setPending((p) => p.filter((x) => x.key !== key));
    }
  };
  const path = { path: { name } };

  const commit = useMutation({
    mutationFn: () =>
      withPending("commit", () =>
        ok(
          api.POST("/api/v1/pipelines/{name}/checkpoints", {
            params: { ...path, query: { wait: true } },
            // No body at all when there is nothing to say (the body is optional).
            ...(identifier.trim() ? { body: { identifier: identifier.trim() } } : {}),
          }),
        ),
      ),
    onSuccess: (op) => {
      track(op);
      setIdentifier("");
    },
  });
  const gc = useMutation({
    mutationFn: () =>
      withPending("gc", () =>
        ok(
          api.POST("/api/v1/pipelines/{name}/checkpoints/gc", {
            params: { ...path, query: { wait: true } },
            ...(keep.trim() ? { body: { keep: Number(keep) } } : {}),
          }),
        ),
      ),
    onSuccess: track,
  });
  const remove = useMutation({
    meta: { inlineErrors: true },
    mutationFn: (uuid: string) => ok(api.DELETE("/api/v1/pipelines/{name}/checkpoints/{uuid}", { params: { path: { name, uuid } } })),
    onSuccess: (op) => {
      track(op);
      setConfirm(null);
    },
  });
  const restore = useMutation({
    meta: { inlineErrors: true },
    mutationFn: (uuid: string) =>
      ok(api.POST("/api/v1/pipelines/{name}/checkpoints/{uuid}/restore", { params: { path: { name, uuid } } })),
    onSuccess: (op) => {
      track(op);
      setConfirm(null);
    },
  });
  const pin = useMutation({
    mutationFn: ({ uuid, pinned }: { uuid: string; pinned: boolean }) =>
      ok(api.PATCH("/api/v1/pipelines/{name}/checkpoints/{uuid}", { params: { path: { name, uuid } }, body: { pinned } })),
    onSuccess: (cp) => {
      qc.setQueryData<Checkpoint[]>(keys.checkpoints(name), (old) => old?.map((c) => (c.uuid === cp.uuid ? cp : c)));
    },
    onSettled: () => invalidatePipeline(qc, name),
  });

  const rows = useMemo(() => [...(list.data ?? [])].reverse(), [list.data]);
  const timeline = useMemo(
    () =>
      (list.data ?? []).map((c) => ({
        t: parseTime(c.created_at) ?? 0,
        step: c.step,
        uuid: c.uuid,
        pinned: c.pinned,
        size: c.size_bytes,
      })),
    [list.data],
  );
  // The checkpoint created just before each one: a parent that differs is a branch (a
  // restore made an older checkpoint the live state).
  const previous = useMemo(() => {
    const m = new Map<string, string | null>();
    const xs = list.data ?? [];
    xs.forEach((c, i) => m.set(c.uuid, i > 0 ? (xs[i - 1]?.uuid ?? null) : null));
    return m;
  }, [list.data]);

  const confirmMutation = confirm?.kind === "restore" ? restore : remove;

  return (
    <div className="checkpoints">
      <div className="toolbar wrap">
        <label htmlFor={ids.ident} className="sr-only">
          Checkpoint identifier (optional)
        </label>
        <input
          id={ids.ident}
          className="input-small"
          placeholder="identifier (optional)"
          value={identifier}
          pattern="[A-Za-z0-9_.:\-]+"
          onChange={(e) => setIdentifier(e.target.value)}
          data-testid="commit-identifier"
        />
        <button
          type="button"
          className="btn btn-primary"
          onClick={() => commit.mutate()}
          disabled={commit.isPending}
          title={running ? undefined : "Commit needs a running pipeline"}
          data-testid="btn-commit"
        >
          {commit.isPending ? "Committing…" : "Commit"}
        </button>
        <span className="toolbar-sep" aria-hidden="true" />
        <label htmlFor={ids.keep} className="sr-only">
          Keep this many checkpoints (optional)
        </label>
        <input
          id={ids.keep}
          className="input-small"
          type="number"
          min={0}
          placeholder="keep (optional)"
          value={keep}
          onChange={(e) => setKeep(e.target.value)}
          data-testid="gc-keep"
        />
        <button type="button" className="btn" onClick={() => gc.mutate()} disabled={gc.isPending} data-testid="btn-gc">
          {gc.isPending ? "Collecting…" : "GC"}
        </button>
      </div>
      <ErrorNote error={commit.error} testId="commit-error" />
      <ErrorNote error={gc.error} testId="gc-error" />
      <ErrorNote error={pin.error} testId="pin-error" />

      <OperationList ops={ops} pending={pending} pipeline={name} />

      <ErrorNote error={list.error} />
      {list.data && list.data.length === 0 && (
        <p className="note" data-testid="no-checkpoints">
          No checkpoints yet.
        </p>
      )}
      {rows.length > 0 && (
        <div className="table-wrap">
          <table className="table table-cards" data-testid="checkpoints-table">
            <caption className="sr-only">Checkpoints, newest first</caption>
            <thead>
              <tr>
                <th scope="col">Checkpoint</th>
                <th scope="col">Step</th>
                <th scope="col" title="where each input table's next step starts">Input offsets</th>
                <th scope="col">Created</th>
                <th scope="col">Size</th>
                <th scope="col">Duration</th>
                <th scope="col">Durable</th>
                <th scope="col">Parent</th>
                <th scope="col">
                  <span className="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody>
              {rows.map((c) => {
                // A parent that still exists but is not the checkpoint made just before
                // this one: a restore branched the lineage there.
                const parentKnown = c.parent !== null && previous.has(c.parent);
                const branch = parentKnown && c.parent !== previous.get(c.uuid);
                return (
                  <tr key={c.uuid} data-testid={`checkpoint-row-${c.uuid}`} className={c.pinned ? "row-pinned" : undefined}>
                    <td data-label="Checkpoint">
                      <code title={c.uuid}>{shortId(c.uuid)}</code>
                      {c.identifier && <span className="tag">{c.identifier}</span>}
                      {c.pinned && (
                        <span className="tag tag-pin" data-testid="pinned">
                          pinned
                        </span>
                      )}
                      {pipeline.restore_point === c.uuid && <span className="tag tag-info">next start</span>}
                    </td>
                    <td data-label="Step" className="num">
                      {c.step}
                    </td>
                    <td data-label="Input offsets" className="num" data-testid="offsets">
                      {inputOffsets(c.source_offsets, c.source_offset)}
                    </td>
                    <td data-label="Created">{formatDateTime(c.created_at)}</td>
                    <td data-label="Size" className="num">
                      {formatBytes(c.size_bytes)}
                      <div className="muted small">+{formatBytes(c.new_bytes)} new</div>
                    </td>
                    <td data-label="Duration" className="num">
                      {formatMs(c.duration_ms)}
                    </td>
                    <td data-label="Durable">
                      <span className={c.local_durable ? "yes" : "no"} data-testid="local-durable">
                        local {c.local_durable ? "✓" : "✗"}
                      </span>{" "}
                      <span className={c.remote_durable ? "yes" : "no"} data-testid="remote-durable">
                        remote {c.remote_durable ? "✓" : "✗"}
                      </span>
                    </td>
                    <td data-label="Parent">
                      {c.parent ? (
                        <span title={c.parent} data-testid="parent">
                          ← <code>{shortId(c.parent)}</code>
                          {branch && <span className="tag tag-warn">branch</span>}
                          {!parentKnown && <span className="tag" title="deleted (gc, retention or by hand)">deleted</span>}
                        </span>
                      ) : (
                        <span className="muted">root</span>
                      )}
                    </td>
                    <td data-label="Actions">
                      <div className="actions">
                        <button
                          type="button"
                          className="btn btn-small"
                          aria-pressed={c.pinned}
                          aria-label={`${c.pinned ? "Unpin" : "Pin"} checkpoint ${shortId(c.uuid)}`}
                          onClick={() => pin.mutate({ uuid: c.uuid, pinned: !c.pinned })}
                          disabled={pin.isPending}
                          data-testid={`btn-pin-${c.uuid}`}
                        >
                          {c.pinned ? "Unpin" : "Pin"}
                        </button>
                        {startable && (
                          <button
                            type="button"
                            className="btn btn-small btn-primary"
                            aria-label={`Start from checkpoint ${shortId(c.uuid)}`}
                            aria-haspopup="dialog"
                            onClick={() => setStartFrom(c.uuid)}
                            data-testid={`btn-start-from-${c.uuid}`}
                          >
                            Start from here
                          </button>
                        )}
                        <button
                          type="button"
                          className="btn btn-small"
                          aria-label={`Restore checkpoint ${shortId(c.uuid)}`}
                          onClick={() => {
                            restore.reset();
                            setConfirm({ kind: "restore", cp: c });
                          }}
                          data-testid={`btn-restore-${c.uuid}`}
                        >
                          Restore
                        </button>
                        <button
                          type="button"
                          className="btn btn-small btn-danger-outline"
                          aria-label={`Delete checkpoint ${shortId(c.uuid)}`}
                          onClick={() => {
                            remove.reset();
                            setConfirm({ kind: "delete", cp: c });
                          }}
                          disabled={c.pinned}
                          title={c.pinned ? "Unpin it first" : undefined}
                          data-testid={`btn-delete-${c.uuid}`}
                        >
                          Delete
                        </button>
                      </div>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}

      {timeline.length > 0 && (
        <ChartCard title="Timeline (step by creation time)" testId="chart-checkpoints" height={200}>
          <ScatterChart margin={{ top: 8, right: 16, bottom: 0, left: 0 }}>
            <CartesianGrid stroke="var(--grid)" />
            <XAxis
              dataKey="t"
              type="number"
              domain={["dataMin", "dataMax"]}
              padding={{ left: 20, right: 20 }}
              tickFormatter={(t: number) => new Date(t).toLocaleTimeString()}
              name="created"
              minTickGap={40}
              {...axisProps}
            />
            <YAxis dataKey="step" type="number" name="step" width={48} {...axisProps} />
            <ZAxis range={[50, 50]} />
            <Tooltip
              {...tooltipProps}
              formatter={(v, n) => (n === "created" ? new Date(Number(v)).toLocaleString() : String(v))}
            />
            <Scatter name="checkpoints" data={timeline.filter((x) => !x.pinned)} fill="var(--chart-1)" isAnimationActive={false} />
            <Scatter name="pinned" data={timeline.filter((x) => x.pinned)} fill="var(--chart-3)" shape="diamond" isAnimationActive={false} />
          </ScatterChart>
        </ChartCard>
      )}

      <RetentionEditor name={name} />

      {startFrom !== null && <StartDialog pipeline={pipeline} initial={startFrom} onClose={() => setStartFrom(null)} />}
      <ConfirmDialog
        open={confirm !== null}
        title={
          confirm?.kind === "restore"
            ? `Restore checkpoint ${shortId(confirm.cp.uuid)} (step ${confirm.cp.step})?`
            : `Delete checkpoint ${shortId(confirm?.cp.uuid)}?`
        }
        confirmLabel={confirm?.kind === "restore" ? "Restore" : "Delete checkpoint"}
        danger={confirm?.kind === "delete"}
        busy={confirmMutation.isPending}
        error={confirmMutation.error}
        onConfirm={() => confirm && confirmMutation.mutate(confirm.cp.uuid)}
        onCancel={() => setConfirm(null)}
      >
        {confirm?.kind === "restore" ? (
          <p>
            {running
              ? "The running pipeline restarts from this checkpoint; the steps after it are processed again."
              : "The pipeline is not running: its next start resumes from this checkpoint."}
          </p>
        ) : (
          <p>Its files are removed unless a later checkpoint shares them. This cannot be undone.</p>
        )}
      </ConfirmDialog>
    </div>
  );
}

/** Each input table's offset ("bids 120 · sellers 5"; a Kafka table's per partition,
 * "orders clicks:0=18 clicks:1=17"), or the one source's ("120"). */
function inputOffsets(
  offsets: Record<string, number | Record<string, number>> | null,
  offset: number | null,
): string {
  const perPartition = (o: Record<string, number>) =>
    Object.entries(o)
      .map(([p, n]) => `${p}=${n}`)
      .join(" ");
  if (offsets && (Object.keys(offsets).length > 1 || Object.values(offsets).some((v) => typeof v === "object"))) {
    return Object.entries(offsets)
      .map(([table, n]) => `${table} ${typeof n === "object" ? perPartition(n) : n}`)
      .join(" · ");
  }
  return offset === null ? "—" : String(offset);
}
