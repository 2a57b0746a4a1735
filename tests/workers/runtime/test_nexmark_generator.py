"""The Nexmark generator is a pure function of the event index: any split of a range into
steps gives the same events, including steps too short to hold every kind of event."""

import pyarrow as pa
import pytest

from workers.runtime.nexmark import events

EPOCH_US = 1_704_067_200_000_000


def _table(start: int, stop: int) -> pa.Table:
    return pa.table(events(3, 1_000_000, start, stop, 1000, EPOCH_US))


@pytest.mark.parametrize("cut", [0, 1, 2, 3, 7, 49, 50, 51, 99, 100])
def test_any_split_of_a_range_gives_the_same_events(cut: int) -> None:
    whole = _table(0, 100)
    parts = pa.concat_tables([_table(0, cut), _table(cut, 100)])
    assert parts.equals(whole)


def test_each_single_event_equals_its_row_in_a_longer_range() -> None:
    whole = _table(40, 60)
    for k in range(40, 60):
        assert _table(k, k + 1).equals(whole.slice(k - 40, 1))


def test_an_empty_range_has_every_column_and_no_rows() -> None:
    empty = _table(5, 5)
    assert empty.num_rows == 0
    assert empty.column_names == _table(0, 1).column_names
