"""Opening telemetry inputs: paths or streams, gzip or plain, with progress, format sniffing and located errors."""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from ..errors import ObservationError, Problem, not_a_file

CANNOT_READ = "cannot read the traces or telemetry"  # the title of every ingest error

if TYPE_CHECKING:
    from ..kb.knowledge import KernelCatalog, KnowledgeBase

Format = Literal["kineto", "nvidia-smi", "nvidia-smi-dmon", "dcgmi", "prometheus", "nsys", "nccl-tests",
                 "serving-metrics"]
FORMATS: tuple[Format, ...] = ("kineto", "nvidia-smi", "nvidia-smi-dmon", "dcgmi", "prometheus", "nsys", "nccl-tests",
                               "serving-metrics")
FORMAT_TITLES: dict[str, str] = {
    "kineto": "PyTorch profiler / Kineto trace (JSON, .json.gz)",
    "nsys": "Nsight Systems export (nsys export --type sqlite; .nsys-rep with nsys on PATH)",
    "nvidia-smi": "nvidia-smi --query-gpu=... --format=csv",
    "nvidia-smi-dmon": "nvidia-smi dmon",
    "dcgmi": "dcgmi dmon -e ...",
    "prometheus": "dcgm-exporter Prometheus text",
    "nccl-tests": "nccl-tests output (all_reduce_perf and friends: size, algbw, busbw)",
    "serving-metrics": "vLLM or SGLang Prometheus /metrics text (requests, KV cache, TTFT, TPOT, queue time)",
}

Progress = Callable[[int, int | None], None]
"""Called as progress(bytes_read, total_bytes_or_None) while a file is read (bytes as stored, i.e. compressed)."""

# the head of nccl-tests output: its `# nThread N nGpus M` or `# Collective test starting` line (mpirun-tagged or not)
NCCL_TESTS_START = re.compile(
    r"^(?:\[\d+,\d+\]<stdout>:)?#\s*(?:nThread\s+\d+\s+nGpus\s+\d+|Collective test starting:)", re.MULTILINE | re.ASCII)

JobProgress = Callable[[str, int, "int | None"], None]
"""Called as progress(job label, bytes read, bytes to read) while the rank files of a job are read."""

SourceLike = str | os.PathLike[str] | IO[bytes] | IO[str]

_SNIFF_BYTES = 64 * 1024
_PROGRESS_STEP = 1 << 20
_GZIP_MAGIC = b"\x1f\x8b"


class Source:
    """One input: a path on disk or an open stream (binary or text), and the name it is reported under."""

    def __init__(self, obj: SourceLike) -> None:
        self.path: Path | None = None
        self._stream: IO[bytes] | None = None
        self._head: bytes = b""
        if isinstance(obj, (str, os.PathLike)):
            self.path = Path(obj)
            self.label = str(obj)
            self.name = self.path.name
            what = not_a_file(self.path)
            if what is not None:  # a directory is expanded before a Source is made; FIFOs and devices never end
                hint = ("give a trace or telemetry file; pipe a stream through - (standard input)"
                        if any(k in what for k in ("FIFO", "device", "socket")) else "")
                raise ObservationError([Problem(self.label, what, hint)], title=CANNOT_READ)
            self.size: int | None = self.path.stat().st_size
        elif hasattr(obj, "read"):
            name = getattr(obj, "name", None)
            self.label = str(name) if isinstance(name, str) else "<stream>"
            self.name = Path(self.label).name if isinstance(name, str) else "<stream>"
            self._stream = _as_binary(obj)
            self.size = None
        else:
            raise ObservationError([Problem(repr(obj)[:60], "expected a file path or an open file")],
                                   title=CANNOT_READ)
        self._used = False

    def problem(self, message: str, *, line: int | None = None, hint: str = "") -> ObservationError:
        """An ObservationError naming this file (and line, when known)."""
        where = f"{self.label}:{line}" if line is not None else self.label
        return ObservationError([Problem(where, message, hint)], title=CANNOT_READ)

    def kernel_catalog(self, kb: KnowledgeBase) -> KernelCatalog:
        """The knowledge base's kernel classes (kernels.yaml), which trace analysis needs; a problem naming this file
        where there are none."""
        if kb.kernels is None:
            raise self.problem("the knowledge base has no kernels.yaml (kernel classes for trace analysis)")
        return kb.kernels

    def head(self) -> bytes:
        """The first bytes of the (decompressed) content, for format sniffing; the stream is not consumed."""
        if self.path is not None:
            try:
                with open(self.path, "rb") as fh:
                    raw = fh.read(_SNIFF_BYTES)
            except OSError as exc:
                raise self.problem(f"cannot open: {exc.strerror or exc}") from exc
        else:
            assert self._stream is not None
            if not self._head:
                self._head = _read_upto(self._stream, _SNIFF_BYTES)
            raw = self._head
        if raw[:2] == _GZIP_MAGIC:
            try:
                head = zlib.decompressobj(31).decompress(raw, _SNIFF_BYTES)
            except zlib.error as exc:
                raise self.problem(f"corrupt gzip data: {exc}") from exc
            if not head and len(raw) > 20:
                raise self.problem("compressed data is truncated or corrupt (nothing decompresses)")
            return head
        return raw

    @contextmanager
    def open(self, progress: Progress | None = None) -> Iterator[IO[bytes]]:
        """The decompressed content as a binary stream (gzip is detected by its magic bytes)."""
        if self.path is not None:
            try:
                raw: Any = open(self.path, "rb")  # noqa: SIM115 - closed below
            except OSError as exc:
                raise self.problem(f"cannot open: {exc.strerror or exc}") from exc
        else:
            if self._used:
                raise self.problem("a stream can be read only once")
            self._used = True
            assert self._stream is not None
            raw = _Prefixed(self._head, self._stream) if self._head else self._stream
        try:
            counted: Any = _Counting(raw, progress, self.size) if progress else raw
            buffered: Any = counted if isinstance(counted, io.BufferedReader) else io.BufferedReader(counted)
            if buffered.peek(2)[:2] == _GZIP_MAGIC:
                yield gzip.GzipFile(fileobj=buffered, mode="rb")  # type: ignore[misc]
            else:
                yield buffered
        finally:
            if self.path is not None:
                raw.close()

    def lines(self, progress: Progress | None = None) -> Iterator[tuple[int, str]]:
        """(line number, text without the newline) for a text file; binary or non-UTF-8 content is a located error."""
        number = 0
        with self.open(progress) as fh:
            text = io.TextIOWrapper(fh, encoding="utf-8", errors="strict", newline=None)
            try:
                for number, line in enumerate(_guarded(text, self), start=1):
                    if "\x00" in line:
                        raise self.problem("binary data, not a text log", line=number,
                                           hint="give the text output of the tool, not a binary file")
                    yield number, line.rstrip("\n")
            except UnicodeDecodeError as exc:
                raise self.problem("not UTF-8 text (binary data?)", line=number + 1,
                                   hint="give the text output of the tool") from exc
            finally:
                text.detach()


def _guarded(text: io.TextIOWrapper, src: Source) -> Iterator[str]:
    """Iterate lines, turning gzip truncation or corruption into a located error."""
    it = iter(text)
    while True:
        try:
            line = next(it)
        except StopIteration:
            return
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise src.problem(f"compressed data is truncated or corrupt ({exc})") from exc
        yield line


def _read_upto(fh: IO[bytes], n: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    try:
        while got < n:
            chunk = fh.read(n - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error):
        pass  # a truncated or corrupt file still has a head to sniff; reading it later reports the error
    return b"".join(chunks)


def _as_binary(obj: IO[bytes] | IO[str]) -> IO[bytes]:
    probe = obj.read(0)
    if isinstance(probe, str):
        return _TextAsBytes(obj)  # type: ignore[arg-type,return-value]
    return obj  # type: ignore[return-value]


class _TextAsBytes(io.RawIOBase):
    """A text stream read as UTF-8 bytes."""

    def __init__(self, text: IO[str]) -> None:
        self._text = text
        self._pending = b""
        self.name = getattr(text, "name", "<stream>")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer) -> int:  # type: ignore[override]
        view = memoryview(buffer)
        while len(self._pending) < len(view):
            chunk = self._text.read(65536)
            if not chunk:
                break
            self._pending += chunk.encode("utf-8")
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


Buffer = bytearray | memoryview


class _Prefixed(io.RawIOBase):
    """Bytes already read from a stream (for sniffing) followed by the rest of it."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer) -> int:  # type: ignore[override]
        view = memoryview(buffer)
        if self._head:
            n = min(len(view), len(self._head))
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        super().close()


class _Counting(io.RawIOBase):
    """Passes bytes through and reports progress about every megabyte."""

    def __init__(self, raw: IO[bytes], progress: Progress, total: int | None) -> None:
        self._raw = raw
        self._progress = progress
        self._total = total
        self._done = 0
        self._next = _PROGRESS_STEP

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Buffer) -> int:  # type: ignore[override]
        data = self._raw.read(len(buffer))
        n = len(data)
        memoryview(buffer)[:n] = data
        self._done += n
        if self._done >= self._next or n == 0:
            self._next = self._done + _PROGRESS_STEP
            self._progress(self._done, self._total)
        return n


_DCGMI_HEADER = re.compile(r"^#\s*Entity\b", re.IGNORECASE)
_DMON_HEADER = re.compile(r"^#\s*(?:Date\s+Time\s+)?(?:gpu|Idx)\b", re.IGNORECASE)
# a serving engine's own metric (vLLM's vllm:..., SGLang's sglang:...) at the start of a line
ENGINE_METRIC = re.compile(r"^(?:vllm|sglang):[a-zA-Z0-9_:]", re.MULTILINE | re.ASCII)
_PROM_SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{.*\})?\s+\S+")
_SMI_FIELD = re.compile(r"^[a-z_][a-z0-9_.]*(?:\s*\[[^\]]*\])?$")


_WHAT = ("give a Kineto .json/.json.gz trace, an Nsight Systems .sqlite export, nvidia-smi/dcgmi output, "
         "Prometheus text or nccl-tests output")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_NSYS_REPORTS = (".nsys-rep", ".qdrep")


def sniff(src: Source) -> Format:
    """Tell the format of an input from its first bytes (an Nsight Systems report also by its .nsys-rep name)."""
    if src.path is not None and src.path.suffix.lower() in _NSYS_REPORTS:
        return "nsys"
    head = src.head()
    if not head.strip():
        if head == b"" and src.size:  # bytes on disk, none after decompression: a gzip of nothing
            raise src.problem(f"the compressed file ({src.size} bytes) holds no data when decompressed",
                              hint="give a profiler trace or a telemetry log; re-export it")
        raise src.problem("the file is empty" if head == b"" else "the file holds only whitespace",
                          hint="give a profiler trace or a telemetry log")
    if head.startswith(_SQLITE_MAGIC):
        return "nsys"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(head) > 3 and head[1:4:2] == b"\x00\x00") \
            or (len(head) > 3 and head[0:3:2] == b"\x00\x00"):
        raise src.problem("UTF-16 text, not UTF-8 (traces and telemetry logs are UTF-8)",
                          hint="convert it: iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8")
    if b"\x00" in head:
        raise src.problem("binary data, not a profiler trace or telemetry text", hint=_WHAT)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a multi-byte character cut at the end of the sniffed block
            raise src.problem("not UTF-8 text (binary data?)", hint=_WHAT) from exc
        text = head[: exc.start].decode("utf-8")
    stripped = text.lstrip("\ufeff \t\r\n")
    if NCCL_TESTS_START.search(stripped):  # before JSON: mpirun --tag-output lines start with "[1,0]<stdout>:"
        return "nccl-tests"
    if stripped[:1] in ("{", "["):
        return "kineto"
    lines = [ln.strip() for ln in stripped.splitlines() if ln.strip()][:20]
    first = lines[0]
    if _DCGMI_HEADER.match(first):
        return "dcgmi"
    if _DMON_HEADER.match(first):
        return "nvidia-smi-dmon"
    dcgm = "DCGM_FI_" in stripped
    if not dcgm and ENGINE_METRIC.search(stripped):  # a vLLM or SGLang /metrics scrape
        return "serving-metrics"
    if first.startswith(("# HELP", "# TYPE")) or any(ln.startswith("DCGM_FI_") for ln in lines):
        return "prometheus"
    cells = [c.strip() for c in first.split(",")]
    if len(cells) >= 2:
        return "nvidia-smi"
    if _PROM_SAMPLE.match(first):
        return "prometheus"
    raise src.problem(f"cannot tell the format from the first line {first[:60]!r}",
                      line=1, hint="give --format " + "|".join(FORMATS))


def is_header_cell(cell: str) -> bool:
    """True for an nvidia-smi CSV header cell such as `utilization.gpu [%]`."""
    return bool(_SMI_FIELD.match(cell.strip()))


_ASCII_INDEX = re.compile(r"[0-9]{1,9}", re.ASCII)
_ASCII_FLOAT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?", re.ASCII)


# one sample line of the Prometheus text exposition format: METRIC{label="value",...} VALUE [TIMESTAMP]
PROM_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_PROM_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


PromSample = tuple[int, str, str | None, str, str | None]
"""(line number, metric, label text or None, value text, timestamp text or None)"""


def prom_samples(src: Source, progress: Progress | None = None) -> Iterator[PromSample]:
    """(line number, metric, label text or None, value text, timestamp text or None) of each sample line of a
    Prometheus text file, comments and blank lines skipped; a line that is not a sample is a located error."""
    for number, text in src.lines(progress):
        stripped = text.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = PROM_SAMPLE.match(stripped)
        if not match:
            raise src.problem(f"not a Prometheus sample line: {stripped[:60]!r}", line=number,
                              hint='expected METRIC{label="value",...} VALUE [TIMESTAMP]')
        metric, label_text, value_text, stamp = match.groups()
        yield number, metric, label_text, value_text, stamp


def prom_labels(src: Source, line: int, text: str) -> dict[str, str]:
    """The labels of a Prometheus sample (the text between its braces); malformed ones are a located error."""
    labels: dict[str, str] = {}
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _PROM_LABEL.match(text, pos)
        if not match or match.end() == pos:
            raise src.problem(f"malformed labels {{{text[:60]}}}", line=line, hint='expected name="value", ...')
        labels[match.group(1)] = match.group(2).replace('\\"', '"').replace("\\\\", "\\")
        pos = match.end()
    return labels


def ascii_index(text: str) -> int | None:
    """A device or entity index in the ASCII digits the formats print ("0".."999999999"); anything else is None.

    `str.isdigit()` accepts "²" and other Unicode digits that `int()` then refuses, and Python's `int()` accepts
    "1_0" and full-width digits: telemetry formats use neither."""
    text = text.strip()
    return int(text) if _ASCII_INDEX.fullmatch(text) else None


def ascii_float(text: str) -> float | None:
    """A finite number written in ASCII as the formats print it (no underscores, no Unicode digits, no "inf"/"nan",
    no 400-digit exponents); anything else is None."""
    text = text.strip()
    if len(text) > 64 or not _ASCII_FLOAT.fullmatch(text):
        return None
    value = float(text)
    return value if value == value and abs(value) != float("inf") else None
