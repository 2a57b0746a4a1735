// Which lifecycle actions a pipeline's state allows (as backend/services/lifecycle.py does).
import type { Pipeline, PipelineState } from "../api/types";

/** Start (and delete, and start from a chosen checkpoint) need a pipeline that is down. */
export const STARTABLE: readonly PipelineState[] = ["stopped", "failed"];
export const STOPPABLE: readonly PipelineState[] = ["running", "starting", "paused", "restarting"];

/** Pause and resume set the desired state of a pipeline that should be up (desired
 * running or paused; the API answers 409 otherwise); the job stops or restarts processing
 * at its next poll and the state follows. Which of the two applies, or neither. */
export function pauseAction(p: Pick<Pipeline, "desired_state">): "pause" | "resume" | null {
  if (p.desired_state === "running") return "pause";
  if (p.desired_state === "paused") return "resume";
  return null;
}

/** The operators a start was refused for, from the pipeline's error: "the state of a, b no
 * longer fits" (workers/runtime/restore.py). */
export function refusedOperators(error: string | null | undefined): string[] {
  const m = /the state of (.+?) no longer fits/.exec(error ?? "");
  return m?.[1] ? m[1].split(", ") : [];
}
