"""MIG slices as catalog entries: each Multi-Instance GPU profile of hardware.yaml `mig` becomes an entry of its own,
carved from its part, so a job on "NVIDIA A100-SXM4-40GB MIG 1g.5gb" is measured against the slice it has, not the
whole GPU.

A profile "<g>g.<m>gb" holds g of the part's compute slices and m GB of its memory. Its entry:

* dense peaks: g / compute_slices of the part's (the MIG User Guide's "fraction of SMs"; an upper bound, since in MIG
  mode a few of the part's SMs belong to no slice);
* memory: m GB, and the share of the bandwidth of its memory slices, m / memory_gb of the part's memory_slices rounded
  to a whole slice (each memory slice brings its own memory controllers and L2: the guide's "fraction of memory");
* no scale-up link (MIG instances do no peer-to-peer over NVLink), the part's host link;
* names: every name of the part followed by "MIG <profile>" (nvidia-smi and torch.cuda.get_device_name print
  "NVIDIA A100-SXM4-40GB MIG 1g.5gb"; the GPU feature discovery label reads "A100-SXM4-40GB-MIG-1g.5gb"), and
  "+me" for the 1g profiles (the same slice with the media engines);
* its upgrade: the whole part (a bigger slice, or MIG off).
"""

from __future__ import annotations

from .catalogs import MIG_PROFILE, HardwareCatalog, HardwareSpec, HardwareUpgrade


def mig_id(part: str, profile: str) -> str:
    """The catalog id of a part's MIG profile: "a100-40gb-mig-1g-5gb"."""
    return f"{part}-mig-{profile.replace('.', '-')}"


def mig_profile(hw: HardwareSpec) -> str:
    """The MIG profile of a slice ("1g.5gb"), or "" for a whole part."""
    return hw.name.rsplit(" MIG ", 1)[1] if hw.mig_of is not None and " MIG " in hw.name else ""


def profile_shape(profile: str) -> tuple[int, int] | None:
    """(compute slices, GB) of a profile name "<g>g.<m>gb", or None for another name."""
    found = MIG_PROFILE.fullmatch(profile)
    return (int(found.group(1)), int(found.group(2))) if found is not None else None


def memory_slice_share(part: HardwareSpec, of: int, gb: int) -> float | None:
    """How many of the part's `of` memory slices `gb` GB is, unrounded (a profile's is a whole number: the load checks
    it), or None where the part's memory size is not published."""
    return None if part.memory_gb is None else gb / part.memory_gb * of


def memory_slices(part: HardwareSpec, of: int, gb: int) -> int | None:
    """The memory slices (of the part's `of`) of a profile of `gb` GB, or None where the part's memory size is not
    published."""
    share = memory_slice_share(part, of, gb)
    return None if share is None else max(1, min(of, round(share)))


def mig_entries(catalog: HardwareCatalog) -> tuple[list[HardwareSpec], dict[str, HardwareUpgrade]]:
    """The entries of every MIG profile in the catalog, and the upgrade of each (to its whole part)."""
    if catalog.mig is None:
        return [], {}
    parts = {hw.id: hw for hw in catalog.hardware}
    entries: list[HardwareSpec] = []
    upgrades: dict[str, HardwareUpgrade] = {}
    for part_id, mig in catalog.mig.parts.items():
        part = parts.get(part_id)
        if part is None:  # a KnowledgeBaseError from check_references names it
            continue
        for profile in mig.profiles:
            shape = profile_shape(profile)
            if shape is None:  # MigPart refuses it when the file loads
                continue
            g, gb = shape
            compute = g / mig.compute_slices
            slices = memory_slices(part, mig.memory_slices, gb)
            bandwidth = (part.memory_bandwidth_gbs * slices / mig.memory_slices
                         if part.memory_bandwidth_gbs is not None and slices is not None else None)
            names = [part.name, *part.aliases]
            suffixes = [profile, f"{profile}+me"] if g == 1 else [profile]
            entry_id = mig_id(part_id, profile)
            entries.append(HardwareSpec(
                id=entry_id,
                name=f"{part.name} MIG {profile}",
                vendor=part.vendor,
                peak_tflops={dtype: None if peak is None else round(peak * compute, 2)
                             for dtype, peak in part.peak_tflops.items()},
                sparse_headline=part.sparse_headline,
                memory_gb=gb,
                memory_type=part.memory_type,
                memory_bandwidth_gbs=None if bandwidth is None else round(bandwidth, 1),
                host_link=part.host_link,
                host_link_gbs=part.host_link_gbs,
                source=f"{catalog.mig.source}; the whole part: {part.source}",
                notes=(f"A MIG slice of {part_id}: {g} of its {mig.compute_slices} compute slices (dense peaks "
                       f"{g}/{mig.compute_slices} of the whole GPU's, an upper bound: in MIG mode a few SMs belong to "
                       f"no slice) and "
                       + (f"{slices} of its {mig.memory_slices} memory slices ({gb} GB; bandwidth "
                          f"{slices}/{mig.memory_slices} of the whole GPU's)" if slices is not None
                          else f"{gb} GB of its memory")
                       + "; no NVLink peer-to-peer between MIG instances."),
                aliases=[f"{name} MIG {suffix}" for name in names for suffix in suffixes],
                mig_of=part_id,
            ))
            upgrades[entry_id] = HardwareUpgrade(to=part_id, why=f"the whole GPU instead of its MIG {profile} slice")
    return entries, upgrades
