"""What a pipeline of operators (`state`, rather than `sql`) does with its input: the
stateless `transform` Spark applies first, then the stateful operators."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from . import expressions
from .fields import OP_RE, PositiveSeconds, Seconds
from .fields import SpecModel as _Model


def _expression(text: str) -> str:
    expressions.check(text)  # an ExpressionError is a ValueError: pydantic names the field
    return text


Expression = Annotated[
    str,
    AfterValidator(_expression),
    Field(
        min_length=1,
        max_length=10_000,
        description="a Spark SQL expression; it may call Spark's built-in functions except "
        "those that reach the JVM, the host or files (docs/pipelines.md, Expressions), and "
        "hold no subquery",
    ),
]


class Transform(_Model):
    """Stateless, done by Spark: a filter, then a projection (Spark SQL expressions)."""

    where: Expression | None = None
    select: list[Expression] = Field(default_factory=lambda: ["*"], min_length=1)
    event_time: str | None = Field(
        None,
        min_length=1,
        description="a timestamp column of the transformed stream holding each row's event "
        "time (wall clock, UTC), for the end-to-end latency metric (latency_ms: the step's "
        "sink writes done minus the oldest event time among its rows that passed the "
        "filter); default: the first window_aggregate's time_column, except for datagen "
        "sources, whose timestamps are synthetic (none)",
    )


# -- stateful operators --------------------------------------------------------------------


class AggregateSpec(_Model):
    name: str
    func: Literal["count", "sum", "avg", "min", "max"]
    column: str | None = None

    @model_validator(mode="after")
    def _column_needed(self) -> AggregateSpec:
        if self.column is None and self.func != "count":
            raise ValueError(f"{self.func} needs a column")
        return self


class StreamSpec(_Model):
    """One input of a join: rows of the transformed stream, filtered and projected."""

    where: Expression | None = None
    select: list[Expression] = Field(default_factory=lambda: ["*"], min_length=1)


def _unique_outputs(columns: list[str]) -> None:
    """An operator's output columns, each named once: the dataflow refuses a repeated one
    when the run starts, so the spec refuses it first."""
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        raise ValueError(f"output columns must be unique, repeated: {repeated}")


class GroupAggregateOp(_Model):
    name: str = Field(pattern=OP_RE)
    kind: Literal["aggregate"]
    group_by: list[str] = Field(default_factory=list)
    aggregates: list[AggregateSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _outputs(self) -> GroupAggregateOp:
        _unique_outputs([*self.group_by, *(a.name for a in self.aggregates)])
        return self


class WindowAggregateOp(_Model):
    name: str = Field(pattern=OP_RE)
    kind: Literal["window_aggregate"]
    time_column: str
    size: PositiveSeconds
    slide: PositiveSeconds | None = Field(None, description="hopping windows; default: tumbling")
    lateness: Seconds = 0.0
    group_by: list[str] = Field(default_factory=list)
    aggregates: list[AggregateSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _slide_divides_size(self) -> WindowAggregateOp:
        if self.slide is not None:
            ratio = self.size / self.slide
            if abs(ratio - round(ratio)) > 1e-9:
                raise ValueError("size must be a whole multiple of slide")
        names = [*self.group_by, *(a.name for a in self.aggregates)]
        _unique_outputs([*names, "window_start", "window_end"])
        return self


class DistinctOp(_Model):
    name: str = Field(pattern=OP_RE)
    kind: Literal["distinct"]
    columns: list[str] | None = None

    @model_validator(mode="after")
    def _outputs(self) -> DistinctOp:
        _unique_outputs(self.columns or [])
        return self


class JoinOp(_Model):
    name: str = Field(pattern=OP_RE)
    kind: Literal["join"]
    left: StreamSpec
    right: StreamSpec
    left_on: list[str] = Field(min_length=1)
    right_on: list[str] = Field(min_length=1)

    @model_validator(mode="after")
    def _pairs(self) -> JoinOp:
        if len(self.left_on) != len(self.right_on):
            raise ValueError("left_on and right_on must have the same length")
        return self


StateOp = Annotated[
    GroupAggregateOp | WindowAggregateOp | DistinctOp | JoinOp, Field(discriminator="kind")
]

__all__ = [
    "AggregateSpec",
    "DistinctOp",
    "Expression",
    "GroupAggregateOp",
    "JoinOp",
    "StateOp",
    "StreamSpec",
    "Transform",
    "WindowAggregateOp",
]
