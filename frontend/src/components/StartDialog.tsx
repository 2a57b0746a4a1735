import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useEffect, useId, useMemo, useRef, useState } from "react";
import { api, ok } from "../api/client";
import { invalidatePipeline, useCheckpoints, useDataflow } from "../api/queries";
import type { Checkpoint, Pipeline } from "../api/types";
import { formatDateTime, shortId } from "../lib/format";
import { refusedOperators } from "../lib/lifecycle";
import { showToast } from "../lib/toast";
import { ErrorNote } from "./ErrorNote";

/** Where a start resumes: `latest`, `none` (empty state) or a checkpoint's uuid. */
export type StartFrom = string;

function describe(c: Checkpoint): string {
  return `${shortId(c.uuid)} · step ${c.step} · ${formatDateTime(c.created_at)}${c.identifier ? ` · ${c.identifier}` : ""}${
    c.pinned ? " · pinned" : ""
  }`;
}

/** The start of a stopped pipeline from a chosen point: the latest checkpoint (default),
 * a retained one, or none (fresh state: confirmed with a checkbox, the state is dropped).
 * Starting from a checkpoint, some operators can start empty (`drop_state`): those whose
 * state no longer fits a changed query, preselected when the last start was refused for them.
 * In the document only while open, like ConfirmDialog (native modal <dialog>). */
export function StartDialog({
  pipeline,
  initial = "latest",
  onClose,
}: {
  pipeline: Pipeline;
  initial?: StartFrom;
  onClose: () => void;
}) {
  const name = pipeline.name;
  const qc = useQueryClient();
  const ref = useRef<HTMLDialogElement>(null);
  const ids = { title: useId(), choice: useId(), select: useId(), ack: useId() };
  const checkpoints = useCheckpoints(name);
  const newestFirst = useMemo(() => [...(checkpoints.data ?? [])].reverse(), [checkpoints.data]);
  const isUuid = initial !== "latest" && initial !== "none";
  const [choice, setChoice] = useState<"latest" | "none" | "checkpoint">(isUuid ? "checkpoint" : (initial as "latest" | "none"));
  const [picked, setPicked] = useState<string>(isUuid ? initial : "");
  const [dropAck, setDropAck] = useState(false);
  const dataflow = useDataflow(name);
  const operators = useMemo(
    () => (dataflow.data?.nodes ?? []).flatMap((n) => (n.operator ? [n.operator] : [])),
    [dataflow.data],
  );
  const refused = useMemo(() => refusedOperators(pipeline.error), [pipeline.error]);
  const [dropOps, setDropOps] = useState<string[]>(refused);
  const dropping = operators.filter((op) => dropOps.includes(op));

  // The select defaults to the newest checkpoint once the list is in.
  const chosen = picked || newestFirst[0]?.uuid || "";
  const chosenCp = newestFirst.find((c) => c.uuid === chosen);
  const newest = newestFirst[0];
  const restorePoint = pipeline.restore_point ? newestFirst.find((c) => c.uuid === pipeline.restore_point) : undefined;

  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => {
      if (d?.open) d.close();
    };
  }, []);

  const start = useMutation({
    meta: { inlineErrors: true },
    mutationFn: (from: StartFrom) =>
      ok(
        api.POST("/api/v1/pipelines/{name}/start", {
          params: {
            path: { name },
            query: { from_checkpoint: from, ...(from !== "none" && dropping.length ? { drop_state: dropping } : {}) },
          },
        }),
      ),
    onSuccess: (_p, from) => {
      const what = from === "latest" ? "" : from === "none" ? " with empty state" : ` from checkpoint ${shortId(from)}`;
      showToast("info", `Starting ${name}${what}…`);
      onClose();
    },
    onSettled: () => invalidatePipeline(qc, name),
  });

  const from: StartFrom | null = choice === "checkpoint" ? (chosenCp ? chosenCp.uuid : null) : choice;
  const blocked = from === null || (choice === "none" && !dropAck) || start.isPending;

  let latestNote: string;
  if (pipeline.restore_point) {
    latestNote = `checkpoint ${shortId(pipeline.restore_point)}${restorePoint ? ` (step ${restorePoint.step})` : ""}, chosen by a restore`;
  } else if (newest) {
    latestNote = `checkpoint ${shortId(newest.uuid)} (step ${newest.step})`;
  } else {
    latestNote = checkpoints.data ? "no checkpoint yet: empty state" : "…";
  }

  return (
    <dialog
      ref={ref}
      className="dialog dialog-wide"
      aria-labelledby={ids.title}
      data-testid="start-dialog"
      onCancel={(e) => {
        e.preventDefault();
        onClose();
      }}
    >
      <form
        method="dialog"
        onSubmit={(e) => {
          e.preventDefault();
          if (!blocked && from !== null) start.mutate(from);
        }}
      >
        <h2 id={ids.title}>Start “{name}”</h2>
        <fieldset className="dialog-body choices">
          <legend>Restore the state from</legend>
          <label className="choice">
            <input
              type="radio"
              name={ids.choice}
              value="latest"
              checked={choice === "latest"}
              onChange={() => setChoice("latest")}
              data-testid="start-from-latest"
            />
            <span>
              The latest checkpoint <span className="muted small">({latestNote})</span>
            </span>
          </label>
          <label className="choice">
            <input
              type="radio"
              name={ids.choice}
              value="checkpoint"
              checked={choice === "checkpoint"}
              onChange={() => setChoice("checkpoint")}
              disabled={newestFirst.length === 0}
              data-testid="start-from-checkpoint"
            />
            <span>A retained checkpoint{newestFirst.length === 0 && <span className="muted small"> (none yet)</span>}</span>
          </label>
          {newestFirst.length > 0 && (
            <div className="choice-detail">
              <label htmlFor={ids.select} className="sr-only">
                Checkpoint to start from
              </label>
              <select
                id={ids.select}
                value={chosen}
                onChange={(e) => {
                  setPicked(e.target.value);
                  setChoice("checkpoint");
                }}
                data-testid="start-checkpoint-select"
              >
                {newestFirst.map((c) => (
                  <option key={c.uuid} value={c.uuid}>
                    {describe(c)}
                  </option>
                ))}
              </select>
            </div>
          )}
          {choice === "checkpoint" && picked && !chosenCp && checkpoints.data && (
            <p className="note note-warn small">Checkpoint {shortId(picked)} is gone (gc, retention or deleted): pick another.</p>
          )}
          <label className="choice">
            <input
              type="radio"
              name={ids.choice}
              value="none"
              checked={choice === "none"}
              onChange={() => setChoice("none")}
              data-testid="start-from-none"
            />
            <span>No checkpoint: fresh, empty state</span>
          </label>
          {choice === "none" && (
            <div className="note note-warn choice-detail" role="status">
              <p>
                The state is dropped: the pipeline starts over at step 0 with empty state and reads its source from the
                beginning. The checkpoints stay.
              </p>
              <label htmlFor={ids.ack} className="checkbox">
                <input
                  id={ids.ack}
                  type="checkbox"
                  checked={dropAck}
                  onChange={(e) => setDropAck(e.target.checked)}
                  data-testid="start-drop-ack"
                />{" "}
                Drop the state and start fresh
              </label>
            </div>
          )}
          {choice !== "none" && operators.length > 0 && (
            <details className="choice-detail" open={refused.length > 0} data-testid="start-drop-state">
              <summary>Start some operators with empty state ({dropping.length} chosen)</summary>
              <p className="muted small">
                After a change to the query, the operators whose state no longer fits are named and the start is
                refused. Chosen ones start empty and see only input after the checkpoint; the others keep their state.
              </p>
              {operators.map((op) => (
                <label className="checkbox" key={op}>
                  <input
                    type="checkbox"
                    checked={dropOps.includes(op)}
                    onChange={(e) =>
                      setDropOps((ops) => (e.target.checked ? [...ops, op] : ops.filter((o) => o !== op)))
                    }
                    data-testid={`drop-state-${op}`}
                  />{" "}
                  <code>{op}</code>
                </label>
              ))}
            </details>
          )}
        </fieldset>
        <ErrorNote error={start.error} testId="start-error" />
        <ErrorNote error={checkpoints.error} />
        <div className="dialog-actions">
          <button type="button" className="btn" onClick={onClose} data-testid="start-cancel" autoFocus>
            Cancel
          </button>
          <button
            type="submit"
            className={`btn ${choice === "none" ? "btn-danger" : "btn-primary"}`}
            disabled={blocked}
            data-testid="start-confirm"
          >
            {start.isPending ? "Starting…" : choice === "none" ? "Start with empty state" : "Start"}
          </button>
        </div>
      </form>
    </dialog>
  );
}
