"""Whether the worst case of a worker's settings fits the memory limit it runs under: every partition of the source
topic owned by this one worker, each holding `max_open_streams` open runs and `closed_stream_memory` ended ones,
priced with the per-run and per-partition figures `bench/sizing.py` measures (docs/sizing.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["BYTES_PER_DISPLAY_RUN", "BYTES_PER_FOLD_HELPER", "BYTES_PER_OPEN_RUN", "BYTES_PER_PARTITION",
           "BYTES_PER_PROCESS", "BYTES_PER_REMEMBERED_RUN", "WorstCase", "memory_limit"]  # fmt: skip

# Measured by bench/sizing.py (docs/sizing.md), rounded up.
BYTES_PER_OPEN_RUN: Final = 1_600  # a run's observer state and tables, display off (1.5 KiB measured)
BYTES_PER_DISPLAY_RUN: Final = 52_000  # the same with the display fold, in the worker or its fold helper (50.7 KiB)
BYTES_PER_REMEMBERED_RUN: Final = 250  # an ended run kept to recognise late duplicates (0.2 KiB)
# A partition: 0.1 MiB idle (measured), plus what it may hold under load: a fetch (aiokafka's
# max_partition_fetch_bytes, 1 MiB) and a producer batch (256 KiB).
BYTES_PER_PARTITION: Final = 2 * 1024 * 1024
BYTES_PER_PROCESS: Final = 64 * 1024 * 1024  # the worker process, idle (51 MiB measured)
BYTES_PER_FOLD_HELPER: Final = 40 * 1024 * 1024  # the display fold helper process, idle (36 MiB measured)

_UNLIMITED: Final = 1 << 60  # cgroup v1 reports "no limit" as a page-rounded maximum of 64-bit size
_MIB: Final = 1024 * 1024


def memory_limit(
    cgroup_root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup")
) -> int | None:
    """The memory limit of this process's cgroup in bytes (cgroup v2 `memory.max`, else v1
    `memory.limit_in_bytes`); None when there is none or it cannot be read."""
    paths: list[Path] = []
    try:
        for line in self_cgroup.read_text().splitlines():
            hierarchy, controllers, group = line.split(":", 2)
            if hierarchy == "0" and controllers == "":
                paths.append(cgroup_root / group.lstrip("/") / "memory.max")
            elif "memory" in controllers.split(","):
                paths.append(cgroup_root / "memory" / group.lstrip("/") / "memory.limit_in_bytes")
    except (OSError, ValueError):
        pass
    # Inside a container the cgroup is usually mounted as the root of the hierarchy itself.
    paths += [cgroup_root / "memory.max", cgroup_root / "memory" / "memory.limit_in_bytes"]
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return None if value >= _UNLIMITED else value
    return None


@dataclass(frozen=True, slots=True)
class WorstCase:
    """The memory a worker needs when it owns `partitions` partitions, each at its open-run cap."""

    partitions: int
    max_open_streams: int
    closed_stream_memory: int
    display: bool = False

    @property
    def per_run(self) -> int:
        return BYTES_PER_DISPLAY_RUN if self.display else BYTES_PER_OPEN_RUN

    @property
    def per_partition(self) -> int:
        """A partition at its cap: fixed cost, open runs and remembered ended runs."""
        return (BYTES_PER_PARTITION + self.max_open_streams * self.per_run
                + self.closed_stream_memory * BYTES_PER_REMEMBERED_RUN)  # fmt: skip

    @property
    def processes(self) -> int:
        """The worker process, and its display fold helper with the display topic on."""
        return BYTES_PER_PROCESS + (BYTES_PER_FOLD_HELPER if self.display else 0)

    @property
    def total(self) -> int:
        return self.processes + self.partitions * self.per_partition

    def fitting_open_streams(self, limit: int) -> int:
        """The largest `max_open_streams` whose worst case fits `limit` (0 when none does)."""
        spare = limit - self.processes - self.partitions * (
            BYTES_PER_PARTITION + self.closed_stream_memory * BYTES_PER_REMEMBERED_RUN)
        return max(0, spare // (self.partitions * self.per_run))

    def warning(self, limit: int) -> str | None:
        """None when the worst case fits `limit`; else one line with the numbers and what to change."""
        if self.total <= limit:
            return None
        fits = self.fitting_open_streams(limit)
        display = " with the display topic" if self.display else ""
        return (
            f"memory limit {limit / _MIB:,.0f} MiB is below this worker's worst case of {self.total / _MIB:,.0f} MiB: "
            f"{self.partitions} source partitions (all of them, should the other workers be gone) x "
            f"{self.max_open_streams:,} open runs x {self.per_run / 1024:,.1f} KiB{display}, plus "
            f"{self.processes / _MIB:,.0f} MiB for the process{'es' if self.display else ''}. Lower "
            f"--max-open-streams to {fits:,} or raise the memory limit (docs/sizing.md)"
        )
