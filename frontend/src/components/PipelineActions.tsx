import { useMutation, useQueryClient } from "@tanstack/react-query";
import { useState } from "react";
import { Link } from "react-router";
import { api, ok } from "../api/client";
import { invalidatePipeline, keys } from "../api/queries";
import type { Pipeline, PipelineState } from "../api/types";
import { showToast } from "../lib/toast";
import { ConfirmDialog } from "./ConfirmDialog";

const STARTABLE: readonly PipelineState[] = ["stopped", "failed"];
const STOPPABLE: readonly PipelineState[] = ["running", "starting", "paused", "restarting"];

/** Start, stop, edit and delete (with a confirmation) of one pipeline. */
export function PipelineActions({
  pipeline,
  onDeleted,
  showEdit = false,
  compact = false,
}: {
  pipeline: Pipeline;
  onDeleted?: () => void;
  showEdit?: boolean;
  compact?: boolean;
}) {
  const qc = useQueryClient();
  const name = pipeline.name;
  const [confirmDelete, setConfirmDelete] = useState(false);
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
  return (
    <div className="actions">
      <button
        type="button"
        className={`btn btn-primary${size}`}
        onClick={() => start.mutate()}
        disabled={!STARTABLE.includes(state) || start.isPending}
        aria-label={compact ? `Start ${name}` : undefined}
        data-testid="btn-start"
      >
        Start
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
