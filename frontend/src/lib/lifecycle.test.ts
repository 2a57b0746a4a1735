import { describe, expect, it } from "vitest";
import { pauseAction, refusedOperators, STARTABLE, STOPPABLE } from "./lifecycle";

describe("lifecycle actions", () => {
  it("pauses what should run and resumes what is paused", () => {
    expect(pauseAction({ desired_state: "running" })).toBe("pause");
    expect(pauseAction({ desired_state: "paused" })).toBe("resume");
    expect(pauseAction({ desired_state: "stopped" })).toBeNull();
  });

  it("starts only what is down, stops only what is up", () => {
    expect(STARTABLE).toEqual(["stopped", "failed"]);
    for (const s of STARTABLE) expect(STOPPABLE).not.toContain(s);
    expect(STOPPABLE).toContain("paused");
  });

  it("reads the operators a start was refused for from the pipeline's error", () => {
    const error =
      "run 3 failed (exit 5): the pipeline changed since checkpoint 1b2c (step 40): the state " +
      "of q5.agg0, q5.join3 no longer fits the query (new or changed operators, ...)";
    expect(refusedOperators(error)).toEqual(["q5.agg0", "q5.join3"]);
    expect(refusedOperators("run 3 failed (exit 1)")).toEqual([]);
    expect(refusedOperators(null)).toEqual([]);
  });
});
