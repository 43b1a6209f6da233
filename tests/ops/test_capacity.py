"""The memory limit is read from the process's cgroup (v2, v1, nested or at the root, unlimited), and the worst
case of the settings is compared with it: a warning with the numbers and a `--max-open-streams` that fits."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from worker.app import _check_memory
from worker.ops import capacity
from worker.ops.capacity import (
    BYTES_PER_DISPLAY_PARTITION,
    BYTES_PER_DISPLAY_RUN,
    BYTES_PER_OPEN_RUN,
    BYTES_PER_PARTITION,
    BYTES_PER_PROCESS,
    BYTES_PER_REMEMBERED_RUN,
    WorstCase,
    memory_limit,
)
from worker.settings import Settings

GIB = 1 << 30


def _cgroup(tmp_path: Path, lines: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "sys-fs-cgroup"
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text(lines)
    return root, self_cgroup


@pytest.mark.parametrize(
    ("lines", "files", "limit"),
    [
        ("0::/kubepods/pod1/c1\n", {"kubepods/pod1/c1/memory.max": "1073741824\n"}, GIB),
        ("0::/\n", {"memory.max": "536870912\n"}, GIB // 2),
        ("0::/kubepods/pod1/c1\n", {"memory.max": "2147483648\n"}, 2 * GIB),  # the container's namespace root
        ("0::/\n", {"memory.max": "max\n"}, None),
        ("4:memory:/docker/abc\n0::/\n", {"memory/docker/abc/memory.limit_in_bytes": "805306368\n"}, 768 << 20),
        ("4:memory:/docker/abc\n", {"memory/memory.limit_in_bytes": "9223372036854771712\n"}, None),
        ("0::/\n", {}, None),
    ],
    ids=["v2-nested", "v2-root", "v2-namespaced", "v2-unlimited", "v1-nested", "v1-unlimited", "none"],
)
def test_the_memory_limit_comes_from_the_processes_cgroup(
    tmp_path: Path, lines: str, files: dict[str, str], limit: int | None
) -> None:
    root, self_cgroup = _cgroup(tmp_path, lines, files)
    assert memory_limit(root, self_cgroup) == limit


def test_the_worst_case_is_every_partition_at_its_cap_and_catching_up() -> None:
    worst = WorstCase(partitions=12, max_open_streams=100_000, closed_stream_memory=10_000)
    per_partition = BYTES_PER_PARTITION + 100_000 * BYTES_PER_OPEN_RUN + 10_000 * BYTES_PER_REMEMBERED_RUN
    assert worst.total == BYTES_PER_PROCESS + 12 * per_partition
    shown = WorstCase(12, 100_000, 10_000, display=True)
    assert shown.per_run == BYTES_PER_DISPLAY_RUN
    # The display folds in the worker process: it adds to every open run and to what each partition holds in
    # flight, and no process of its own.
    assert shown.total == BYTES_PER_PROCESS + 12 * (
        BYTES_PER_DISPLAY_PARTITION + 100_000 * BYTES_PER_DISPLAY_RUN + 10_000 * BYTES_PER_REMEMBERED_RUN)


def test_what_a_partition_holds_while_catching_up_counts_once_per_partition() -> None:
    # Measured (bench/sizing.py): the most a worker held while catching up on a backlog in all its partitions, by
    # partition count, display off and on (MiB); the model covers each with no open run left over.
    measured = {(1, False): 215, (4, False): 193, (12, False): 353, (24, False): 450, (48, False): 886,
                (12, True): 496, (48, True): 972}  # fmt: skip
    for (partitions, display), most in measured.items():
        assert WorstCase(partitions, 0, 0, display=display).total >= most << 20, (partitions, display)
    assert WorstCase(48, 0, 0).total - WorstCase(12, 0, 0).total == 36 * BYTES_PER_PARTITION


def test_a_worst_case_beyond_the_limit_is_one_line_with_the_numbers_and_what_fits() -> None:
    worst = WorstCase(partitions=12, max_open_streams=100_000, closed_stream_memory=10_000)
    message = worst.warning(GIB)
    assert message is not None and "\n" not in message
    total = f"{worst.total / (1 << 20):,.0f}"
    assert message.startswith(f"memory limit 1,024 MiB is below this worker's worst case of {total} MiB")
    fits = worst.fitting_open_streams(GIB)
    assert f"Lower --max-open-streams to {fits:,}" in message
    assert WorstCase(12, fits, 10_000).total <= GIB < WorstCase(12, fits + 1, 10_000).total
    assert WorstCase(12, fits, 10_000).warning(GIB) is None


def test_with_the_display_topic_the_warning_prices_the_display_and_what_fits() -> None:
    shown = WorstCase(12, 40_000, 10_000, display=True)
    message = shown.warning(4 * GIB)
    assert message is not None
    assert f"x {BYTES_PER_DISPLAY_RUN / 1024:,.1f} KiB with the display topic" in message
    catching_up = f"+ {BYTES_PER_DISPLAY_PARTITION >> 20:,} MiB while catching up)"
    assert f"{catching_up}, plus {BYTES_PER_PROCESS >> 20:,} MiB for the worker process" in message
    fits = shown.fitting_open_streams(4 * GIB)
    assert f"Lower --max-open-streams to {fits:,}" in message
    assert WorstCase(12, fits, 10_000, display=True).total <= 4 * GIB < WorstCase(12, fits + 1, 10_000, True).total
    assert fits < WorstCase(12, 40_000, 10_000).fitting_open_streams(4 * GIB) // 10


def test_the_worker_warns_at_start_when_its_worst_case_does_not_fit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(capacity, "memory_limit", lambda: GIB)
    with caplog.at_level(logging.WARNING, logger="worker"):
        _check_memory(Settings(), partitions=12)
        _check_memory(Settings(max_open_streams=1_000), partitions=12)
        _check_memory(Settings(), partitions=None)
        _check_memory(Settings(max_open_streams=1_000, display_topic="agui.display"), partitions=12)
    plain, shown = caplog.records
    assert "12 source partitions" in plain.getMessage() and "100,000 open runs" in plain.getMessage()
    assert plain.memory_limit_bytes == GIB  # type: ignore[attr-defined]
    assert "1,000 open runs" in shown.getMessage() and "with the display topic" in shown.getMessage()
    assert shown.worst_case_bytes == WorstCase(12, 1_000, 10_000, display=True).total  # type: ignore[attr-defined]
