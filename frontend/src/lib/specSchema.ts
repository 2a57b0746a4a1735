// The spec editor's as-you-type check against the pipeline spec's JSON Schema (a
// byte-for-byte copy of ../docs/pipeline-spec.schema.json: `npm run gen:schema`, checked by
// `npm run check:schema`). Ajv validates; its errors become the same `{field, message}`
// pairs the API returns (`state.0.group_by`), so the editor shows them the same way.
//
// The server stays authoritative (it also checks references between fields, and columns
// when the job plans the query). This check aims to say nothing the server would accept:
//  - pydantic's lax mode takes "7" for an integer and "yes" for a boolean: those type
//    errors are dropped;
//  - ajv's `discriminator` does not take `mapping` (the `kind` consts say the same).
import Ajv, { type ErrorObject } from "ajv";
import type { FieldError } from "../api/types";
import { mapFieldErrors, parseSpec, type SpecProblem } from "./spec";
import published from "./pipeline-spec.schema.json";

/** The durations the server parses (pipeline_spec/fields.py `_DURATION`), as the schema publishes
 * them: a failed match gets the server's wording. */
export const DURATION_PATTERN = "^\\s*(\\d+(?:\\.\\d+)?)\\s*(us|ms|s|m|h|d)\\s*$";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type JsonObject = { [k: string]: Json };

function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The published schema made fit for ajv (see the top of this file); pure. */
export function prepareSchema(schema: Json): Json {
  if (Array.isArray(schema)) return schema.map(prepareSchema);
  if (!isObject(schema)) return schema;
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === "discriminator" && isObject(v)) {
      out[k] = { propertyName: v.propertyName ?? "kind" };
      // A discriminated union is of objects; saying so keeps ajv's strictTypes quiet.
      if (!("type" in schema)) out.type = "object";
    } else {
      out[k] = prepareSchema(v);
    }
  }
  return out;
}

const schema = prepareSchema(published as unknown as Json);
let compiled: ReturnType<Ajv["compile"]> | null = null;

function validator() {
  if (!compiled) {
    const ajv = new Ajv({ allErrors: true, discriminator: true, verbose: true, strict: true });
    compiled = ajv.compile(schema as object);
  }
  return compiled;
}

/** A subschema with its local `$ref` ("#/$defs/DatagenSource") followed. */
function deref(s: Json | undefined): Json | undefined {
  if (!isObject(s) || typeof s.$ref !== "string" || !s.$ref.startsWith("#/")) return s;
  let node: Json | undefined = schema;
  for (const part of s.$ref.slice(2).split("/")) node = isObject(node) ? node[part] : undefined;
  return node;
}

/** The values of the tag property of a discriminated union's branches. */
function unionTags(union: unknown, tag: string): Json[] {
  const branches = isObject(union) && Array.isArray(union.oneOf) ? union.oneOf : [];
  return branches.flatMap((b) => {
    const props = (deref(b) as JsonObject | undefined)?.properties;
    const t = isObject(props) && isObject(props[tag]) ? props[tag].const : undefined;
    return t === undefined ? [] : [t];
  });
}

/** The spec's schema errors, as the API would name their fields; [] when it conforms. */
export function checkSpec(spec: unknown): FieldError[] {
  const validate = validator();
  if (validate(spec)) return [];
  return schemaErrors(validate.errors ?? []);
}

/** The schema problems of the spec text, each on its field's line (as the server's are),
 * sorted by line; [] when the text does not parse (parseSpec reports that). */
export function schemaProblems(text: string): SpecProblem[] {
  const parsed = parseSpec(text);
  if (!parsed.ok) return [];
  const problems = mapFieldErrors(checkSpec(parsed.spec), text).map((p) => ({ ...p, source: "schema" as const }));
  return problems.sort((a, b) => (a.line ?? Infinity) - (b.line ?? Infinity));
}

// --- ajv errors -> field errors ---------------------------------------------------------

interface Out extends FieldError {
  /** A type mismatch at the field itself (the value's kind is wrong): the types wanted. */
  types?: string[];
  /** A type mismatch pydantic's lax mode accepts ("7" for an integer): not an error. */
  lax?: boolean;
}

const TYPE_WORDS: Record<string, string> = {
  array: "a list",
  boolean: "true or false",
  integer: "an integer",
  null: "null",
  number: "a number",
  object: "a mapping",
  string: "a string",
};

const BOOL_WORDS = new Set(["0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"]);

/** What pydantic (lax mode) converts without complaint. */
function laxAccepts(expected: string, data: unknown): boolean {
  if (typeof data === "string") {
    const s = data.trim();
    if (expected === "integer") return /^[+-]?\d+$/.test(s);
    if (expected === "number") return /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(s);
    if (expected === "boolean") return BOOL_WORDS.has(s.toLowerCase());
  }
  if (expected === "boolean" && (data === 0 || data === 1)) return true;
  if ((expected === "number" || expected === "integer") && typeof data === "boolean") return true;
  return false;
}

/** "/state/0/group_by" -> "state.0.group_by" (JSON pointer, unescaped). */
export function pointerToField(pointer: string, child?: string): string {
  const parts = pointer
    .split("/")
    .slice(1)
    .map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
  if (child !== undefined) parts.push(child);
  return parts.length ? parts.join(".") : "(spec)";
}

function quoteList(values: readonly unknown[]): string {
  return values.map((v) => JSON.stringify(v)).join(", ");
}

function typesText(types: readonly string[]): string {
  const uniq = [...new Set(types)];
  return "must be " + uniq.map((t) => TYPE_WORDS[t] ?? t).join(" or ");
}

function plain(e: ErrorObject): Out {
  const field = pointerToField(e.instancePath);
  const p = e.params as Record<string, unknown>;
  switch (e.keyword) {
    case "required":
      return { field: pointerToField(e.instancePath, String(p.missingProperty)), message: "required field is missing" };
    case "additionalProperties":
      return { field: pointerToField(e.instancePath, String(p.additionalProperty)), message: "unknown field" };
    case "type": {
      const types = String(p.type).split(",");
      const lax = types.some((t) => laxAccepts(t, e.data));
      return { field, message: typesText(types), types, lax };
    }
    case "minItems":
      return { field, message: `must have at least ${String(p.limit)} item${p.limit === 1 ? "" : "s"}` };
    case "enum":
      return { field, message: `must be one of ${quoteList((p.allowedValues as unknown[]) ?? [])}` };
    case "const":
      return { field, message: `must be ${JSON.stringify(p.allowedValue)}` };
    case "pattern":
      if (p.pattern === DURATION_PATTERN) {
        return { field, message: `${JSON.stringify(e.data)} is not a duration like 500ms, 10s, 5m, 1h or 7d` };
      }
      return { field, message: `must match the pattern ${String(p.pattern)}` };
    case "discriminator": {
      const tag = String(p.tag);
      const tags = unionTags(e.parentSchema, tag);
      const missing = isObject(e.data) && !(tag in e.data);
      // The API names the union (`source`, `state.2`), not its tag.
      return {
        field,
        message: `${missing ? `needs "${tag}"` : `"${tag}" must be`}: one of ${quoteList(tags)}`,
      };
    }
    default:
      return { field, message: e.message ?? e.keyword };
  }
}

const COMBINATORS = new Set(["anyOf", "oneOf"]);
const isCombinator = (e: ErrorObject) => COMBINATORS.has(e.keyword) && !(e.params as { passingSchemas?: unknown }).passingSchemas;
const inside = (e: ErrorObject, c: ErrorObject) => e !== c && e.schemaPath.startsWith(c.schemaPath + "/");

/** Errors at one level: each failed anyOf/oneOf is summarized from its branches' errors. */
function collapse(errors: readonly ErrorObject[]): Out[] {
  const combos = errors.filter(isCombinator);
  const out: Out[] = [];
  for (const e of errors) {
    if (combos.some((c) => inside(e, c))) continue; // summarized by its combinator
    if (isCombinator(e)) out.push(...summarize(e, errors.filter((x) => inside(x, e))));
    else out.push(plain(e));
  }
  return out;
}

/** A failed anyOf/oneOf: nothing when a branch failed only on what pydantic accepts; the
 * errors of the first branch whose type fits (the value is of that kind but wrong);
 * otherwise one error listing the types any branch takes ("must be a number or null"). */
function summarize(c: ErrorObject, children: readonly ErrorObject[]): Out[] {
  const branches = new Map<string, ErrorObject[]>();
  for (const e of children) {
    const idx = e.schemaPath.slice(c.schemaPath.length + 1).split("/")[0] ?? "";
    branches.set(idx, [...(branches.get(idx) ?? []), e]);
  }
  const results = [...branches.values()].map(collapse);
  if (results.some((r) => r.every((o) => o.lax))) return [];
  const here = pointerToField(c.instancePath);
  const mismatch = (o: Out) => o.types !== undefined && o.field === here;
  const fitting = results.find((r) => !r.some(mismatch));
  if (fitting) return fitting.filter((o) => !o.lax);
  const types = results.flatMap((r) => r.filter(mismatch).flatMap((o) => o.types ?? []));
  if (types.length === 0) return [{ field: here, message: c.message ?? c.keyword }];
  return [{ field: here, message: typesText(types), types }];
}

/** Ajv's errors (allErrors, verbose) as field errors: combinators summarized, lax-mode
 * conversions dropped, duplicates removed. */
export function schemaErrors(errors: readonly ErrorObject[]): FieldError[] {
  const seen = new Set<string>();
  const out: FieldError[] = [];
  for (const o of collapse(errors)) {
    if (o.lax) continue;
    const key = `${o.field}\n${o.message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({ field: o.field, message: o.message });
  }
  return out;
}
