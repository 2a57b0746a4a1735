/// <reference types="node" />
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { mapFieldErrors, parseSpec } from "./spec";
import { DURATION_PATTERN, checkSpec, pointerToField, prepareSchema, schemaProblems } from "./specSchema";

const GOOD = `name: clicks
source:
  kind: datagen
  generator: clicks
  seed: 7
  rows_per_second: 2000
state:
  - name: per_user
    kind: aggregate
    group_by: [user]
    aggregates:
      - {name: clicks, func: count}
      - {name: total, func: sum, column: amount}
sinks:
  - {name: latest, kind: view, from: per_user}
checkpoint: {every_steps: 1000, every: 30s}
trigger: {interval: 500ms}
retention: {keep_last: 5, max_age: 7d}
`;

function check(text: string) {
  const parsed = parseSpec(text);
  if (!parsed.ok) throw new Error("unparsable test spec");
  return checkSpec(parsed.spec);
}

function fields(text: string): [string, string][] {
  return check(text).map((e) => [e.field, e.message]);
}

describe("the schema copy", () => {
  it("is the published schema, byte for byte (npm run gen:schema)", () => {
    const published = readFileSync(new URL("../../../docs/pipeline-spec.schema.json", import.meta.url));
    const copy = readFileSync(new URL("./pipeline-spec.schema.json", import.meta.url));
    expect(copy.equals(published)).toBe(true);
  });
});

describe("prepareSchema", () => {
  it("drops discriminator mappings", () => {
    const got = prepareSchema({
      properties: {
        src: { discriminator: { propertyName: "kind", mapping: { a: "#/$defs/A" } }, oneOf: [] },
      },
    });
    expect(got).toEqual({
      properties: {
        src: { discriminator: { propertyName: "kind" }, type: "object", oneOf: [] },
      },
    });
  });

  it("publishes durations with the pattern the editor knows", () => {
    const published = readFileSync(new URL("./pipeline-spec.schema.json", import.meta.url), "utf8");
    expect(published).toContain(JSON.stringify(DURATION_PATTERN));
  });
});

describe("checkSpec", () => {
  it("accepts the shipped templates and durations as the server does", () => {
    expect(check(GOOD)).toEqual([]);
    for (const f of ["clicks-per-minute", "clicks-per-user", "ingest-log", "nexmark-q3", "orders-from-files"]) {
      const text = readFileSync(new URL(`../templates/${f}.yaml`, import.meta.url), "utf8");
      expect([f, check(text)]).toEqual([f, []]);
    }
  });

  it("accepts what pydantic's lax mode converts", () => {
    const lax = GOOD.replace("seed: 7", 'seed: "7"')
      .replace("every_steps: 1000", 'every_steps: "1000"')
      .replace("rows_per_second: 2000", 'rows_per_second: "2.5e3"')
      .replace("every: 30s", "every: 30, async: 'yes'")
      .replace("interval: 500ms", "interval: true");
    expect(check(lax)).toEqual([]);
  });

  it("names the field of each problem, as the API does", () => {
    const bad = `name: Bad Name
source: {kind: datagen, generator: clickz, rows_per_second: -5, bogus: 1}
state:
  - {name: x, kind: aggregate, group_by: 5, aggregates: []}
  - {name: w, kind: window_aggregate, time_column: ts, size: 5 sec, aggregates: [{name: n, func: count}]}
  - {name: y, kind: nope}
sinks: [{name: v, kind: view}]
checkpoint: {every: -1, every_steps: x}
trigger: {interval: [1]}
`;
    expect(fields(bad)).toEqual([
      ["checkpoint.every", "must be >= 0"],
      ["checkpoint.every_steps", "must be an integer or null"],
      ["name", "must match the pattern ^[a-z0-9][a-z0-9_-]{0,62}$"],
      ["sinks.0.from", "required field is missing"],
      ["source.bogus", "unknown field"],
      ["source.generator", 'must be one of "clicks", "nexmark"'],
      ["source.rows_per_second", "must be > 0"],
      ["state.0.aggregates", "must have at least 1 item"],
      ["state.0.group_by", "must be a list"],
      ["state.1.size", '"5 sec" is not a duration like 500ms, 10s, 5m, 1h or 7d'],
      ["state.2", '"kind" must be: one of "aggregate", "window_aggregate", "distinct", "join"'],
      ["trigger.interval", "must be a number or a string"],
    ]);
  });

  it("reports missing fields and a missing union tag", () => {
    // `state` or `sql`: the API says which is missing (a rule across fields).
    expect(fields("name: x\nsource: {generator: clicks}\n")).toEqual([
      ["source", 'needs "kind": one of "datagen", "files", "log", "kafka", "postgres_cdc"'],
    ]);
    expect(fields("name: x\nsource: 5\nstate: []\nsinks: []\n")).toEqual([
      ["source", "must be a mapping"],
    ]);
  });
});

describe("pointerToField", () => {
  it("unescapes JSON pointers", () => {
    expect(pointerToField("")).toBe("(spec)");
    expect(pointerToField("", "name")).toBe("name");
    expect(pointerToField("/source/schema/a~1b~0c")).toBe("source.schema.a/b~c");
  });
});

describe("schemaProblems", () => {
  it("puts the schema errors on their lines, like the server's", () => {
    const text = GOOD.replace("group_by: [user]", "group_by: user").replace("rows_per_second: 2000", "rows_per_second: 0");
    const got = schemaProblems(text);
    expect(got.map((p) => [p.field, p.line, p.source])).toEqual([
      ["source.rows_per_second", 6, "schema"],
      ["state.0.group_by", 10, "schema"],
    ]);
    const viaServerPath = mapFieldErrors(check(text), text);
    expect(got.map((p) => p.line)).toEqual(viaServerPath.map((p) => p.line));
    expect(schemaProblems("a: [")).toEqual([]); // syntax errors are parseSpec's
  });
});
