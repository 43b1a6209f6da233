"""Folding in the helper process: a partition state whose folds went elsewhere, with a real helper folding its work,
publishes the same display records and writes the same changelog bytes as one that folds in process; its folds come
back exactly; a helper that fails or exits fails the partitions it folded for, loudly, and a new one takes over."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stream._support import TOPIC
from tests.stream.test_display import NAMES, interleaved
from worker.display.helper import PUSH_BYTES
from worker.display.offload import FoldLane, FoldOffload
from worker.errors import FoldHelperError
from worker.stream import Destination, PartitionState, SourceRecord

Shown = list[tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]]
TIMEOUT_S = 30.0


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def state(interval_ms: int, max_bytes: int) -> PartitionState:
    return PartitionState(TOPIC, 0, display_interval_ms=interval_ms, display_max_bytes=max_bytes)


def in_process(recs: list[SourceRecord], interval_ms: int, max_bytes: int, checkpoints: set[int]) -> tuple[
        Shown, list[list[tuple[bytes, bytes | None]]], dict[bytes, bytes]]:  # fmt: skip
    st = state(interval_ms, max_bytes)
    shown: Shown = []
    changelogs = []
    for index, rec in enumerate(recs):
        shown += [(r.key, r.value, r.headers) for r in st.process(rec).records if r.destination is Destination.DISPLAY]
        if index in checkpoints:
            changelogs.append(st.checkpoint(rec.offset + 1))
    return shown, changelogs, st.image(recs[-1].offset + 1)


async def through_helper(
    offload: FoldOffload, recs: list[SourceRecord], interval_ms: int, max_bytes: int, checkpoints: set[int],
    go_remote_at: int, pushed: list[int],
) -> tuple[Shown, list[list[tuple[bytes, bytes | None]]], dict[bytes, bytes]]:  # fmt: skip
    """The records, changelogs and image of a state whose folds go to the helper at record `go_remote_at`; every
    seventh record the loop waits a moment and the records the helper pushed back are taken (counted in `pushed`)."""
    st = state(interval_ms, max_bytes)
    lane: FoldLane | None = None
    shown: Shown = []
    changelogs = []
    for index, rec in enumerate(recs):
        if index == go_remote_at:
            lane = offload.lane(0)
            st.fold_elsewhere()
        outcome = st.process(rec)
        shown += [(r.key, r.value, r.headers) for r in outcome.records if r.destination is Destination.DISPLAY]
        if lane is not None:
            lane.send(st.take_display_work())
            if index % 7 == 0:
                await asyncio.sleep(0.03)  # past the lane's write delay, and the helper's push
                taken = lane.take_pushed()
                if taken is not None:
                    shown += [(r.key, r.value, r.headers) for r in taken.records]
                    pushed.append(len(taken.records))
        if index in checkpoints:
            draft = st.checkpoint_draft(rec.offset + 1)
            if lane is None:
                changelogs.append(draft.complete({}))
                continue
            collected = await lane.collect(draft.runs, timeout_s=TIMEOUT_S)
            shown += [(r.key, r.value, r.headers) for r in collected.records]
            changelogs.append(draft.complete(collected.sides))
    assert lane is not None
    collected = await lane.collect([], timeout_s=TIMEOUT_S)
    shown += [(r.key, r.value, r.headers) for r in collected.records]
    st.attach_folds(await lane.reclaim(timeout_s=TIMEOUT_S))
    return shown, changelogs, st.image(recs[-1].offset + 1)


@pytest.mark.parametrize("push_bytes", [PUSH_BYTES, 1], ids=["push-default", "push-each"])
@pytest.mark.parametrize(("interval_ms", "step", "max_bytes"), [(0, 1, 1 << 20), (1000, 170, 6000), (0, 1, 3000)])
def test_folding_in_the_helper_publishes_and_checkpoints_what_folding_in_process_does(
    loop: asyncio.AbstractEventLoop, interval_ms: int, step: int, max_bytes: int, push_bytes: int
) -> None:
    recs = interleaved(NAMES, step=step)
    checkpoints = set(range(3, len(recs), 11)) | {len(recs) - 1}
    expected = in_process(recs, interval_ms, max_bytes, checkpoints)
    assert expected[0] and any(len(c) > 2 for c in expected[1])

    pushed: list[int] = []

    async def main() -> None:
        offload = FoldOffload(push_bytes=push_bytes)
        try:
            for go_remote_at in (0, 9, len(recs) // 2):
                got = await through_helper(offload, recs, interval_ms, max_bytes, checkpoints, go_remote_at, pushed)
                assert got[0] == expected[0], go_remote_at
                assert got[1] == expected[1], go_remote_at
                assert got[2] == expected[2], go_remote_at
        finally:
            await offload.close()

    loop.run_until_complete(main())
    if push_bytes == 1:  # records came back between the commits too, and still in order
        assert sum(pushed) > 0


def test_partitions_sharing_a_helper_each_get_their_own_records_in_order(loop: asyncio.AbstractEventLoop) -> None:
    """Work of two partitions goes to one helper interleaved; each collects at its own points (the helper answers
    one partition's collect before the other's earlier work), and each gets what folding in process gives."""
    recs = interleaved(NAMES, step=1)
    plans = {0: (0, 1 << 20, set(range(5, len(recs), 13))), 1: (1000, 6000, set(range(2, len(recs), 7)))}
    expected = {part: in_process(recs, interval, size, set())[0] for part, (interval, size, _) in plans.items()}

    async def main() -> dict[int, Shown]:
        offload = FoldOffload(push_bytes=4096)
        try:
            states = {part: state(interval, size) for part, (interval, size, _) in plans.items()}
            lanes = {part: offload.lane(part) for part in plans}
            shown: dict[int, Shown] = {part: [] for part in plans}
            for st in states.values():
                st.fold_elsewhere()
            for index, rec in enumerate(recs):
                for part, st in states.items():
                    st.process(rec)
                    lanes[part].send(st.take_display_work())
                    if index in plans[part][2]:
                        collected = await lanes[part].collect([], timeout_s=TIMEOUT_S)
                        shown[part] += [(r.key, r.value, r.headers) for r in collected.records]
            for part, lane in lanes.items():
                collected = await lane.collect([], timeout_s=TIMEOUT_S)
                shown[part] += [(r.key, r.value, r.headers) for r in collected.records]
            return shown
        finally:
            await offload.close()

    assert loop.run_until_complete(main()) == expected


def test_a_state_with_its_folds_taken_back_goes_on_as_if_it_never_lent_them(loop: asyncio.AbstractEventLoop) -> None:
    recs = interleaved(NAMES, step=170)
    cut = len(recs) // 2
    plain = state(1000, 6000)
    for rec in recs[:cut]:
        plain.process(rec)

    async def lend() -> PartitionState:
        offload = FoldOffload()
        try:
            st = state(1000, 6000)
            lane = offload.lane(3)
            st.fold_elsewhere()
            for rec in recs[:cut]:
                st.process(rec)
            lane.send(st.take_display_work())
            assert st.detached_runs()
            st.attach_folds(await lane.reclaim(timeout_s=TIMEOUT_S))
            assert st.detached_runs() == []
            return st
        finally:
            await offload.close()

    back = loop.run_until_complete(lend())
    assert [back.process(r) for r in recs[cut:]] == [plain.process(r) for r in recs[cut:]]


def test_a_helper_that_exits_fails_every_lane_and_the_next_lane_starts_another(
    loop: asyncio.AbstractEventLoop,
) -> None:
    recs = interleaved(NAMES)

    lost: list[str] = []

    async def main() -> None:
        offload = FoldOffload(lost.append)
        try:
            st = state(0, 1 << 20)
            lanes = [offload.lane(0), offload.lane(1)]
            st.fold_elsewhere()
            for rec in recs[:10]:
                st.process(rec)
            lanes[0].send(st.take_display_work())
            assert (await lanes[0].collect([], timeout_s=TIMEOUT_S)).records
            pid = offload.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            for index, lane in enumerate(lanes):
                with pytest.raises(FoldHelperError, match="display fold process is gone") as caught:
                    await lane.collect([], timeout_s=TIMEOUT_S)
                assert caught.value.partition == index
            with pytest.raises(FoldHelperError):
                lanes[1].send(st.take_display_work() or [("x", None, None)])
            assert lost == ["it exited with code -9"]
            fresh = offload.lane(0)
            assert offload.pid not in (None, pid)
            assert (await fresh.collect([], timeout_s=TIMEOUT_S)).records == []
        finally:
            await offload.close()
        assert offload.pid is None

    loop.run_until_complete(main())
    assert len(lost) == 1, "closing a helper is not losing it"


def test_a_fold_that_fails_fails_its_partition_alone(loop: asyncio.AbstractEventLoop) -> None:
    recs = interleaved(NAMES)

    async def main() -> None:
        offload = FoldOffload()
        try:
            good, bad = state(0, 1 << 20), state(0, 1 << 20)
            good_lane, bad_lane = offload.lane(0), offload.lane(1)
            good.fold_elsewhere()
            bad.fold_elsewhere()
            for rec in recs[:10]:
                good.process(rec)
                bad.process(rec)
            good_lane.send(good.take_display_work())
            work = bad.take_display_work()
            bad_lane.send([(key, None, feed) for key, _, feed in work])  # states never shipped
            with pytest.raises(FoldHelperError, match="no fold is held for it") as caught:
                await bad_lane.collect([], timeout_s=TIMEOUT_S)
            assert caught.value.partition == 1
            assert (await good_lane.collect([], timeout_s=TIMEOUT_S)).records
            bad_lane.forget()
            retry = offload.lane(1)
            assert retry.partition == 1
            assert (await retry.collect([], timeout_s=TIMEOUT_S)).records == []
        finally:
            await offload.close()

    loop.run_until_complete(main())


def _process_state(pid: int) -> str | None:
    """The state letter of process `pid` (Z: a zombie), or None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_helper_that_does_not_answer_in_time_is_given_up_and_killed(loop: asyncio.AbstractEventLoop) -> None:
    lost: list[str] = []

    async def main() -> None:
        offload = FoldOffload(lost.append)
        try:
            lane = offload.lane(2)
            assert (await lane.collect([], timeout_s=TIMEOUT_S)).records == []
            pid = offload.pid
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)  # alive, but answers nothing
            with pytest.raises(FoldHelperError, match=r"did not answer within 0\.5 s") as caught:
                await lane.collect([], timeout_s=0.5)
            assert caught.value.partition == 2
            assert offload.pid is None
            assert lost == ["it did not answer within 0.5 s"]
            for _ in range(100):  # killed: gone, or a zombie until reaped
                if _process_state(pid) in {None, "Z", "X"}:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail(f"fold helper {pid} still runs")
        finally:
            await offload.close()

    loop.run_until_complete(main())
