import { describe, expect, it } from "vitest";
import { composeProblems, lineRange, mapFieldErrors, parseSpec, type SpecProblem } from "./spec";

const SPEC = `name: clicks
source:
  kind: datagen
  generator: clicks
state:
  - name: per_user
    kind: aggregate
    group_by: [user]
sinks:
  - {name: out, kind: view, from: per_user}
`;

describe("parseSpec", () => {
  it("parses YAML and JSON into an object", () => {
    const y = parseSpec(SPEC);
    expect(y.ok && y.spec.name).toBe("clicks");
    const j = parseSpec('{"name": "x", "state": [{"kind": "distinct"}]}');
    expect(j.ok && j.spec.state).toEqual([{ kind: "distinct" }]);
  });

  it("reports syntax errors with their line", () => {
    const r = parseSpec("name: x\nsource: {kind: datagen\nstate: []\n");
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.problems[0]?.field).toBe("(syntax)");
    expect(r.problems[0]?.line).toBeGreaterThanOrEqual(2);
    expect(r.problems[0]?.message).not.toMatch(/at line \d+/); // the line is its own field
    expect(parseSpec("- a\n- b\n").ok).toBe(false);
    expect(parseSpec("   ").ok).toBe(false);
    expect(parseSpec("a: 1\na: 2\n").ok).toBe(false);
  });
});

describe("mapFieldErrors", () => {
  it("puts each server error on the line of its field", () => {
    const got = mapFieldErrors(
      [
        { field: "state.0.group_by", message: "unknown column" },
        { field: "sinks.0.from", message: "no such state" },
        { field: "spec.name", message: "already used" },
        { field: "source.rows_per_second", message: "must be positive" },
        { field: "(spec)", message: "something about the whole spec" },
        { field: "trigger.interval", message: "missing" },
      ],
      SPEC,
    );
    expect(got.map((g) => [g.field, g.line])).toEqual([
      ["state.0.group_by", 8],
      ["sinks.0.from", 10],
      ["spec.name", 1],
      ["source.rows_per_second", 2], // missing: its parent, source
      ["(spec)", undefined],
      ["trigger.interval", undefined],
    ]);
    expect(got[0]?.message).toBe("unknown column");
  });

  it("works on JSON text and on unparsable text", () => {
    const json = '{\n  "name": "x",\n  "state": [\n    {"kind": "aggregate", "group_by": []}\n  ]\n}';
    expect(mapFieldErrors([{ field: "state.0.group_by", message: "m" }], json)[0]?.line).toBe(4);
    expect(mapFieldErrors([{ field: "name", message: "m" }], "a: [")[0]).toEqual({ field: "name", message: "m" });
  });
});

describe("lineRange", () => {
  it("selects a line", () => {
    const t = "ab\ncd\nef";
    expect(lineRange(t, 2)).toEqual([3, 5]);
    expect(lineRange(t, 3)).toEqual([6, 8]);
    expect(lineRange(t, 9)).toEqual([8, 8]);
  });
});

describe("composeProblems", () => {
  const syn: SpecProblem = { field: "(syntax)", message: "bad", line: 2, source: "syntax" };
  const sch: SpecProblem = { field: "state.0.group_by", message: "must be a list", line: 8, source: "schema" };
  const srv: SpecProblem = { field: "state.0.group_by", message: "Input should be a valid list", line: 8, source: "server" };
  const ref: SpecProblem = { field: "sinks.0.from", message: "not an operator", line: 10, source: "server" };

  it("lets the server's answer about this text win", () => {
    expect(composeProblems("t", [], [sch], { problems: [srv, ref], text: "t" })).toEqual([srv, ref]);
    expect(composeProblems("t", [], [sch], { problems: [], text: "t" })).toEqual([]);
  });

  it("shows syntax errors, else schema errors, then the stale server errors on other fields", () => {
    expect(composeProblems("t2", [syn], [sch], null)).toEqual([syn]);
    expect(composeProblems("t2", [], [sch], null)).toEqual([sch]);
    expect(composeProblems("t2", [], [sch], { problems: [srv, ref], text: "t" })).toEqual([sch, ref]);
    expect(composeProblems("t2", [], [], { problems: [srv], text: "t" })).toEqual([srv]);
  });
});
