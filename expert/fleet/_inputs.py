"""Fleet inputs: a manifest (CSV/JSONL), a glob or a directory, as fsspec URLs -> jobs, with what each file is now.

A job is what `dam diagnose --from FILE... FACTS.yaml --set ...` would diagnose in one call: its trace and telemetry
files (ingested together), its observation files (YAML, applied on top) and its typed facts (applied last).
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ExpertError, Problem

MANIFEST_SUFFIXES = (".csv", ".jsonl", ".ndjson")
# Files a directory input picks up: the telemetry `dam ingest` reads and observation files. A glob takes whatever it
# matches (so `'runs/**/*'` also reaches files named otherwise).
DIR_SUFFIXES = (".json", ".json.gz", ".gz", ".csv", ".txt", ".log", ".prom", ".sqlite", ".yaml", ".yml")
OBSERVATION_SUFFIXES = (".yaml", ".yml")
_MANIFEST_KEYS = ("job_id", "job_key", "files", "facts", "labels")
_GLOB_MAGIC = re.compile(r"[*?\[]")
_UNKNOWN = "\x00not stat'ed yet"  # a placeholder `stat_jobs` replaces


class FleetInputError(ExpertError):
    """An input the fleet run cannot start from (bad manifest, nothing matches, bad option): exit code 2."""

    def __init__(self, problems: list[Problem], title: str = "cannot read the fleet input") -> None:
        self.problems = problems
        self.title = title
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join([f"{self.title}:"] + [f"  - {p}" for p in self.problems])


@dataclass(frozen=True)
class FileRef:
    """One input file as it is now: its URL, size and version token (ETag, generation or mtime), or why not."""

    url: str
    size: int | None = None
    version: str | None = None
    error: str | None = None

    def identity(self) -> list[Any]:
        return [self.url, self.size, self.version, self.error]


@dataclass
class Job:
    """One job of a fleet: its key, its files (fsspec URLs), its typed facts and its labels.

    Facts are applied on top of what the files give (like `--set`); labels are carried to the output row only.
    """

    key: str
    files: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    refs: list[FileRef] | None = None  # filled in by `stat_jobs` (or by a listing that already knows them)

    @classmethod
    def coerce(cls, value: Job | Mapping[str, Any], where: str = "job") -> Job:
        """A Job from a Job or a mapping {job_key|job_id, files, facts, labels}."""
        if isinstance(value, Job):
            return value
        if not isinstance(value, Mapping):
            raise FleetInputError([Problem(where, f"expected a Job or a mapping, got {type(value).__name__}")])
        return _job_from_record(dict(value), where, base=None)


def is_observation_file(url: str) -> bool:
    """True for an observation file (typed facts, YAML) rather than a trace or telemetry log."""
    return url.lower().endswith(OBSERVATION_SUFFIXES)


def url_to_fs(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """The fsspec filesystem and the path inside it for a URL (a plain path is a local file)."""
    import fsspec.core

    fs, path = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
    return fs, str(path)


def is_local(fs: Any) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return bool(protocol in ("file", "local"))


def _full_url(fs: Any, path: str) -> str:
    """The URL a worker reopens: plain paths stay plain paths (so reports name them as `dam diagnose` does)."""
    return path if is_local(fs) else str(fs.unstrip_protocol(path))


def _version(info: Mapping[str, Any]) -> str | None:
    for key in ("ETag", "etag", "md5Hash", "generation", "content_md5", "mtime", "LastModified", "last_modified",
                "updated", "created"):
        value = info.get(key)
        if value not in (None, ""):
            return f"{key}={value}"
    return None


def _ref(fs: Any, path: str, info: Mapping[str, Any]) -> FileRef:
    size = info.get("size")
    return FileRef(_full_url(fs, path), int(size) if size is not None else None, _version(info))


def collect_jobs(inputs: Sequence[str], *, job_key: str | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> tuple[list[Job], list[str]]:
    """Jobs from manifests, globs, directories or single files (fsspec URLs), and notes on what was left out.

    Files from globs and directories are grouped into jobs by `job_key`, a regular expression searched in each file's
    URL: the job key is its named group `job`, else its first group, else the whole match; files it does not match
    are left out (with a note). Without `job_key` every file is its own job. Manifests give their jobs explicitly.
    """
    if not inputs:
        raise FleetInputError([Problem("inputs", "no input given", "give a MANIFEST (.csv/.jsonl), a GLOB or a DIR")])
    pattern = _compile_job_key(job_key)
    jobs: list[Job] = []
    notes: list[str] = []
    listed: list[tuple[str, FileRef]] = []  # (key relative to its input, file)
    for text in inputs:
        fs, path = url_to_fs(text, storage_options)
        if _GLOB_MAGIC.search(path):
            found = fs.glob(path, detail=True)
            files = {p: i for p, i in found.items() if i.get("type", "file") == "file"}
            if not files:
                raise FleetInputError([Problem(text, "the glob matches no file")])
            root = _glob_root(path)
            listed += [(_relative(p, root), _ref(fs, p, files[p])) for p in sorted(files)]
        elif path.lower().endswith(MANIFEST_SUFFIXES) and fs.isfile(path) and _is_manifest(fs, path):
            jobs += read_manifest(text, storage_options=storage_options)
        elif fs.isdir(path):
            found = fs.find(path, detail=True)
            files = {p: i for p, i in found.items() if i.get("type", "file") == "file" and _listed(p, path)}
            if not files:
                raise FleetInputError([Problem(text, "the directory holds no trace, telemetry or observation file",
                                               "files ending in " + ", ".join(DIR_SUFFIXES))])
            listed += [(_relative(p, path), _ref(fs, p, files[p])) for p in sorted(files)]
        elif fs.isfile(path):
            listed.append((posixpath.basename(path), _ref(fs, path, fs.info(path))))
        else:
            raise FleetInputError([Problem(text, "no such file or directory",
                                           "give a MANIFEST (.csv/.jsonl), a GLOB (quoted) or a DIR")])
    if listed:
        grouped, unmatched = _group(listed, pattern)
        if not grouped:
            raise FleetInputError([Problem(f"--job-key {job_key}", f"matches none of the {len(listed)} files",
                                           f"e.g. {listed[0][1].url}")], title="invalid option")
        jobs += grouped
        if unmatched:
            shown = ", ".join(unmatched[:3]) + (f" and {len(unmatched) - 3} more" if len(unmatched) > 3 else "")
            notes.append(f"{len(unmatched)} file(s) do not match --job-key and were left out: {shown}")
    _check_unique(jobs)
    return jobs, notes


def _listed(path: str, root: str) -> bool:
    """A directory input takes files with a telemetry or observation suffix, not hidden ones (nor in hidden
    folders), nor `_`-prefixed ones (such as a fleet summary)."""
    parts = _relative(path, root).split("/")
    return (path.lower().endswith(DIR_SUFFIXES) and not any(p.startswith(".") for p in parts)
            and not parts[-1].startswith("_"))


def _is_manifest(fs: Any, path: str) -> bool:
    """JSONL always; a CSV when its header names a `files` or `facts` column (else it is, say, an nvidia-smi log)."""
    if not path.lower().endswith(".csv"):
        return True
    with fs.open(path, "rb") as fh:
        head = fh.read(4096).decode("utf-8-sig", errors="replace").splitlines()
    cells = {c.strip().strip('"') for c in head[0].split(",")} if head else set()
    return bool(cells & {"files", "facts"})


def _compile_job_key(text: str | None) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise FleetInputError([Problem(f"--job-key {text}", f"not a regular expression: {exc}",
                                       r"e.g. --job-key '(?P<job>run-\d+)/rank\d+'")], title="invalid option") from exc


def _glob_root(path: str) -> str:
    parts = path.split("/")
    root: list[str] = []
    for part in parts:
        if _GLOB_MAGIC.search(part):
            break
        root.append(part)
    return "/".join(root)


def _relative(path: str, root: str) -> str:
    root = root.rstrip("/")
    if root and path.startswith(root + "/"):
        return path[len(root) + 1:]
    return posixpath.basename(path)


def _group(listed: list[tuple[str, FileRef]], pattern: re.Pattern[str] | None) -> tuple[list[Job], list[str]]:
    if pattern is None:
        counts: dict[str, int] = {}
        for rel, _ in listed:
            counts[rel] = counts.get(rel, 0) + 1
        return [Job(key=rel if counts[rel] == 1 else ref.url, files=[ref.url], refs=[ref]) for rel, ref in listed], []
    groups: dict[str, list[FileRef]] = {}
    unmatched: list[str] = []
    for _, ref in listed:
        match = pattern.search(ref.url)
        if match is None:
            unmatched.append(ref.url)
            continue
        named = match.groupdict().get("job")
        key = named if named is not None else (match.group(1) if pattern.groups else match.group(0))
        groups.setdefault(key or match.group(0), []).append(ref)
    return [Job(key=k, files=[r.url for r in refs], refs=refs) for k, refs in groups.items()], unmatched


def _check_unique(jobs: list[Job]) -> None:
    seen: set[str] = set()
    duplicates = []
    for job in jobs:
        if job.key in seen:
            duplicates.append(job.key)
        seen.add(job.key)
    if duplicates:
        raise FleetInputError([Problem("job keys", f"{len(duplicates)} job key(s) appear more than once: "
                                       + ", ".join(sorted(set(duplicates))[:5]),
                                       "give each manifest row its own job_id, or group files with --job-key")])


# ---- manifests ----------------------------------------------------------------------------------------------------


def read_manifest(url: str, *, storage_options: Mapping[str, Any] | None = None) -> list[Job]:
    """Jobs from a CSV or JSONL manifest; relative file paths are relative to the manifest's folder.

    CSV columns: job_id (or job_key), files (URLs separated by `;`, globs allowed), facts (a JSON object or
    `name=value;name=value`), labels (the same); any other column is a label. JSONL: one object per line with the
    same keys (files a list or a string, facts and labels objects); other keys with scalar values are labels.
    """
    fs, path = url_to_fs(url, storage_options)
    try:
        with fs.open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise FleetInputError([Problem(url, f"cannot read the manifest: {exc}")]) from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FleetInputError([Problem(url, "the manifest is not UTF-8 text")]) from exc
    base = _full_url(fs, posixpath.dirname(path))
    records: list[tuple[str, dict[str, Any]]] = []
    if path.lower().endswith(".csv"):
        reader = csv.DictReader(io.StringIO(text))
        columns = [c.strip() for c in (reader.fieldnames or [])]
        if "files" not in columns and "facts" not in columns:
            raise FleetInputError([Problem(f"{url}:1", f"no `files` or `facts` column (columns: {columns})",
                                           "header: job_id,files,facts,labels (other columns are labels)")])
        for row in reader:
            record = {(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None}
            if any(record.values()):
                records.append((f"{url}:{reader.line_num}", record))
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise FleetInputError([Problem(f"{url}:{number}", f"invalid JSON: {exc.msg}")]) from exc
            if not isinstance(record, dict):
                raise FleetInputError([Problem(f"{url}:{number}", "expected a JSON object per line")])
            records.append((f"{url}:{number}", record))
    if not records:
        raise FleetInputError([Problem(url, "the manifest lists no job")])
    return [_job_from_record(record, where, base=base, storage_options=storage_options)
            for where, record in records]


def _job_from_record(record: dict[str, Any], where: str, *, base: str | None,
                     storage_options: Mapping[str, Any] | None = None) -> Job:
    key = record.get("job_key") or record.get("job_id")
    files = _files_field(record.get("files"), where)
    facts = _mapping_field(record.get("facts"), where, "facts")
    labels = {k: str(v) for k, v in _mapping_field(record.get("labels"), where, "labels").items()}
    for name, value in record.items():
        if name not in _MANIFEST_KEYS and name and value not in (None, ""):
            if isinstance(value, (dict, list)):
                hint = "keys: " + ", ".join(_MANIFEST_KEYS) + "; other keys are scalar labels"
                raise FleetInputError([Problem(f"{where}: {name}", "unknown key with a structured value", hint)])
            labels[name] = str(value)
    if not files and not facts:
        raise FleetInputError([Problem(where, "a job needs files or facts", "e.g. files: run/trace.json.gz")])
    urls: list[str] = []
    known: dict[str, FileRef] = {}
    for entry in files:
        resolved = _resolve(entry, base) if base is not None else entry
        if base is not None and _GLOB_MAGIC.search(resolved):
            efs, epath = url_to_fs(resolved, storage_options)
            found = efs.glob(epath, detail=True)
            matched = sorted(p for p, i in found.items() if i.get("type", "file") == "file")
            if not matched:
                known[resolved] = FileRef(resolved, error="the glob matches no file")
                matched_urls = [resolved]
            else:
                matched_urls = []
                for p in matched:
                    ref = _ref(efs, p, found[p])
                    known[ref.url] = ref
                    matched_urls.append(ref.url)
            urls += matched_urls
        else:
            urls.append(resolved)
    if not key:
        if not urls:
            raise FleetInputError([Problem(where, "a job with only facts needs a job_id")])
        key = urls[0]
    return Job(key=str(key), files=urls, facts=facts, labels=labels,
               refs=[known.get(u, FileRef(u, error=_UNKNOWN)) for u in urls] if known else None)


def _resolve(entry: str, base: str) -> str:
    if "://" in entry or entry.startswith("/") or not base:
        return entry
    if "://" in base:
        return posixpath.join(base, entry)
    return posixpath.normpath(posixpath.join(base, entry))


def _files_field(value: Any, where: str) -> list[str]:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [f.strip() for f in value.split(";") if f.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise FleetInputError([Problem(f"{where}: files", "expected a list of URLs or a `;`-separated string")])


def _mapping_field(value: Any, where: str, name: str) -> dict[str, Any]:
    if value in (None, ""):
        return {}
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as exc:
                raise FleetInputError([Problem(f"{where}: {name}", f"invalid JSON object: {exc.msg}")]) from exc
            if isinstance(parsed, dict):
                return {str(k): v for k, v in parsed.items()}
        pairs: dict[str, Any] = {}
        for item in text.split(";"):
            if not item.strip():
                continue
            k, sep, v = item.partition("=")
            if not sep or not k.strip():
                raise FleetInputError([Problem(f"{where}: {name}", f"expected NAME=VALUE, got {item.strip()!r}",
                                               f'e.g. {name}: gpu_util=45%;hardware=h100-sxm or a JSON object')])
            pairs[k.strip()] = v.strip()
        return pairs
    raise FleetInputError([Problem(f"{where}: {name}", f"expected an object, got {type(value).__name__}")])


# ---- the state of each file now -----------------------------------------------------------------------------------


def stat_jobs(jobs: Iterable[Job], storage_options: Mapping[str, Any] | None = None) -> None:
    """Fill in each job's `refs` (size and version token of every file) where a listing did not already."""
    for job in jobs:
        known = {r.url: r for r in (job.refs or []) if r.error != _UNKNOWN}
        job.refs = [known[url] if url in known else _stat(url, storage_options) for url in job.files]


def _stat(url: str, storage_options: Mapping[str, Any] | None) -> FileRef:
    try:
        fs, path = url_to_fs(url, storage_options)
        info = fs.info(path)
    except FileNotFoundError:
        return FileRef(url, error="no such file")
    except (OSError, ValueError) as exc:
        return FileRef(url, error=f"cannot read its size and version: {exc}")
    if info.get("type", "file") != "file":
        return FileRef(url, error="not a regular file")
    size = info.get("size")
    return FileRef(url, int(size) if size is not None else None, _version(info))
