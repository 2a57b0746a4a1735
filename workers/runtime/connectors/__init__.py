"""Connectors: one module per source kind and per sink kind, each behind a protocol
(`sink.Sink`), found by the spec's `kind` in `registry`. The rest of the runtime opens a
connector through the registry and never asks which kind it is: adding a kind is adding
its module and one registry entry. Parsing bytes into Arrow is `pipeline_spec.formats`'."""
