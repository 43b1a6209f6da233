"""Whether the worst case of a worker's settings fits the memory limit it runs under: every partition of the source
topic owned by this one worker, each holding `max_open_streams` open runs and `closed_stream_memory` ended ones,
priced with the per-run and per-partition figures `bench/sizing.py` measures (docs/sizing.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["BYTES_PER_DISPLAY_PARTITION", "BYTES_PER_DISPLAY_RUN", "BYTES_PER_OPEN_RUN", "BYTES_PER_PARTITION",
           "BYTES_PER_PROCESS", "BYTES_PER_REMEMBERED_RUN", "WorstCase", "memory_limit"]  # fmt: skip

# Measured by bench/sizing.py (docs/sizing.md), rounded up. A run's figure counts what its state holds and what a
# checkpoint allocates beside it while writing the run's changelog record.
BYTES_PER_OPEN_RUN: Final = 2_200  # observer state and tables, display off (1.5 KiB kept + 0.6 KiB checkpoint)
BYTES_PER_DISPLAY_RUN: Final = 86_000  # the same with its display projection (50.3 KiB kept + 30.9 KiB checkpoint)
BYTES_PER_REMEMBERED_RUN: Final = 300  # an ended run kept to recognise late duplicates (0.2 to 0.3 KiB)
# A partition catching up on a backlog: its fetched records, those waiting for their transaction and their output,
# its producer's batches, as the allocator keeps them (0.1 MiB idle): each partition beyond 12 added 17 MiB with
# the display topic off and 21 MiB with it on, up to 48 partitions catching up at once.
BYTES_PER_PARTITION: Final = 20 * 1024 * 1024
BYTES_PER_DISPLAY_PARTITION: Final = 24 * 1024 * 1024
# The worker process beside its partitions: 51 to 102 MiB ready with 1 to 48 idle partitions, and up to 215 MiB
# with one partition catching up alone (what the allocator keeps of a fast partition's records in flight).
BYTES_PER_PROCESS: Final = 224 * 1024 * 1024

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
    def under_load(self) -> int:
        """What one partition catching up holds, whatever runs it has open."""
        return BYTES_PER_DISPLAY_PARTITION if self.display else BYTES_PER_PARTITION

    @property
    def beside_runs(self) -> int:
        """What one partition catching up holds besides its open runs: its records in flight and remembered runs."""
        return self.under_load + self.closed_stream_memory * BYTES_PER_REMEMBERED_RUN

    @property
    def per_partition(self) -> int:
        """A partition at its cap while catching up: what it holds in flight, open runs and remembered ended runs."""
        return self.beside_runs + self.max_open_streams * self.per_run

    @property
    def total(self) -> int:
        return BYTES_PER_PROCESS + self.partitions * self.per_partition

    def fitting_open_streams(self, limit: int) -> int:
        """The largest `max_open_streams` whose worst case fits `limit` (0 when none does)."""
        spare = limit - BYTES_PER_PROCESS - self.partitions * self.beside_runs
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
            f"({self.max_open_streams:,} open runs x {self.per_run / 1024:,.1f} KiB{display} + "
            f"{self.under_load / _MIB:,.0f} MiB while catching up), plus {BYTES_PER_PROCESS / _MIB:,.0f} MiB for the "
            f"worker process. Lower --max-open-streams to {fits:,} or raise the memory limit (docs/sizing.md)"
        )
