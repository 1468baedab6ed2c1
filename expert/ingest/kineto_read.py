"""Reading a PyTorch profiler (Kineto) trace into typed event batches: the msgspec types of the fields the analysis
reads, libkineto's layout decoded in batches (the shared `_kineto_stream.fast_batches`), ijson's dicts converted
for any other layout, and the top-level metadata (deviceProperties, distributedInfo, with_flops)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

import msgspec

from ._kineto_stream import Document, Event, fast_batches

_META_KEYS = re.compile(rb'"(deviceProperties|distributedInfo|with_flops)"\s*:\s*')
_TAP_KEEP = 1 << 20
_HINT = "a PyTorch profiler trace from prof.export_chrome_trace() or tensorboard_trace_handler"


class _Tap:
    """A file wrapper that keeps the head and tail of what passes through (for the top-level metadata) and counts
    lines (to place parse errors)."""

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner
        self.head = b""
        self.tail = b""
        self.last = b""
        self.lines_before_last = 0
        self.total = 0

    def read(self, n: int = -1) -> bytes:
        data = self._inner.read(n)
        if data:
            self.lines_before_last += self.last.count(b"\n")
            self.total += len(data)
            if len(self.head) < _TAP_KEEP:
                self.head += data[: _TAP_KEEP - len(self.head)]
            self.tail = (self.last + data)[-_TAP_KEEP:] if len(data) < _TAP_KEEP else data[-_TAP_KEEP:]
            self.last = data
        return data

    def locate(self, message: str) -> int:
        """The line of a yajl error, using the context snippet yajl prints above '(right here) ------^'."""
        lines = message.splitlines()
        for k, text in enumerate(lines):
            if "(right here)" in text and k > 0:
                context = lines[k - 1]
                caret = text.index("^")
                snippet = context.strip()
                if not snippet:
                    break
                offset_in_context = caret - (len(context) - len(context.lstrip()))
                window = self.tail.replace(b"\n", b" ").replace(b"\r", b" ").replace(b"\t", b" ")
                pos = window.rfind(snippet.encode("utf-8", "replace"))
                if pos >= 0:
                    at = min(len(self.tail), pos + max(offset_in_context, 0))
                    before_tail = self.lines_before_last + self.last.count(b"\n") - self.tail.count(b"\n")
                    return before_tail + self.tail[:at].count(b"\n") + 1
                break
        return self.lines_before_last + self.last.count(b"\n") + 1


_NO_RAW = msgspec.Raw()


class _Args(msgspec.Struct, gc=False):
    """The few event arguments the analysis reads; msgspec skips every other key without building it. Shapes stay
    raw JSON (interned per distinct operator call and parsed once each)."""

    correlation: Any = None
    device: Any = None
    flops: Any = None
    stream: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_old: Any = msgspec.field(default=None, name="external id")
    dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    types: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")


_Event = Event[_Args]
"""One trace event, reduced to the fields the analysis reads."""
_Document = Document[_Args]
"""A whole (small) trace document, or its head or tail cut at an event boundary."""

_SKIP: _Event = Event()


def _raw(value: Any) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(value)) if value is not None else _NO_RAW


def _from_dicts(items: Iterable[Any], batch: int = 8192) -> Iterator[list[_Event]]:
    """ijson's event dicts as batches of _Event (only complete events are converted; others are skipped cheaply)."""
    out: list[_Event] = []
    for ev in items:
        if type(ev) is not dict or ev.get("ph") != "X":
            out.append(_SKIP)
        else:
            a = ev.get("args")
            args = _Args(a.get("correlation"), a.get("device"), a.get("flops"), a.get("stream"),
                            a.get("External id"), a.get("external id"), _raw(a.get("Input Dims")),
                            _raw(a.get("Input type")), _raw(a.get("Concrete Inputs"))) if type(a) is dict else None
            out.append(Event("X", ev.get("cat"), ev.get("name"), ev.get("ts"), ev.get("dur"), ev.get("pid"),
                             ev.get("tid"), args))
        if len(out) >= batch:
            yield out
            out = []
    if out:
        yield out


_AS_LIST = msgspec.json.Decoder(list[_Event])
_AS_DOC = msgspec.json.Decoder(_Document)


def _fast_batches(fh: IO[bytes], meta: dict[str, Any], *, head: bool = True,
                  tail: bool = True) -> Iterator[list[_Event]]:
    """Events of a trace in libkineto's layout, decoded a few megabytes at a time (`_kineto_stream.fast_batches`;
    head/tail as there, for one byte range of the file); the metadata goes into `meta`, the bytes read into
    `meta["_bytes"]`. Anything unexpected raises NotFast."""

    def opened(doc: _Document) -> list[_Event]:
        _keep_meta(doc, meta)
        return doc.traceEvents

    def counted(n: int) -> None:
        meta["_bytes"] = meta.get("_bytes", 0) + n

    return fast_batches(fh, _AS_LIST, _AS_DOC, opened, counted, head=head, tail=tail)


def _keep_meta(doc: _Document, meta: dict[str, Any]) -> None:
    for key in ("deviceProperties", "distributedInfo", "with_flops"):
        value = getattr(doc, key)
        if value is not None and key not in meta:
            if key == "deviceProperties" and not (isinstance(value, list) and all(isinstance(d, dict) for d in value)):
                continue
            meta[key] = value


def _metadata(tap: _Tap) -> dict[str, Any]:
    """Top-level keys other than traceEvents, found in the first or last megabyte of the document."""
    found: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    for blob in (tap.head, tap.tail):
        text = blob.decode("utf-8", "replace")
        for match in _META_KEYS.finditer(blob):
            key = match.group(1).decode()
            if key in found:
                continue
            start = len(blob[: match.end()].decode("utf-8", "replace"))
            try:
                value, _ = decoder.raw_decode(text, start)
            except ValueError:
                continue
            if key == "deviceProperties" and not (isinstance(value, list) and all(isinstance(d, dict) for d in value)):
                continue
            found[key] = value
    return found
