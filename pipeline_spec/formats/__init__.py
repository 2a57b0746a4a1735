"""The input formats a spec names (`json`, `csv`, `avro`, `parquet`): bytes into Arrow, each
value converted exactly as Spark's reader for that format converts it. The one place where
records are parsed, for every way they arrive:

- `bodies`: a body pushed to the ingest API, all or nothing (the control plane);
- `values`: Kafka record values, one at a time, those that do not parse dead letters;
- `json_lines`, `csv_lines`, `parquet`: a `files` table's whole file, or None when only
  Spark's reader can say what it holds;
- `records`, `decimals`, `csv_values`, `avro`: what those share.

Why here, in the spec's package: the control plane (ingest) and the Spark runtime (Kafka,
files) both parse, and the control plane must not import the runtime. `pipeline_spec` is
the one package both import that already depends on Arrow and on nothing else of
Spindle's; what a format means is part of the spec's contract with its writers. Nothing
here imports Spark: a split read on an executor parses with the same code."""
