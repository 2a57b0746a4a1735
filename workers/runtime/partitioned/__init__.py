"""Partitioned execution of a dataflow (issue 50): state split into shards by key group,
stepped level by level. See docs/architecture.md, "The partitioned path"."""

from .coordinator import ManifestError, PartitionedDataflow
from .shard_host import ShardHost, ShardStepError

__all__ = ["ManifestError", "PartitionedDataflow", "ShardHost", "ShardStepError"]
