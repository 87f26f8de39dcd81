"""The memory a sample may still take: CUDA's free memory, or the host's — the smaller of Linux's ``MemAvailable``
and what the process's cgroup (a container's, a batch job's memory limit) leaves. ``MemAvailable`` is the whole
host's: a container limited to 4 GiB on a 64 GiB host passed the KV-cache check and was OOM-killed. Swap is left
out on purpose: a KV cache paged out to disk makes every decode step wait on it, so "fits only with swap" is refused."""

from __future__ import annotations

from pathlib import Path

import torch

from rlnb.errors import OperationError
from rlnb.wire import OperationErrorCode as Code

MEMINFO = Path("/proc/meminfo")
PROC_CGROUP = Path("/proc/self/cgroup")
"""Which cgroup the process is in, per hierarchy (``0::/path`` for v2, ``N:memory:/path`` for v1)."""
CGROUP = Path("/sys/fs/cgroup")
"""Where the cgroup file system is mounted: v2's files in it, v1's under ``memory/`` (tests point these elsewhere)."""
_FILES = {
    "": (("memory.max", "memory.high"), "memory.current", "inactive_file"),
    "memory": (("memory.limit_in_bytes",), "memory.usage_in_bytes", "total_inactive_file"),
}
"""Per hierarchy (v2, v1): the limits, the usage, and the ``memory.stat`` key of the file cache the kernel reclaims
before it kills (``docker stats`` leaves it out of the usage too). v2's ``memory.high`` kills nothing, but past it
the kernel throttles the cgroup's every allocation into reclaim: a sample that fits only above it crawls."""


def free_memory(device: torch.device) -> int | None:
    """Bytes a sample may still take on ``device``: CUDA's free memory plus what torch's allocator holds unused, or
    the host's (``host_available``); None where it cannot be read (then there is no bound)."""
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return host_available()


def refuse_past_free(need: int, device: torch.device, what: str, how: str, advice: str) -> None:
    """``RESOURCE_EXHAUSTED`` before anything is allocated when ``need`` bytes (of ``what``, counted as ``how`` says)
    would not fit the memory free now (``free_memory``; nothing where it cannot be read): a sample's KV cache and a
    batch's logits alike, which would take what there is and fail once allocated, or get the process killed where
    Linux overcommits memory. ``advice`` says what to send instead."""
    free = free_memory(device) if need else None
    if free is not None and need > free:
        raise OperationError(
            Code.RESOURCE_EXHAUSTED,
            f"{what} would take {need / 2**30:.2f} GiB ({how}), more than the {free / 2**30:.2f} GiB free on "
            f"{device}: {advice}",
        )


def host_available() -> int | None:
    """The smaller of ``MemAvailable`` and ``cgroup_available``, those that can be read; None if neither can."""
    return min((v for v in (meminfo_available(), cgroup_available()) if v is not None), default=None)


def meminfo_available() -> int | None:
    try:
        with open(MEMINFO) as info:
            return next((int(line.split()[1]) * 1024 for line in info if line.startswith("MemAvailable:")), None)
    except (OSError, ValueError, IndexError):
        return None


def cgroup_available() -> int | None:
    """The least any memory limit of the process's cgroup, or of one above it, leaves: limit (the lower of v2's
    ``memory.max`` and ``memory.high``) - usage + reclaimable file cache; None where no limit is set (``max``) or
    none can be read."""
    own = _own_cgroups()
    left = []
    for hierarchy, files in _FILES.items():
        top = CGROUP / hierarchy
        folder = top / own.get(hierarchy, "").lstrip("/")
        while folder.is_relative_to(top):  # in a container, its own cgroup is ``top``: the path named is the host's
            if (room := _left(folder, *files)) is not None:
                left.append(room)
            folder = folder.parent
    return min(left, default=None)


def _own_cgroups() -> dict[str, str]:
    own = {}
    try:
        for line in PROC_CGROUP.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            hierarchy = "memory" if "memory" in controllers.split(",") else controllers  # "" is v2's
            if hierarchy in _FILES:
                own[hierarchy] = path
    except (OSError, ValueError):
        pass
    return own


def _left(folder: Path, limit_files: tuple[str, ...], usage_file: str, cache_key: str) -> int | None:
    limits = [_limit(folder / name) for name in limit_files]
    if (limit := min((v for v in limits if v is not None), default=None)) is None:
        return None
    try:
        left = limit - int((folder / usage_file).read_text())
    except (OSError, ValueError):
        return None
    cache = 0
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == cache_key:
                cache = int(value)
    except (OSError, ValueError):
        pass
    return max(0, left + cache)


def _limit(path: Path) -> int | None:
    """A limit file's bytes; None for ``max`` (no limit) or a file that cannot be read."""
    try:
        text = path.read_text().strip()
        return None if text == "max" else int(text)
    except (OSError, ValueError):
        return None
