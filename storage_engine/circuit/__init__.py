"""Stateful operators over Z-sets on the storage engine's spines (see README.md)."""

from .aggregate import AggFunc, Aggregate, GroupAggregate
from .circuit import Circuit, OperatorMetrics, Stepper, operator_state
from .distinct import Distinct
from .final import EmitFinal
from .join import Join
from .operator import CircuitError, Operator
from .over import RowsOver
from .session import SessionWindows
from .top_n import TopN
from .udf_aggregate import AggregateFunction, UdfCall, UdfGroupAggregate
from .upsert import Upsert
from .window import WindowAggregate
from .window_calls import WindowCall

__all__ = [
    "AggFunc",
    "Aggregate",
    "AggregateFunction",
    "Circuit",
    "CircuitError",
    "Distinct",
    "EmitFinal",
    "GroupAggregate",
    "Join",
    "Operator",
    "OperatorMetrics",
    "RowsOver",
    "SessionWindows",
    "Stepper",
    "TopN",
    "UdfCall",
    "UdfGroupAggregate",
    "Upsert",
    "WindowAggregate",
    "WindowCall",
    "operator_state",
]
