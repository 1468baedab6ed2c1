"""Hardware a user brings: a --hardware-file or `Expert(extra_hardware=...)`, in the catalog's own schema.

The entries extend one Expert's catalog only (see `KnowledgeBase.with_hardware`); nothing global changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from pydantic import ValidationError

from .._yaml import load_yaml, validate
from ..errors import KnowledgeBaseError, Problem, not_a_file
from .catalogs import HardwareSpec, _Strict

# what `Expert(extra_hardware=...)` accepts: a file, or entries as mappings or HardwareSpec
ExtraHardware = Union[str, Path, Sequence[Union[Mapping[str, Any], HardwareSpec]]]  # noqa: UP007 - Python 3.10


class HardwareFile(_Strict):
    """A --hardware-file: entries of knowledge_base/hardware.yaml's schema (families and name prefixes stay the
    catalog's)."""

    schema_version: int = 1
    hardware: list[HardwareSpec]


_SHAPES = ("a mapping with a `hardware:` list (like knowledge_base/hardware.yaml), a list of entries, or one entry "
           "(a mapping with `id`, `name`, `vendor`, `peak_tflops`, ...)")


def load_hardware_file(path: str | Path) -> list[HardwareSpec]:
    """Read and validate a hardware file; every problem names the file, the entry and the field."""
    where = Path(path)
    what = not_a_file(where)  # "no such file", "a directory", "a FIFO (named pipe)" (<(cat hw.yaml)), ...
    if what is not None:
        piped = any(kind in what for kind in ("FIFO", "device", "socket"))
        raise KnowledgeBaseError([Problem(str(where), what if what == "no such file" else f"cannot read: {what}",
                                          ("a pipe or process substitution is not read: save the entries to a file "
                                           "and give its path" if piped else
                                           f"give a YAML or JSON file holding {_SHAPES}"))],
                                 title="cannot read the hardware file")
    data = load_yaml(where)
    if isinstance(data, list):
        data = {"hardware": data}
    elif isinstance(data, Mapping) and "hardware" not in data and "id" in data:
        data = {"hardware": [dict(data)]}
    elif not isinstance(data, Mapping) and data is not None:
        raise KnowledgeBaseError([Problem(str(where), f"holds a {type(data).__name__}", f"expected {_SHAPES}")],
                                 title=f"{where.name} does not match the hardware schema")
    parsed = validate(HardwareFile, data, where)
    if not parsed.hardware:
        raise KnowledgeBaseError([Problem(str(where), "holds no hardware entries", f"expected {_SHAPES}")],
                                 title=f"{where.name} does not match the hardware schema")
    return parsed.hardware


def extra_hardware_specs(extra: ExtraHardware) -> tuple[list[HardwareSpec], str]:
    """The entries `extra` gives (a file path, or mappings / HardwareSpec), and where they came from (for errors)."""
    if isinstance(extra, (str, Path)):
        return load_hardware_file(extra), str(extra)
    if isinstance(extra, Mapping):
        raise KnowledgeBaseError([Problem("extra_hardware", "is one mapping",
                                          "give a list of entries (or a HardwareSpec list, or a file path)")],
                                 title="invalid extra hardware")
    specs: list[HardwareSpec] = []
    problems: list[Problem] = []
    for i, item in enumerate(extra):
        if isinstance(item, HardwareSpec):
            specs.append(item)
            continue
        label = item.get("id") if isinstance(item, Mapping) else None
        at = f"extra_hardware[{i}]" + (f" ({label})" if isinstance(label, str) else "")
        if not isinstance(item, Mapping):
            problems.append(Problem(at, f"is a {type(item).__name__}", "each entry is a mapping or a HardwareSpec"))
            continue
        try:
            specs.append(HardwareSpec.model_validate(dict(item)))
        except ValidationError as exc:
            problems += [Problem(f"{at}: {'.'.join(str(p) for p in err['loc'])}", err["msg"]) for err in exc.errors()]
    if problems:
        raise KnowledgeBaseError(problems, title="invalid extra hardware")
    return specs, "extra_hardware"
