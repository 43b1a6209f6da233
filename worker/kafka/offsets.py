"""Where a partition's rebuild starts and ends: committed offset C, replay start R, log bounds."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from worker.stream import decode_replay_metadata

__all__ = ["ReplayWindow", "plan_replay", "read_committed", "tail_window"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReplayWindow:
    """Replay `[start, committed)` publishing nothing, then consume live from `committed`."""

    tp: TopicPartition
    start: int
    committed: int
    # "metadata", "lookback", "none" (no commit yet), "changelog" (the tail after a checkpoint) or "clamped"
    # (history lost to retention)
    source: str
    lost_history: bool

    @property
    def records(self) -> int:
        return self.committed - self.start


async def read_committed(
    admin: AIOKafkaAdminClient, group_id: str, tps: list[TopicPartition]
) -> dict[TopicPartition, Any]:
    """The group's committed offset and metadata of each partition (an entry with offset -1, or none, when the
    group never committed it)."""
    return dict(await admin.list_consumer_group_offsets(group_id, partitions=tps))


async def plan_replay(
    consumer: AIOKafkaConsumer,
    committed: Mapping[TopicPartition, Any],
    tps: list[TopicPartition],
    lookback_ms: int,
) -> dict[TopicPartition, ReplayWindow]:
    """C and R of each partition from its `committed` entry (`read_committed`); R falls back to a bounded
    look-back when metadata is missing."""
    log_start: dict[TopicPartition, int] = await consumer.beginning_offsets(tps)
    need_lookback: list[TopicPartition] = []
    plan: dict[TopicPartition, tuple[int, int, str]] = {}
    for tp in tps:
        entry = committed.get(tp)
        low = log_start[tp]
        if entry is None or entry.offset < 0:
            plan[tp] = (low, low, "none")
            continue
        c = entry.offset
        r = decode_replay_metadata(entry.metadata)
        if r is None or r > c:
            need_lookback.append(tp)
            plan[tp] = (c, c, "lookback")
        else:
            plan[tp] = (r, c, "metadata")
    if need_lookback:
        # Wall clock chooses only where an operator-reset partition starts its look-back, never what is published.
        since = int(time.time() * 1000) - lookback_ms
        found = await consumer.offsets_for_times(dict.fromkeys(need_lookback, since))
        for tp in need_lookback:
            _, c, _ = plan[tp]
            hit = found.get(tp)
            plan[tp] = (min(hit.offset, c) if hit is not None else c, c, "lookback")
    windows: dict[TopicPartition, ReplayWindow] = {}
    for tp, (r, c, source) in plan.items():
        low = log_start[tp]
        lost = r < low
        if lost:
            _log.warning(
                "replay start below log start: history lost to retention",
                extra={"topic": tp.topic, "partition": tp.partition, "offset": r, "log_start": low},
            )
        windows[tp] = ReplayWindow(tp, max(r, low), max(c, low), "clamped" if lost else source, lost)
    return windows


def tail_window(window: ReplayWindow, checkpoint: int, log_start: dict[TopicPartition, int]) -> ReplayWindow:
    """The replay after a changelog checkpoint at `checkpoint` (at most `window.committed`): `[K, C)`, clamped to
    the log start when retention deleted part of it."""
    low = log_start[window.tp]
    lost = checkpoint < low
    if lost:
        _log.warning("changelog checkpoint below log start: history since it lost to retention",
                     extra={"topic": window.tp.topic, "partition": window.tp.partition, "offset": checkpoint,
                            "log_start": low})
    return ReplayWindow(window.tp, max(checkpoint, low), window.committed, "clamped" if lost else "changelog", lost)
