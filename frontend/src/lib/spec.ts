// The spec editor's logic: parse YAML/JSON text, and place the API's field errors
// (`state.0.group_by`) on lines of that text.
import { isMap, isScalar, isSeq, LineCounter, parseDocument, type Node } from "yaml";
import type { FieldError } from "../api/types";

export interface SpecProblem {
  /** The spec field the server named ("state.0.group_by"), or "(syntax)" for YAML errors. */
  field: string;
  message: string;
  /** 1-based line of the text the problem is on (or nearest to), when known. */
  line?: number;
  col?: number;
  /** Who found it: the YAML parser, the browser's schema check, or the server. */
  source?: "syntax" | "schema" | "server";
}

export type Parsed =
  | { ok: true; spec: Record<string, unknown> }
  | { ok: false; problems: SpecProblem[] };

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The spec text (YAML, or JSON, which is YAML) as an object, or its syntax errors. */
export function parseSpec(text: string): Parsed {
  if (text.trim() === "") {
    return { ok: false, problems: [{ field: "(syntax)", message: "the spec is empty" }] };
  }
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length) {
    return {
      ok: false,
      problems: doc.errors.map((e) => {
        const pos = e.linePos?.[0];
        return {
          field: "(syntax)",
          // prettyErrors appends a code excerpt after the first line; the editor shows the line.
          message: (e.message.split("\n")[0] ?? e.message).replace(/ at line \d+, column \d+:?$/, ""),
          ...(pos ? { line: pos.line, col: pos.col } : {}),
        };
      }),
    };
  }
  const value: unknown = doc.toJS();
  if (!isPlainObject(value)) {
    return {
      ok: false,
      problems: [{ field: "(syntax)", message: "the spec must be a mapping (name, source, state, sinks...)", line: 1 }],
    };
  }
  return { ok: true, spec: value };
}

function segments(field: string): (string | number)[] {
  if (!field || field === "(spec)" || field === "(body)") return [];
  return field.split(".").map((p) => (/^\d+$/.test(p) ? Number(p) : p));
}

/** Server field errors with the line each field is on in `text`. A field that does not
 * exist in the text (a missing required key) points at its nearest existing parent. The
 * API prefixes request-level errors with `spec.`; those map into the spec as well. */
export function mapFieldErrors(errors: readonly FieldError[], text: string): SpecProblem[] {
  const lc = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lc });
  const root = doc.errors.length ? null : doc.contents;
  const rootHasSpecKey = isMap(root) && root.has("spec");
  return errors.map((e) => {
    let path = segments(e.field);
    if (path[0] === "spec" && !rootHasSpecKey) path = path.slice(1);
    const offset = root ? locate(root, path) : undefined;
    if (offset === undefined) return { field: e.field || "(spec)", message: e.message };
    const pos = lc.linePos(offset);
    return { field: e.field || "(spec)", message: e.message, line: pos.line, col: pos.col };
  });
}

/** The text offset of the deepest node along `path` (a key's own position for a mapping
 * entry); undefined when not even the first segment exists. */
function locate(root: Node, path: (string | number)[]): number | undefined {
  let node: unknown = root;
  let found: number | undefined;
  for (const seg of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === String(seg));
      if (!pair) break;
      const key = pair.key as Node;
      found = key.range?.[0] ?? found;
      node = pair.value;
    } else if (isSeq(node) && typeof seg === "number") {
      const item: unknown = node.items[seg];
      if (!item || typeof item !== "object" || !("range" in item)) break;
      found = (item as Node).range?.[0] ?? found;
      node = item;
    } else {
      break;
    }
  }
  return found;
}

/** What the editor lists. What the server said about this very text wins (it is
 * authoritative, and may accept what the browser's check would not); otherwise the
 * syntax errors, else the schema check's, then what the server said about an earlier text
 * (stale) unless the schema check has a problem on that field now. */
export function composeProblems(
  text: string,
  syntax: readonly SpecProblem[],
  schema: readonly SpecProblem[],
  server: { problems: readonly SpecProblem[]; text: string } | null,
): SpecProblem[] {
  if (server && server.text === text) return [...server.problems];
  const local = syntax.length ? syntax : schema;
  const fields = new Set(local.map((p) => p.field));
  return [...local, ...(server?.problems ?? []).filter((p) => !fields.has(p.field))];
}

/** The [start, end) character offsets of 1-based `line` in `text`, to select it. */
export function lineRange(text: string, line: number): [number, number] {
  let start = 0;
  for (let l = 1; l < line; l++) {
    const nl = text.indexOf("\n", start);
    if (nl < 0) return [text.length, text.length];
    start = nl + 1;
  }
  const end = text.indexOf("\n", start);
  return [start, end < 0 ? text.length : end];
}
