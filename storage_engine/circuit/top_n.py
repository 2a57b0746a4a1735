"""Top-N per group: the first `limit` rows of each partition in an order, with their rank
(SQL's `ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) <= N`), correct under retractions.

State: `<id>.rows`, every live input row keyed by its partition columns (a multiset); each
touched partition's top rows are ranked before and after the delta (`PartitionedOperator`).
Ties in the order are broken by the other columns, ascending, so the top rows (and their
ranks) are a function of the partition's rows alone. NULLs come first in ascending order and
last in descending order, as in Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..schema import WEIGHT
from .operator import CircuitError, empty_delta, require_columns
from .partitioned import PartitionedOperator


class TopN(PartitionedOperator):
    def __init__(
        self,
        op_id: str,
        input_schema: pa.Schema,
        partition_by: Sequence[str],
        order_by: Sequence[tuple[str, bool]],
        limit: int,
        rank: str,
        input: str = "source",
    ) -> None:
        """`order_by`: (column, descending) pairs; `rank`: the output column of ranks."""
        if limit < 1:
            raise CircuitError(f"operator {op_id!r}: the limit must be at least 1")
        require_columns(op_id, input_schema, [c for c, _ in order_by], "order columns")
        if rank in input_schema.names:
            raise CircuitError(f"operator {op_id!r}: rank column {rank!r} is an input column")
        out = input_schema.append(pa.field(rank, pa.int32()))
        super().__init__(op_id, input_schema, partition_by, out, input)
        self.order_by, self.limit = list(order_by), limit

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "top_n",
            "id": self.id,
            "input": self.inputs[0],
            "columns": [(f.name, str(f.type)) for f in self.input_schema],
            "partition_by": self.partition_by,
            "order_by": self.order_by,
            "limit": self.limit,
        }

    def _result(self, rows: pa.Table) -> pa.Table:
        """The first `limit` rows of each partition, ranked, each with weight 1."""
        ordered = self._ordered(rows, self.order_by)
        if ordered is None:
            return empty_delta(self._out)
        rows, starts = ordered
        lengths = np.diff(np.append(starts, rows.num_rows))
        rank = np.arange(rows.num_rows) - np.repeat(starts, lengths) + 1
        top = rank <= self.limit
        out = rows.filter(pa.array(top)).select(self.input_schema.names)
        out = out.append_column(self._out.field(-1), pa.array(rank[top], pa.int32()))
        return out.append_column(WEIGHT, pa.array(np.ones(out.num_rows, np.int64)))


__all__ = ["TopN"]
