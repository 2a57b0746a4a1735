"""`python -m pipeline_spec > docs/pipeline-spec.schema.json`: the published JSON Schema."""

from .model import json_schema

print(json_schema())
