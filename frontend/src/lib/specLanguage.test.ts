import { Text } from "@codemirror/state";
import { highlightTree } from "@lezer/highlight";
import { describe, expect, it } from "vitest";
import { specHighlighter, specLanguage, toDiagnostics } from "./specLanguage";

/** Each highlighted token of `text` as "class:text". */
function tokens(text: string): string[] {
  const tree = specLanguage.parser.parse(text);
  const out: string[] = [];
  highlightTree(tree, specHighlighter, (from, to, classes) => out.push(`${classes}:${text.slice(from, to)}`));
  return out;
}

describe("specLanguage", () => {
  it("highlights YAML, and the top-level sql block as SQL", () => {
    const got = tokens("name: q5 # hot items\nsql: |\n  CREATE VIEW v AS\n    SELECT auction, 'x' FROM bid\nsinks: []\n");
    expect(got).toContain("tok-key:name");
    expect(got).toContain("tok-comment:# hot items");
    expect(got).toContain("tok-keyword:CREATE");
    expect(got).toContain("tok-keyword:SELECT");
    expect(got).toContain("tok-keyword:FROM");
    expect(got).toContain("tok-string:'x'");
    expect(got).toContain("tok-key:sinks"); // YAML again after the block
  });

  it("parses a one-line sql value as SQL, but not other keys", () => {
    expect(tokens('sql: "SELECT a FROM t"\n')).toContain("tok-keyword:SELECT");
    expect(tokens("sql: SELECT a FROM t\n")).toContain("tok-keyword:SELECT");
    expect(tokens('{"sql": "SELECT a FROM t"}')).toContain("tok-keyword:SELECT");
    expect(tokens("description: |\n  SELECT a FROM t\n")).not.toContain("tok-keyword:SELECT");
    expect(tokens("state:\n  - sql: |\n      SELECT a\n")).not.toContain("tok-keyword:SELECT");
  });
});

describe("toDiagnostics", () => {
  const doc = Text.of(["name: q5", "sql: |", "  SELECT c.auctoin, c.num", "", "sinks: []"]);
  const marked = (p: Parameters<typeof toDiagnostics>[1][number]) =>
    toDiagnostics(doc, [p]).map((d) => [doc.sliceString(d.from, d.to), d.severity, d.message]);

  it("marks the word at the column, else the whole line", () => {
    expect(marked({ field: "sql", message: "line 1, column 10: unknown column", line: 3, col: 12, source: "server" })).toEqual([
      ["auctoin", "error", "sql: line 1, column 10: unknown column"],
    ]);
    expect(marked({ field: "sql", message: "m", line: 3, col: 10 })[0]?.[0]).toBe("c.auctoin");
    expect(marked({ field: "sinks", message: "m", line: 5 })[0]?.[0]).toBe("sinks: []");
    // Past the line's end, or on a blank: the whole line (which may be empty).
    expect(marked({ field: "name", message: "m", line: 1, col: 40 })[0]?.[0]).toBe("name: q5");
    expect(marked({ field: "(syntax)", message: "m", line: 4, col: 1 })[0]?.[0]).toBe("");
  });

  it("skips problems without a line and keeps lines past the end on the last one", () => {
    expect(toDiagnostics(doc, [{ field: "(spec)", message: "m" }])).toEqual([]);
    expect(marked({ field: "x", message: "m", line: 99 })[0]?.[0]).toBe("sinks: []");
  });
});
