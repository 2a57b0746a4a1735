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

describe("mapFieldErrors: positions in the SQL text", () => {
  // The position of (line, col) in `text`, as "line:col" (1-based), and what is there.
  function at(text: string, message: string, field = "sql"): [string, string] {
    const p = mapFieldErrors([{ field, message }], text)[0];
    expect(p?.message).toBe(message);
    const line = text.split("\n")[(p?.line ?? 0) - 1] ?? "";
    return [`${p?.line}:${p?.col}`, line.slice((p?.col ?? 1) - 1)];
  }
  const head = "name: q\nsource: {kind: datagen, generator: nexmark, table: events}\n";

  it("maps a block scalar indented by 2", () => {
    const text = `${head}sql: |\n  CREATE VIEW v AS\n    SELECT auctoin\n    FROM events\nsinks: []\n`;
    expect(at(text, "line 2, column 10: unknown column: auctoin")).toEqual(["5:12", "auctoin"]);
    expect(at(text, "line 1, column 1: x")).toEqual(["4:3", "CREATE VIEW v AS"]);
    // A column past the line's end stays on the line.
    expect(at(text, "line 3, column 99: x")[0]).toBe("6:16");
  });

  it("maps a block scalar indented by 4, with chomping, leading blank lines and `spec.sql`", () => {
    const text = `${head}sql: |-\n\n    CREATE VIEW v AS\n      SELECT   auctoin FROM events\nsinks: []\n`;
    expect(at(text, "line 3, column 12: unknown column: auctoin")).toEqual(["6:16", "auctoin FROM events"]);
    expect(at(text, "line 3, column 12: m", "spec.sql")[0]).toBe("6:16");
    // An explicit indentation indicator.
    const explicit = `${head}sql: |2\n    SELECT x\n  FROM events\n`;
    expect(at(explicit, "line 2, column 6: m")).toEqual(["5:8", "events"]);
  });

  it("maps a folded block scalar by what its lines become", () => {
    const text = `${head}sql: >\n  CREATE VIEW v AS\n  SELECT auctoin\n\n  FROM events\n`;
    // Folded: lines 1 and 2 of the block are SQL line 1, the blank line makes a break.
    expect(at(text, "line 1, column 25: m")).toEqual(["5:10", "auctoin"]);
    expect(at(text, "line 2, column 6: m")).toEqual(["7:8", "events"]);
  });

  it("maps a quoted or plain one-line scalar, and a JSON string", () => {
    const quoted = `${head}sql: "CREATE VIEW v AS SELECT auctoin FROM events"\n`;
    expect(at(quoted, "line 1, column 25: unknown column: auctoin")).toEqual(["3:31", 'auctoin FROM events"']);
    const single = `${head}sql: 'CREATE VIEW v AS SELECT ''a'' AS s, auctoin FROM events'\n`;
    expect(at(single, "line 1, column 35: m")).toEqual(["3:43", "auctoin FROM events'"]);
    const plain = `${head}sql: CREATE VIEW v AS SELECT auctoin FROM events\n`;
    expect(at(plain, "line 1, column 25: m")).toEqual(["3:30", "auctoin FROM events"]);
    const json = '{\n  "name": "q",\n  "sql": "CREATE VIEW v AS\\n  SELECT \\"a\\", auctoin FROM events"\n}';
    expect(at(json, "line 2, column 15: m")).toEqual(["3:45", 'auctoin FROM events"']);
  });

  it("keeps the key's line for a message without a position, or for other fields", () => {
    const text = `${head}sql: |\n  CREATE VIEW v AS SELECT 1\n`;
    expect(at(text, "no view q5")[0]).toBe("3:1");
    expect(at(text, "line 1, column 3: m", "name")[0]).toBe("1:1");
    expect(at(text, "line 1 column 3: m")[0]).toBe("3:1");
    // A SQL position past the end of the text: its last line.
    expect(at(text, "line 7, column 1: m")[0]).toBe("4:3");
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
