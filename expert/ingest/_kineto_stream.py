"""Streaming a PyTorch profiler (Kineto) trace: what `kineto.py` and `rank_trace.py` both read the same way.

- `Event`, `Document`: the msgspec types of an event and of the document around the events; each reader brings its
  own `args` struct (the argument keys it reads);
- `fast_batches`: the events of a trace in libkineto's own layout, decoded into a reader's own msgspec types a
  megabyte at a time, from the whole file or from one byte range of it (`NotFast` when the layout is another; the
  reader then falls back to ijson); `cut_points` finds where a file can be split into such ranges;
- `kept_events`: the one dispatch loop both readers run: complete events of the categories a reader keeps, with
  numeric ts/dur, counted on the way;
- `ijson_prefix`: where the events are for ijson (a bare array or a `traceEvents` member);
- `gc_paused`: the cyclic garbage collector paused while millions of acyclic event objects are made;
- `step_number`: the N of a `ProfilerStep#N` span, in ASCII digits only.
"""

from __future__ import annotations

import gc
import math
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from gzip import BadGzipFile
from typing import IO, Any, Generic, TypeVar

import msgspec

A = TypeVar("A")
E = TypeVar("E")
D = TypeVar("D")

BOUNDARY = b"\n  },\n  {"
"""What libkineto writes between two events (JSON strings hold no raw newline, so it never occurs inside one)."""
BLOCK = 1 << 20
SEARCH_LIMIT = 16 << 20
"""Read this much without an event boundary and the file is not in libkineto's layout."""


class Event(msgspec.Struct, Generic[A], gc=False):
    """One trace event, reduced to the fields the readers use; `args` is the reader's own struct of the argument
    keys it reads (msgspec skips every other key without building it)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    args: A | None = None


class Document(msgspec.Struct, Generic[A]):
    """A whole (small) trace document, or its head or tail cut at an event boundary: the events and the top-level
    keys either reader keeps."""

    traceEvents: list[Event[A]] = msgspec.field(default_factory=list)
    deviceProperties: Any = None
    distributedInfo: Any = None
    with_flops: Any = None
    host_name: Any = None
    baseTimeNanoseconds: Any = None


class NotFast(Exception):
    """The document is not in Kineto's own layout (or is malformed): read it with ijson instead."""


def fast_batches(fh: IO[bytes], events: msgspec.json.Decoder[list[E]], document: msgspec.json.Decoder[D],
                 opened: Callable[[D], list[E]], counted: Callable[[int], None] | None = None, *,
                 head: bool = True, tail: bool = True) -> Iterator[list[E]]:
    """Events of a trace in libkineto's layout (one event per indented block), decoded a few megabytes at a time.

    The text between two `BOUNDARY`s is a run of whole events; each run is decoded as one typed list (`events`),
    which also validates the cut. The head and the tail are decoded as a `document` (a struct with the top-level
    keys the reader keeps, and `traceEvents`); `opened(doc)` keeps what it needs and returns its events. `counted`
    is told the size of every block read. Anything unexpected raises NotFast.

    `fh` may also be one byte range of the file, cut at boundaries (`cut_points`): head=False when it starts just
    after a `BOUNDARY` (not at the top of the document), tail=False when it ends just before one (not at its end).
    """
    buf = b""
    first = head
    try:
        while True:
            chunk = fh.read(BLOCK)
            if not chunk:
                break
            if counted is not None:
                counted(len(chunk))
            buf += chunk
            cut = buf.rfind(BOUNDARY)
            if cut < 0:
                if len(buf) > SEARCH_LIMIT:
                    raise NotFast("no event boundaries")
                continue
            piece, buf = buf[:cut], buf[cut + len(BOUNDARY):]
            if first:
                yield opened(document.decode(piece + b"\n  }]}"))
                first = False
            else:
                yield events.decode(b"[{" + piece + b"\n  }]")
        if not tail:  # the range ends where the next one's first event begins
            if not buf:
                raise NotFast("an empty byte range")
            last = opened(document.decode(buf + b"\n  }]}")) if first else events.decode(b"[{" + buf + b"\n  }]")
        else:
            last = opened(document.decode(buf if first else b'{"traceEvents":[{' + buf))
    except (msgspec.DecodeError, EOFError, BadGzipFile, zlib.error, OSError) as exc:
        raise NotFast(str(exc)) from exc
    yield last


def cut_points(fh: IO[bytes], size: int, parts: int) -> list[int]:
    """Offsets of `BOUNDARY`s that split a file of `size` bytes in libkineto's layout into up to `parts` byte ranges
    of about equal size: the first boundary at or after each k/parts of the file (a nominal offset usually falls
    inside an event; the range then ends at the end of that event). Where no boundary is found within
    SEARCH_LIMIT bytes, that cut is left out (the ranges around it merge)."""
    cuts: list[int] = []
    step = 1 << 16
    for k in range(1, parts):
        at = max(size * k // parts, cuts[-1] + len(BOUNDARY) if cuts else 0)
        if at >= size:
            break
        fh.seek(at)
        window = b""
        scanned = 0
        while scanned < SEARCH_LIMIT:
            chunk = fh.read(step)
            if not chunk:
                break
            window = window[-(len(BOUNDARY) - 1):] + chunk if window else chunk
            scanned += len(chunk)
            found = window.find(BOUNDARY)
            if found >= 0:
                cuts.append(at + scanned - len(window) + found)
                break
    return [c for c in cuts if 0 < c < size]


@dataclass
class Tally:
    """What `kept_events` counts (the readers' collected state extends it): every event, the complete ('X') ones, the
    kept ones without a numeric ts/dur (malformed, skipped), and the first start and the last end of the kept ones."""

    first: float = math.inf
    last: float = -math.inf
    events: int = 0
    complete: int = 0
    malformed: int = 0


def kept_events(batches: Iterable[list[Event[A]]], categories: Mapping[str, int], other: int,
                tally: Tally) -> Iterator[tuple[int, Event[A], Any, Any, str]]:
    """The one dispatch loop of the readers: (kind, event, ts, end, name) of every complete event whose category
    (case-insensitive) `categories` maps to a kind other than `other`, with numeric ts and dur >= 0; the name is ""
    when it is not a string. Counts go into `tally` when the events run out."""
    kinds: dict[Any, int] = {}
    first, last = tally.first, tally.last
    count = complete = malformed = 0
    for batch in batches:
        count += len(batch)
        for ev in batch:
            if ev.ph != "X":
                continue
            cat = ev.cat
            try:
                kind = kinds[cat]
            except KeyError:
                kind = categories.get(cat.lower(), other) if isinstance(cat, str) else other
                kinds[cat] = kind
            except TypeError:  # an unhashable category (a malformed trace)
                kind = other
            complete += 1
            if kind == other:
                continue
            ts = ev.ts
            dur = ev.dur
            if (type(ts) is not float and type(ts) is not int) or (type(dur) is not float and type(dur) is not int) \
                    or dur < 0:
                malformed += 1
                continue
            end = ts + dur
            if ts < first:
                first = ts
            if end > last:
                last = end
            name = ev.name
            yield kind, ev, ts, end, name if type(name) is str else ""
    tally.first, tally.last = first, last
    tally.events += count
    tally.complete += complete
    tally.malformed += malformed


def ijson_prefix(fh: IO[bytes]) -> str:
    """The ijson prefix of the events: "item" for a bare JSON array, else "traceEvents.item"."""
    peek = getattr(fh, "peek", None)
    start = peek(64).lstrip(b" \t\r\n\xef\xbb\xbf")[:1] if peek is not None else b"{"
    return "item" if start == b"[" else "traceEvents.item"


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of short-lived, acyclic event objects are made (it would
    otherwise rescan them many times over); the previous state is restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_STEP = re.compile(r"ProfilerStep#([0-9]{1,18})", re.ASCII)


def step_number(name: str) -> int | None:
    """N of a `ProfilerStep#N` span, or None for any other name. N is ASCII digits as PyTorch writes them:
    `str.isdigit()` also accepts "²" (which `int()` refuses) and full-width digits, and `int()` refuses numbers of
    more than 4300 digits."""
    match = _STEP.fullmatch(name)
    return int(match.group(1)) if match else None
