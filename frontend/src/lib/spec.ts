// The spec editor's logic: parse YAML/JSON text, and place the API's field errors
// (`state.0.group_by`, and positions inside the `sql` text) on lines of that text.
import { isMap, isScalar, isSeq, LineCounter, parseDocument, Scalar, type Node } from "yaml";
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

/** A server message about the SQL text that starts with its position there:
 * `line 3, column 12: unknown column: auctoin` (both 1-based, relative to the SQL). */
const SQL_POSITION = /^line (\d+), column (\d+):/;

/** Server field errors with the line each field is on in `text`. A field that does not
 * exist in the text (a missing required key) points at its nearest existing parent. The
 * API prefixes request-level errors with `spec.`; those map into the spec as well. An
 * error on `sql` whose message starts with `line L, column C:` is put at that position of
 * the SQL text, translated to the document's line and column (the message is kept). */
export function mapFieldErrors(errors: readonly FieldError[], text: string): SpecProblem[] {
  const lc = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lc });
  const root = doc.errors.length ? null : doc.contents;
  const rootHasSpecKey = isMap(root) && root.has("spec");
  return errors.map((e) => {
    let path = segments(e.field);
    if (path[0] === "spec" && !rootHasSpecKey) path = path.slice(1);
    const found = root ? locate(root, path) : undefined;
    if (found === undefined) return { field: e.field || "(spec)", message: e.message };
    let offset = found.offset;
    const at = SQL_POSITION.exec(e.message);
    if (at && path.length === 1 && path[0] === "sql" && found.value) {
      offset = sqlOffset(text, found.value, Number(at[1]), Number(at[2])) ?? offset;
    }
    const pos = lc.linePos(offset);
    return { field: e.field || "(spec)", message: e.message, line: pos.line, col: pos.col };
  });
}

/** The deepest node along `path`: the text offset it is at (a key's own position for a
 * mapping entry), and the node itself when the whole path exists; undefined when not even
 * the first segment exists. */
function locate(root: Node, path: (string | number)[]): { offset: number; value?: Node } | undefined {
  let node: unknown = root;
  let found: number | undefined;
  let depth = 0;
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
    depth++;
  }
  if (found === undefined) return undefined;
  return depth === path.length && node && typeof node === "object" ? { offset: found, value: node as Node } : { offset: found };
}

/** The offset in `text` of 1-based `line`/`column` of a string scalar's value (the SQL
 * text), or undefined when `node` is no string scalar. Block scalars (`|`, `|-`, `>`):
 * the value's line 1 is the first line after the header, columns shifted by the block's
 * indentation. Flow scalars (plain, quoted, JSON strings): the value's characters are
 * followed back to the source (quotes, escapes, folded line breaks). If the value read
 * back differs from what the YAML parser made of it, the block rule, or the value's
 * start, is used. */
function sqlOffset(text: string, node: Node, line: number, column: number): number | undefined {
  if (!isScalar(node) || typeof node.value !== "string" || !node.range) return undefined;
  const [start, end] = node.range;
  const block = node.type === Scalar.BLOCK_LITERAL || node.type === Scalar.BLOCK_FOLDED;
  const read = block ? readBlock(text, start, end, node.type === Scalar.BLOCK_FOLDED) : readFlow(text, start, end);
  if (!read) return start;
  const same = trimEnd(read.value) === trimEnd(node.value);
  if (!same && !block) return start;
  if (!same) {
    // SQL line L taken as the block's L-th line.
    const first = read.lines[0];
    if (first === undefined) return start;
    const target = read.lines[Math.min(line, read.lines.length) - 1] ?? first;
    return Math.min(target.start + read.indent + Math.max(0, column - 1), target.end);
  }
  const index = indexOf(read.value, line, column);
  if (index < read.offsets.length) return read.offsets[index];
  return read.offsets.length ? (read.offsets[read.offsets.length - 1] ?? start) + 1 : start;
}

function trimEnd(s: string): string {
  return s.replace(/\s+$/, "");
}

/** The index in `value` of 1-based `line`/`column` (clamped to the line's end, and to the
 * last line). */
function indexOf(value: string, line: number, column: number): number {
  let i = 0;
  for (let l = 1; l < line; l++) {
    const nl = value.indexOf("\n", i);
    if (nl < 0) break;
    i = nl + 1;
  }
  const nl = value.indexOf("\n", i);
  const lineEnd = nl < 0 ? value.length : nl;
  return Math.min(i + Math.max(0, column - 1), lineEnd);
}

interface Read {
  /** The value as read back, and for each of its characters the offset in the text. */
  value: string;
  offsets: number[];
  /** Block scalars: the block's indentation and its lines' [start, end) in the text. */
  indent: number;
  lines: { start: number; end: number }[];
}

/** A block scalar's value from its header at `start` to `end`, with offsets. */
function readBlock(text: string, start: number, end: number, folded: boolean): Read | undefined {
  const headerEnd = text.indexOf("\n", start);
  if (headerEnd < 0 || headerEnd >= end) return undefined;
  const header = text.slice(start, headerEnd);
  const lines: { start: number; end: number }[] = [];
  for (let s = headerEnd + 1; s < end; ) {
    const nl = text.indexOf("\n", s);
    const e = nl < 0 || nl > end ? end : nl;
    lines.push({ start: s, end: e });
    s = e + 1;
  }
  // An explicit indentation indicator (`|2`, `>-4`) counts from the parent's indentation
  // (taken as the header line's); otherwise the first non-empty line sets it.
  const explicit = /^[|>][+-]?([1-9])/.exec(header);
  let indent: number;
  if (explicit) {
    const lineStart = text.lastIndexOf("\n", start - 1) + 1;
    const parent = /^ */.exec(text.slice(lineStart, start))?.[0].length ?? 0;
    indent = parent + Number(explicit[1]);
  } else {
    const first = lines.find((l) => text.slice(l.start, l.end).trim() !== "");
    indent = first ? (/^ */.exec(text.slice(first.start, first.end))?.[0].length ?? 0) : 0;
  }
  let value = "";
  const offsets: number[] = [];
  let prevFoldable = false;
  let pendingBreak = -1; // offset of the line break not yet written (folded scalars)
  let blanks = 0;
  lines.forEach((l, i) => {
    const raw = text.slice(l.start, l.end);
    const isBlank = raw.length <= indent ? raw.trim() === "" : false;
    const content = isBlank ? "" : raw.slice(indent);
    if (!folded) {
      if (i > 0) {
        value += "\n";
        offsets.push(l.start - 1);
      }
      for (let k = 0; k < content.length; k++) offsets.push(l.start + indent + k);
      value += content;
      return;
    }
    if (isBlank) {
      blanks++;
      return;
    }
    const foldable = !/^[ \t]/.test(content);
    if (pendingBreak >= 0) {
      if (blanks === 0 && prevFoldable && foldable) {
        value += " ";
        offsets.push(pendingBreak);
      } else {
        const n = prevFoldable && foldable ? blanks : blanks + 1;
        for (let k = 0; k < n; k++) {
          value += "\n";
          offsets.push(pendingBreak);
        }
      }
    } else {
      for (let k = 0; k < blanks; k++) {
        value += "\n";
        offsets.push(l.start - 1);
      }
    }
    for (let k = 0; k < content.length; k++) offsets.push(l.start + indent + k);
    value += content;
    prevFoldable = foldable;
    pendingBreak = l.end;
    blanks = 0;
  });
  return { value, offsets, indent, lines };
}

const ESCAPES: Record<string, string> = {
  "0": "\0", a: "\x07", b: "\b", t: "\t", "\t": "\t", n: "\n", v: "\v", f: "\f", r: "\r",
  e: "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\", N: "\x85", _: "\xa0", L: "\u2028", P: "\u2029",
};
const HEX_DIGITS: Record<string, number> = { x: 2, u: 4, U: 8 };

/** A flow scalar's value (plain, 'single' or "double" quoted) in `text[start, end)`,
 * with the offset each character came from. */
function readFlow(text: string, start: number, end: number): Read | undefined {
  const quote = text[start];
  const double = quote === '"';
  const single = quote === "'";
  let i = double || single ? start + 1 : start;
  const stop = double || single ? end - 1 : end;
  let value = "";
  const offsets: number[] = [];
  // Characters that folding may trim (unescaped spaces and tabs before a line break).
  let trimmable = 0;
  const emit = (s: string, at: number, space: boolean) => {
    value += s;
    for (let k = 0; k < s.length; k++) offsets.push(at);
    trimmable = space ? trimmable + s.length : 0;
  };
  while (i < stop) {
    const ch = text[i] ?? "";
    if (ch === "\n" || ch === "\r") {
      // Line folding: trailing blanks go, the break becomes a space, or n newlines for n
      // empty lines after it; the next line's leading blanks go too.
      value = value.slice(0, value.length - trimmable);
      offsets.length -= trimmable;
      trimmable = 0;
      const at = i;
      let breaks = 0;
      let j = i;
      for (;;) {
        if (text[j] === "\r") j++;
        if (text[j] !== "\n") break;
        j++;
        breaks++;
        while (j < stop && (text[j] === " " || text[j] === "\t")) j++;
      }
      if (breaks === 1) emit(" ", at, false);
      else for (let k = 1; k < breaks; k++) emit("\n", at, false);
      i = j;
      continue;
    }
    if (double && ch === "\\") {
      const next = text[i + 1] ?? "";
      if (next === "\n" || next === "\r") {
        // An escaped line break: joined without a space.
        let j = i + 1;
        if (text[j] === "\r") j++;
        if (text[j] === "\n") j++;
        while (j < stop && (text[j] === " " || text[j] === "\t")) j++;
        trimmable = 0;
        i = j;
        continue;
      }
      const digits = HEX_DIGITS[next];
      if (digits !== undefined) {
        const code = Number.parseInt(text.slice(i + 2, i + 2 + digits), 16);
        if (Number.isNaN(code)) return undefined;
        emit(String.fromCodePoint(code), i, false);
        i += 2 + digits;
        continue;
      }
      const escaped = ESCAPES[next];
      if (escaped === undefined) return undefined;
      emit(escaped, i, false);
      i += 2;
      continue;
    }
    if (single && ch === "'" && text[i + 1] === "'") {
      emit("'", i, false);
      i += 2;
      continue;
    }
    emit(ch, i, ch === " " || ch === "\t");
    i++;
  }
  return { value, offsets, indent: 0, lines: [] };
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
