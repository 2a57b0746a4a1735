"""Spark SQL type names as specs and CAST write them, and the Arrow types they become."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pipeline_spec.types import arrow_type, check_types


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("decimal(15,2)", pa.decimal128(15, 2)),
        (" DECIMAL ( 38 , 0 ) ", pa.decimal128(38, 0)),
        ("decimal", pa.decimal128(10, 0)),
        ("numeric(5)", pa.decimal128(5, 0)),
        ("dec(4,4)", pa.decimal128(4, 4)),
        ("BIGINT", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
    ],
)
def test_type_names(name: str, want: pa.DataType) -> None:
    assert arrow_type(name) == want


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("decimal(39,2)", "precision is 1 to 38"),
        ("decimal(0)", "precision is 1 to 38"),
        ("decimal(5,6)", "scale is at most its precision"),
        ("decimal(5,-1)", "is not one of"),
        ("money", "is not one of"),
        ("array<int>", "is not one of"),
    ],
)
def test_refused_type_names(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        arrow_type(name)


def test_check_names_the_column() -> None:
    with pytest.raises(ValueError, match=r"^price: type 'decimal"):
        check_types({"id": "int", "price": "decimal(40,2)"})
