"""What a FROM item, a join or a query is to the planner: a plan node and the columns a
query over it can name (`compile.Field`: user name, qualifier, internal name), in the
order `*` gives them. The node's own column order may differ (joins reordered by the
planner): fields find their columns by internal name."""

from __future__ import annotations

from dataclasses import dataclass

from .compile import Field
from .plan import Node


@dataclass(frozen=True)
class Relation:
    node: Node
    fields: list[Field]

    def internal(self) -> set[str]:
        return {f.internal for f in self.fields}


__all__ = ["Relation"]
