import type { OperationStatus, PipelineState, RunState } from "../api/types";

type State = PipelineState | RunState | OperationStatus;

const TONE: Record<State, string> = {
  running: "ok",
  succeeded: "ok",
  finished: "muted",
  starting: "warn",
  restarting: "warn",
  stopping: "warn",
  pending: "warn",
  paused: "info",
  stopped: "muted",
  failed: "bad",
  lost: "bad",
};

export function StateBadge({ state, testId = "state-badge" }: { state: State; testId?: string }) {
  return (
    <span className={`badge badge-${TONE[state] ?? "muted"}`} data-testid={testId} data-state={state}>
      {state}
    </span>
  );
}
