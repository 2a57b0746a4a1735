from __future__ import annotations

from pydantic import Field

from .common import Out


class ShardStepOut(Out):
    """One shard of a stateful operator of a partitioned pipeline in a step (a bucket: rows
    summed, the largest step_ms, the last state)."""

    shard: int = Field(description="the shard's number, 0 to parallelism - 1")
    rows_in: int = Field(description="rows (changes) into the operator's shard")
    rows_out: int = Field(description="rows (changes) out of it")
    step_ms: float = Field(
        description="the time of the shard tasks that stepped it, split among the operators "
        "each task stepped by their own time"
    )
    state_rows: int = Field(
        description="its state's rows as of the newest step that stepped it (a shard that a "
        "step has no rows for is not stepped)"
    )
    state_bytes: int = Field(
        description="its state's bytes (memory and files) as of the newest step that stepped it"
    )


class OperatorStepOut(Out):
    """One stateful operator in a step (a bucket: rows summed, the largest step_ms, the
    last state)."""

    rows_in: int
    rows_out: int
    step_ms: float
    state_rows: int
    state_bytes: int
    shards: list[ShardStepOut] | None = Field(
        None,
        description="a partitioned pipeline's (parallelism > 1): each shard's figures, whose "
        "sums are the operator's; null at parallelism 1",
    )


class InputOut(Out):
    """An input table after a step: how far it was read and what waits beyond."""

    offset: int = Field(description="the table's offset as one number (Kafka: the sum)")
    lag: int | None = Field(
        None,
        description="records (log), files (files) or Kafka records not read yet; null for "
        "datagen, or when the source could not say",
    )
    partitions: dict[str, int] | None = Field(
        None, description="a Kafka table's lag per partition (`<topic>:<partition>`)"
    )


class SinkStepOut(Out):
    """A sink after a step: what the step wrote to it, and when it last wrote."""

    rows: int = Field(description="rows (changes) the step wrote to the sink")
    last_step: int | None = Field(
        None,
        description="the last step that wrote rows to the sink (a step whose view did not "
        "change writes none); null if none has yet",
    )


class MetricOut(Out):
    id: int
    run_id: int | None
    resolution_s: int
    ts: float
    step: int
    steps: int
    rows_in: int
    rows_out: int
    dead_letters: int
    late_rows: int  # input rows dropped as late by a watermark
    step_ms: float
    spark_ms: float
    engine_ms: float
    commit_ms: float
    latency_ms: float | None
    state_rows: int
    state_bytes: int
    spine_batches: int
    merge_backlog: int
    memory_bytes: int = Field(
        description="state batches in memory after the step (at parallelism > 1 the shards' "
        "summed, each as its last level task ended); the rest of the state is in files"
    )
    memory_budget_bytes: int = Field(
        description="the budget they are kept under: the spec's `engine.memory_budget` "
        "(times the shards at parallelism > 1); 0 in samples written before it was reported"
    )
    operators: dict[str, OperatorStepOut] | None = None
    inputs: dict[str, InputOut] | None = None
    sinks: dict[str, SinkStepOut] | None = None


class DataflowNode(Out):
    id: str
    kind: str = Field(
        description="table, filter, project, window, aggregate, join, distinct, top_n, "
        "negate, union, view, emit_final, sink; or an operator spec's kind"
    )
    label: str
    view: str | None = Field(None, description="the view whose SQL holds the node")
    operator: str | None = Field(None, description="a stateful operator's persistent id")
    metrics: OperatorStepOut | None = Field(
        None, description="a stateful operator's figures in the newest step recorded"
    )
    input: InputOut | None = Field(
        None, description="an input table's offset and lag after the newest step recorded"
    )
    sink: SinkStepOut | None = Field(
        None, description="a sink's rows and last written step after the newest step recorded"
    )


class DataflowEdge(Out):
    source: str
    target: str


class DataflowOut(Out):
    """The pipeline's dataflow graph, with the newest step's per-operator figures."""

    nodes: list[DataflowNode]
    edges: list[DataflowEdge]
    step: int | None = Field(None, description="the step the figures are from")


class IngestOut(Out):
    stream: str
    records: int
    first_offset: int
    end_offset: int


class ViewPage(Out):
    view: str
    step: int | None = Field(
        description="the step the rows reflect: the running pipeline's newest, or the "
        "checkpoint's (None: no checkpoint yet)"
    )
    checkpoint: str | None = Field(description="the uuid of the checkpoint read (None: live)")
    live: bool = Field(False, description="read from the running pipeline, not a checkpoint")
    rows: list[dict[str, object]]


class CheckpointRef(Out):
    checkpoint: str
    step: int


class ViewDiff(Out):
    view: str
    from_: CheckpointRef = Field(alias="from")
    to: CheckpointRef
    rows: list[dict[str, object]] = Field(
        description="each row whose count differs, with `weight`: how many more times it is "
        "in `to` than in `from` (negative: fewer)"
    )
