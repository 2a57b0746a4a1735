"""Server-Sent Events: the `text/event-stream` wire format, parsed from a line iterator."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    event: str
    data: str
    id: str | None


def parse(lines: Iterable[str]) -> Iterator[Event]:
    """Events in arrival order. A blank line ends an event; `:` lines are comments (the
    server's keep-alive pings); several `data:` lines join with newlines; an event with no
    data is dropped, as a browser's EventSource does."""
    event = ""
    data: list[str] = []
    last_id: str | None = None
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield Event(event or "message", "\n".join(data), last_id)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        elif name == "id" and "\0" not in value:
            last_id = value
    if data:
        yield Event(event or "message", "\n".join(data), last_id)
