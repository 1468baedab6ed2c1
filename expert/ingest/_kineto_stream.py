"""Streaming a PyTorch profiler (Kineto) trace: what `kineto.py` and `rank_trace.py` both read the same way.

- `fast_batches`: the events of a trace in libkineto's own layout, decoded into a reader's own msgspec types a
  megabyte at a time (`NotFast` when the layout is another; the reader then falls back to ijson);
- `ijson_prefix`: where the events are for ijson (a bare array or a `traceEvents` member);
- `gc_paused`: the cyclic garbage collector paused while millions of acyclic event objects are made;
- `step_number`: the N of a `ProfilerStep#N` span, in ASCII digits only.
"""

from __future__ import annotations

import gc
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from gzip import BadGzipFile
from typing import IO, TypeVar

import msgspec

E = TypeVar("E")
D = TypeVar("D")

BOUNDARY = b"\n  },\n  {"
"""What libkineto writes between two events (JSON strings hold no raw newline, so it never occurs inside one)."""
BLOCK = 1 << 20
SEARCH_LIMIT = 16 << 20
"""Read this much without an event boundary and the file is not in libkineto's layout."""


class NotFast(Exception):
    """The document is not in Kineto's own layout (or is malformed): read it with ijson instead."""


def fast_batches(fh: IO[bytes], events: msgspec.json.Decoder[list[E]], document: msgspec.json.Decoder[D],
                 opened: Callable[[D], list[E]], counted: Callable[[int], None] | None = None) -> Iterator[list[E]]:
    """Events of a trace in libkineto's layout (one event per indented block), decoded a few megabytes at a time.

    The text between two `BOUNDARY`s is a run of whole events; each run is decoded as one typed list (`events`),
    which also validates the cut. The head and the tail are decoded as a `document` (a struct with the top-level
    keys the reader keeps, and `traceEvents`); `opened(doc)` keeps what it needs and returns its events. `counted`
    is told the size of every block read. Anything unexpected raises NotFast.
    """
    buf = b""
    first = True
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
        doc = document.decode(buf if first else b'{"traceEvents":[{' + buf)
    except (msgspec.DecodeError, EOFError, BadGzipFile, zlib.error, OSError) as exc:
        raise NotFast(str(exc)) from exc
    yield opened(doc)


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
