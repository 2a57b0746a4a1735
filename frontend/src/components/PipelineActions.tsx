import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link } from "react-router";
import { api, ok } from "../api/client";
import { invalidatePipeline, keys } from "../api/queries";
import type { Pipeline } from "../api/types";
import { pauseAction, refusedOperators, STARTABLE, STOPPABLE } from "../lib/lifecycle";
import { showToast } from "../lib/toast";
import { ConfirmDialog } from "./ConfirmDialog";
import { StartDialog } from "./StartDialog";

/** Start (from the latest checkpoint; `startOptions` adds "Start from…"), stop, pause or
 * resume, edit and delete (with a confirmation) of one pipeline. */
export function PipelineActions({
  pipeline,
  onDeleted,
  showEdit = false,
  startOptions = false,
  compact = false,
}: {
  pipeline: Pipeline;
  onDeleted?: () => void;
  showEdit?: boolean;
  startOptions?: boolean;
  compact?: boolean;
}) {
  const qc = useQueryClient();
  const name = pipeline.name;
  const [confirmDelete, setConfirmDelete] = useState(false);
  const [startDialog, setStartDialog] = useState(false);
  const params = { params: { path: { name } } };

  const start = useMutation({
    mutationFn: () => ok(api.POST("/api/v1/pipelines/{name}/start", params)),
    onSuccess: () => showToast("info", `Starting ${name}…`),
    onSettled: () => invalidatePipeline(qc, name),
  });
  const stop = useMutation({
    mutationFn: () => ok(api.POST("/api/v1/pipelines/{name}/stop", params)),
    onSuccess: () => showToast("info", `Stopping ${name}…`),
    onSettled: () => invalidatePipeline(qc, name),
  });
  const pauseResume = useMutation({
    mutationFn: (action: "pause" | "resume") =>
      action === "pause"
        ? ok(api.POST("/api/v1/pipelines/{name}/pause", params))
        : ok(api.POST("/api/v1/pipelines/{name}/resume", params)),
    onSuccess: (p, action) => {
      qc.setQueryData(keys.pipeline(name), p);
      showToast("info", action === "pause" ? `Pausing ${name}…` : `Resuming ${name}…`);
    },
    onSettled: () => invalidatePipeline(qc, name),
  });
  const remove = useMutation({
    meta: { inlineErrors: true },
    mutationFn: () => ok(api.DELETE("/api/v1/pipelines/{name}", params)),
    onSuccess: () => {
      setConfirmDelete(false);
      showToast("success", `Deleted ${name}.`);
      qc.removeQueries({ queryKey: keys.pipeline(name) });
      onDeleted?.();
    },
    onSettled: () => qc.invalidateQueries({ queryKey: keys.pipelines }),
  });

  const state = pipeline.state;
  const size = compact ? " btn-small" : "";
  const canPause = pauseAction(pipeline);
  // One button that toggles (it keeps focus): Resume once a pause was asked for.
  const showResume = canPause === "resume";
  return (
    <div className="actions">
      <button
        type="button"
        className={`btn btn-primary${size}`}
        // A start refused for operators whose state no longer fits would be refused again:
        // the dialog offers to drop their state.
        onClick={() => (startOptions && refusedOperators(pipeline.error).length ? setStartDialog(true) : start.mutate())}
        disabled={!STARTABLE.includes(state) || start.isPending}
        aria-label={compact ? `Start ${name}` : undefined}
        data-testid="btn-start"
      >
        Start
      </button>
      {startOptions && (
        <button
          type="button"
          className={`btn${size}`}
          onClick={() => setStartDialog(true)}
          disabled={!STARTABLE.includes(state)}
          aria-haspopup="dialog"
          data-testid="btn-start-from"
        >
          Start from…
        </button>
      )}
      <button
        type="button"
        className={`btn${size}`}
        // Not disabled while the request is out: a disabled button would drop the focus.
        onClick={() => canPause && !pauseResume.isPending && pauseResume.mutate(canPause)}
        disabled={canPause === null}
        aria-busy={pauseResume.isPending || undefined}
        title={
          showResume && state !== "paused"
            ? "Pausing: the job stops processing at its next poll"
            : !showResume && state === "paused"
              ? "Resuming: the job restarts processing at its next poll"
              : undefined
        }
        aria-label={compact ? `${showResume ? "Resume" : "Pause"} ${name}` : undefined}
        data-testid={showResume ? "btn-resume" : "btn-pause"}
      >
        {showResume ? "Resume" : "Pause"}
      </button>
      <button
        type="button"
        className={`btn${size}`}
        onClick={() => stop.mutate()}
        disabled={!STOPPABLE.includes(state) || stop.isPending}
        aria-label={compact ? `Stop ${name}` : undefined}
        data-testid="btn-stop"
      >
        Stop
      </button>
      {showEdit && (
        <Link className={`btn${size}`} to={`/pipelines/${encodeURIComponent(name)}/edit`} data-testid="btn-edit">
          Edit spec
        </Link>
      )}
      <button
        type="button"
        className={`btn btn-danger-outline${size}`}
        onClick={() => setConfirmDelete(true)}
        disabled={!STARTABLE.includes(state)}
        title={STARTABLE.includes(state) ? undefined : "Stop the pipeline before deleting it"}
        aria-label={compact ? `Delete ${name}` : undefined}
        data-testid="btn-delete"
      >
        Delete
      </button>
      {startDialog && <StartDialog pipeline={pipeline} onClose={() => setStartDialog(false)} />}
      <ConfirmDialog
        open={confirmDelete}
        title={`Delete pipeline “${name}”?`}
        confirmLabel="Delete pipeline"
        danger
        busy={remove.isPending}
        error={remove.error}
        onConfirm={() => remove.mutate()}
        onCancel={() => {
          setConfirmDelete(false);
          remove.reset();
        }}
      >
        <p>
          This removes the pipeline, its run history, its checkpoints and its storage. It cannot be undone.
          Deleting needs an <strong>admin</strong> token.
        </p>
      </ConfirmDialog>
    </div>
  );
}
