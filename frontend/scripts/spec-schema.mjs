#!/usr/bin/env node
// Copies the pipeline spec's JSON Schema (../docs/pipeline-spec.schema.json, published by
// the backend: `python -m pipeline_spec`) into src/lib/, where the spec editor imports it
// for its as-you-type checks. One source of truth: the copy is byte-for-byte, never edited.
//   node scripts/spec-schema.mjs           write the copy   (npm run gen:schema)
//   node scripts/spec-schema.mjs --check   fail when the copy differs (npm run check:schema)
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const fe = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(fe, "..", "docs", "pipeline-spec.schema.json");
const copy = join(fe, "src", "lib", "pipeline-spec.schema.json");
const mode = process.argv[2] ?? "";
if (mode !== "" && mode !== "--check") {
  console.error("usage: spec-schema.mjs [--check]");
  process.exit(2);
}

const want = readFileSync(source);
JSON.parse(want.toString("utf8")); // a broken schema fails here, not in the browser
let have = null;
try {
  have = readFileSync(copy);
} catch {
  have = null;
}
const rel = (p) => relative(join(fe, ".."), p);
if (mode === "--check") {
  if (have === null || !have.equals(want)) {
    console.error(`spec-schema: ${rel(copy)} is stale (differs from ${rel(source)}); run 'npm run gen:schema' in frontend/`);
    process.exit(1);
  }
  console.log("spec schema copy is up to date");
} else if (have === null || !have.equals(want)) {
  writeFileSync(copy, want);
  console.log(`wrote ${rel(copy)}`);
}
