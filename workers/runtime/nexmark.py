"""The Nexmark event generator, after the benchmark's reference generator (Apache Beam's
`NexmarkUtils`/`GeneratorConfig`, which Flink's Nexmark suite also uses): one stream of
persons, auctions and bids in the proportion 1 : 3 : 46, ids dense from 1000, hot sellers,
bidders and auctions, auctions that expire within their in-flight horizon, prices spread
over six orders of magnitude, and `extra` padding to the reference's average event sizes
(person 200, auction 500, bid 100 bytes).

Event i is a pure function of (seed, i): every batching of the same range gives the same
rows (the runner regenerates a step's rows after a restart). Randomness is drawn per event
from splitmix64 of (seed, i) and salted variants, not from a sequential generator, so the
exact values differ from Beam's; the distributions and the id arithmetic are the
reference's.

One row per event, flattened (Spindle's SQL has no nested rows yet): `event_type` 0, 1, 2
(person, auction, bid, as Flink's Nexmark numbers them), the kind's columns under a
`person_`, `auction_` or `bid_` prefix (the others NULL), and `date_time`, `extra`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline_spec.datagen import DATAGEN_SCHEMAS

SCHEMA_DDL = DATAGEN_SCHEMAS["nexmark"]

PERSON, AUCTION, BID = 0, 1, 2
_TOTAL, _PERSONS, _AUCTIONS = 50, 1, 3  # of every 50 events: 1 person, 3 auctions, 46 bids
FIRST_PERSON_ID = FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID, CATEGORIES = 10, 5
HOT_AUCTION_RATIO, HOT_SELLER_RATIO, HOT_BIDDER_RATIO, HOT_CHANNEL_RATIO = 2, 4, 4, 2
IN_FLIGHT_AUCTIONS = 100
PERSON_ID_LEAD = AUCTION_ID_LEAD = 10
_SIZES = {PERSON: 200, AUCTION: 500, BID: 100}  # average bytes per event, padded by `extra`

_FIRST = np.array(["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
                   "Deiter", "Walter"])  # fmt: skip
_LAST = np.array(["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
                  "Noris"])  # fmt: skip
_CITIES = np.array(["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend",
                    "Redmond", "Seattle", "Kent", "Cheyenne"])  # fmt: skip
_STATES = np.array(["AZ", "CA", "ID", "OR", "WA", "WY"])
_CHANNELS = np.array(["Google", "Facebook", "Baidu", "Apple"])
_U64 = np.uint64


def _mix(seed: int, salt: int, i: np.ndarray) -> np.ndarray:
    """splitmix64 of (seed, salt, i): independent 64-bit draws per event and purpose."""
    with np.errstate(over="ignore"):
        z = i.astype(_U64) + _U64((seed * 0x9E3779B97F4A7C15 + salt * 0xD1B54A32D192ED03) % 2**64)
        z = z + _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return z ^ (z >> _U64(31))


def _below(h: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    """A draw in [0, n) from the 64-bit draws `h` (n >= 1)."""
    return (h % np.asarray(n).astype(_U64)).astype(np.int64)


def _unit(h: np.ndarray) -> np.ndarray:
    """A draw in [0, 1)."""
    return (h >> _U64(11)).astype(np.float64) / float(1 << 53)


# Random letters that strings are cut from: a string is the pool from a random start, so
# building one costs a copy, not a draw per character.
_POOL = (ord("a") + np.random.default_rng(0).integers(0, 26, 1 << 20)).astype(np.uint8)


def _letters(h: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Random lowercase strings of these lengths (< 64 KiB), built as one Arrow buffer."""
    lengths = np.maximum(lengths, 0).astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    starts = _below(h, len(_POOL) - (1 << 16))
    pos = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1] - starts, lengths)
    data = _POOL[pos]
    return pa.StringArray.from_buffers(
        len(lengths), pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())
    )


def _last_person(epoch: np.ndarray, offset: np.ndarray) -> np.ndarray:
    out: np.ndarray = epoch * _PERSONS + np.minimum(offset, _PERSONS - 1)
    return out


def _last_auction(epoch: np.ndarray, offset: np.ndarray) -> np.ndarray:
    before = offset < _PERSONS  # a person event: the previous epoch's last auction
    within = np.clip(offset - _PERSONS, 0, _AUCTIONS - 1)
    return np.where(before, (epoch - 1) * _AUCTIONS + _AUCTIONS - 1, epoch * _AUCTIONS + within)


def _next_person(last: np.ndarray, h: np.ndarray, active: int) -> np.ndarray:
    people = last + 1
    live = np.minimum(people, active)
    out: np.ndarray = people - live + _below(h, live + PERSON_ID_LEAD)
    return out


def _next_auction(last: np.ndarray, h: np.ndarray) -> np.ndarray:
    low = np.maximum(last - IN_FLIGHT_AUCTIONS, 0)
    out: np.ndarray = low + _below(h, last - low + 1 + AUCTION_ID_LEAD)
    return out


def _price(h: np.ndarray) -> np.ndarray:
    return np.round(np.power(10.0, _unit(h) * 6.0) * 100.0).astype(np.int64)


def events(
    seed: int, rate: float, start: int, stop: int, active_people: int, epoch_us: int
) -> dict[str, pa.Array]:
    """Events [start, stop) as Arrow arrays by column (`SCHEMA_DDL`'s, in order). Each
    kind's columns are computed for its events only, then spread over the rows."""
    i = np.arange(start, stop, dtype=np.int64)
    epoch, offset = i // _TOTAL, i % _TOTAL
    kind = np.where(
        offset < _PERSONS, PERSON, np.where(offset < _PERSONS + _AUCTIONS, AUCTION, BID)
    )
    delay_us = 1_000_000 / rate
    ts = epoch_us + (i * delay_us).astype(np.int64)
    last_p, last_a = _last_person(epoch, offset), _last_auction(epoch, offset)
    h = _mix(seed, 0, i)
    sizes = np.select(
        [kind == PERSON, kind == AUCTION], [_SIZES[PERSON], _SIZES[AUCTION]], _SIZES[BID]
    )
    base = np.select([kind == PERSON, kind == AUCTION], [80, 200], 60)
    extra_len = np.maximum(sizes - base + _below(h, 21) - 10, 0)
    out: dict[str, pa.Array] = {"event_type": pa.array(kind, pa.int32())}
    p, a, b = (np.flatnonzero(kind == k) for k in (PERSON, AUCTION, BID))
    out.update(_spread(_persons(seed, i[p], last_p[p]), p, len(i)))
    out.update(
        _spread(
            _auctions(seed, i[a], ts[a], last_p[a], last_a[a], active_people, delay_us), a, len(i)
        )
    )
    out.update(_spread(_bids(seed, i[b], last_p[b], last_a[b], active_people), b, len(i)))
    out["date_time"] = pa.array(ts, _UTC)
    out["extra"] = _letters(h >> _U64(5), extra_len)
    return {name: out[name] for name in _NAMES}


_UTC = pa.timestamp("us", tz="UTC")
_NAMES = [c.strip().split(" ")[0] for c in SCHEMA_DDL.split(",")]


def _spread(columns: dict[str, pa.Array], rows: np.ndarray, n: int) -> dict[str, pa.Array]:
    """Columns computed for `rows` of n, as n-row columns NULL elsewhere."""
    at = np.full(n, -1, np.int64)
    at[rows] = np.arange(len(rows))
    take = pa.array(at, pa.int64(), mask=at < 0)
    return {name: col.take(take) for name, col in columns.items()}


def _persons(seed: int, i: np.ndarray, last_p: np.ndarray) -> dict[str, pa.Array]:
    h = [_mix(seed, salt, i) for salt in (1, 2, 3, 4, 5)]
    first, last = _FIRST[_below(h[0], len(_FIRST))], _LAST[_below(h[1], len(_LAST))]
    # np.char.zfill fails on an empty array (a range holding no person); mod does not.
    groups = [np.char.mod("%04d", _below(h[2] >> _U64(k), 10_000)) for k in (0, 14, 28, 42)]
    card = groups[0]
    for g in groups[1:]:
        card = np.char.add(np.char.add(card, " "), g)
    email = np.char.add(
        np.char.add(np.char.lower(first), "@"), np.char.add(np.char.lower(last), ".com")
    )
    return {
        "person_id": pa.array(last_p + FIRST_PERSON_ID, pa.int64()),
        "person_name": pa.array(np.char.add(np.char.add(first, " "), last), pa.string()),
        "person_email_address": pa.array(email, pa.string()),
        "person_credit_card": pa.array(card, pa.string()),
        "person_city": pa.array(_CITIES[_below(h[3], len(_CITIES))], pa.string()),
        "person_state": pa.array(_STATES[_below(h[4], len(_STATES))], pa.string()),
    }


def _auctions(
    seed: int,
    i: np.ndarray,
    ts: np.ndarray,
    last_p: np.ndarray,
    last_a: np.ndarray,
    active_people: int,
    delay_us: float,
) -> dict[str, pa.Array]:
    h = [_mix(seed, salt, i) for salt in (6, 7, 8, 9, 10, 11, 12, 13)]
    hot = (last_p // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
    seller = np.where(
        _below(h[0], HOT_SELLER_RATIO) > 0, hot, _next_person(last_p, h[1], active_people)
    )
    initial = _price(h[2])
    horizon_us = int(IN_FLIGHT_AUCTIONS * _TOTAL / _AUCTIONS * delay_us)
    return {
        "auction_id": pa.array(last_a + FIRST_AUCTION_ID, pa.int64()),
        "auction_item_name": _letters(h[3], 10 + _below(h[3] >> _U64(40), 11)),
        "auction_description": _letters(h[4], 80 + _below(h[4] >> _U64(40), 41)),
        "auction_initial_bid": pa.array(initial, pa.int64()),
        "auction_reserve": pa.array(initial + _price(h[5]), pa.int64()),
        "auction_expires": pa.array(ts + 1 + _below(h[6], max(2 * horizon_us, 1)), _UTC),
        "auction_seller": pa.array(seller + FIRST_PERSON_ID, pa.int64()),
        "auction_category": pa.array(FIRST_CATEGORY_ID + _below(h[7], CATEGORIES), pa.int64()),
    }


def _bids(
    seed: int, i: np.ndarray, last_p: np.ndarray, last_a: np.ndarray, active_people: int
) -> dict[str, pa.Array]:
    h = [_mix(seed, salt, i) for salt in (14, 15, 16, 17, 18, 19, 20)]
    hot_auction = (last_a // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
    auction = np.where(
        _below(h[0], HOT_AUCTION_RATIO) > 0, hot_auction, _next_auction(last_a, h[1])
    )
    hot_bidder = (last_p // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
    bidder = np.where(
        _below(h[2], HOT_BIDDER_RATIO) > 0, hot_bidder, _next_person(last_p, h[3], active_people)
    )
    hot = _below(h[4], HOT_CHANNEL_RATIO) > 0
    number = _below(h[4] >> _U64(8), 10_000).astype(str)
    channel = np.where(
        hot, _CHANNELS[_below(h[5], len(_CHANNELS))], np.char.add("channel-", number)
    )
    url = np.char.add(
        "https://www.nexmark.com/item.htm?query=1",
        np.where(hot, "", np.char.add("&channel_id=", number)),
    )
    return {
        "bid_auction": pa.array(auction + FIRST_AUCTION_ID, pa.int64()),
        "bid_bidder": pa.array(bidder + FIRST_PERSON_ID, pa.int64()),
        "bid_price": pa.array(_price(h[6]), pa.int64()),
        "bid_channel": pa.array(channel, pa.string()),
        "bid_url": pa.array(url, pa.string()),
    }


__all__ = ["AUCTION", "BID", "PERSON", "SCHEMA_DDL", "events"]
