import { describe, expect, it } from "vitest";
import { pauseAction, STARTABLE, STOPPABLE } from "./lifecycle";

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
});
