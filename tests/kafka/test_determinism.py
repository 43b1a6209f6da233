"""Recovery is invisible: an adversarial source processed calmly and under chaos gives identical topics.

One group runs a single uninterrupted worker; another group processes the same source while its workers are
killed with SIGKILL, join, leave and restart. Both write a display topic, folded in each worker's own process (no
worker starts a child process), and a thread index topic. The output, display and thread index topics must hold the
same records per key (values and every header; the index's in the same partition, each key once) and the dead-letter
topics the same dead letter per source offset.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kafka.adversarial import adversarial_source
from tests.kafka.support import Rec, WorkerProcess, produce, read_topic, wait_caught_up

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

SEED = 20261201
# Small enough that the open-stream cap is reached and the ended-stream memory forgets, per partition.
LIMITS = ("--max-open-streams", "6", "--closed-stream-memory", "10")
FAST_GROUP = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "1000")


@dataclass(frozen=True)
class Sink:
    output: str
    dlq: str
    group: str
    display: str  # created by the workers
    index: str  # likewise


def outputs_by_key(records: list[Rec]) -> dict[bytes | None, list[tuple[tuple[tuple[str, bytes], ...], bytes | None]]]:
    """Each key's output records in publication order (partition then offset), with every header."""
    grouped: dict[bytes | None, list[tuple[tuple[tuple[str, bytes], ...], bytes | None]]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        grouped[r.key].append((r.headers, r.value))
    return dict(grouped)


def dead_letters_by_origin(records: list[Rec]) -> dict[tuple[str, str], list[Rec]]:
    """Dead letters by the source partition and offset they stand for."""
    grouped: dict[tuple[str, str], list[Rec]] = defaultdict(list)
    for r in records:
        grouped[(r.header("dlq-source-partition"), r.header("dlq-source-offset"))].append(r)
    return dict(grouped)


def _first_difference(calm: dict, chaos: dict) -> str:  # type: ignore[type-arg]
    missing = sorted(set(calm) - set(chaos), key=repr)[:3]
    extra = sorted(set(chaos) - set(calm), key=repr)[:3]
    changed = sorted((k for k in set(calm) & set(chaos) if calm[k] != chaos[k]), key=repr)
    detail = ""
    if changed:
        k = changed[0]
        a, b = calm[k], chaos[k]
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        detail = f"; first changed {k!r} at #{at} of {len(a)} calm / {len(b)} chaos: " \
                 f"calm {a[at] if at < len(a) else None!r:.300} chaos {b[at] if at < len(b) else None!r:.300}"
    return f"{len(missing)}+ missing {missing}, {len(extra)}+ extra {extra}, {len(changed)} changed{detail}"


class Chaos:
    """Workers of one group killed, started, stopped at seeded moments; at most `most` run at once."""

    def __init__(self, make: Callable[[str], WorkerProcess], rng: random.Random, most: int = 3) -> None:
        self._make = make
        self._rng = rng
        self._most = most
        self.workers: list[WorkerProcess] = []
        self.actions: Counter[str] = Counter()

    def live(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.alive]

    def start(self) -> None:
        self.workers.append(self._make(f"chaos{len(self.workers)}").start())
        self.actions["start"] += 1

    def step(self) -> None:
        live = self.live()
        roll = self._rng.random()
        if not live or (roll < 0.25 and len(live) < self._most):
            self.start()
        elif roll < 0.75:
            self._rng.choice(live).kill()
            self.actions["kill -9"] += 1
            if len(live) == 1 or self._rng.random() < 0.6:
                self.start()
        else:
            settled = [w for w in live if w.log_records()]  # its signal handlers are in place
            if len(live) > 1 and settled:
                assert self._rng.choice(settled).stop() == 0, "a graceful leave must exit 0"
                self.actions["leave"] += 1
            else:
                self.start()


def test_chaos_leaves_the_same_topics_as_one_calm_worker(
    kafka_bootstrap: str, topic_factory, unique_names, tmp_path: Path
) -> None:
    trouble = adversarial_source(SEED)
    assert trouble.late_starts and trouble.mis_keyed and trouble.gaps and trouble.poison, trouble
    source = topic_factory("source", partitions=3)
    calm = Sink(topic_factory("calm-out", partitions=3), topic_factory("calm-dlq", partitions=2), f"calm-{source}",
                unique_names("calm-display"), unique_names("calm-index"))
    chaotic = Sink(topic_factory("chaos-out", partitions=3), topic_factory("chaos-dlq", partitions=2),
                   f"chaos-{source}", unique_names("chaos-display"), unique_names("chaos-index"))

    def worker(sink: Sink, name: str) -> WorkerProcess:
        return WorkerProcess(tmp_path, name, kafka_bootstrap, source, sink.output, sink.dlq, sink.group,
                             *LIMITS, *FAST_GROUP, "--display-topic", sink.display,
                             "--thread-index-topic", sink.index)  # fmt: skip

    rng = random.Random(SEED)
    chaos = Chaos(lambda name: worker(chaotic, name), rng)
    calm_worker = worker(calm, "calm").start()

    async def scenario() -> None:
        chaos.start()
        feeder = asyncio.create_task(produce(kafka_bootstrap, source, trouble.records, pace_s=0.004))
        while not feeder.done():
            await asyncio.sleep(rng.uniform(1.0, 2.5))
            chaos.step()
        await feeder
        if not chaos.live():
            chaos.start()
        await asyncio.gather(
            wait_caught_up(kafka_bootstrap, chaotic.group, source, timeout_s=180),
            wait_caught_up(kafka_bootstrap, calm.group, source, timeout_s=180),
        )
        for w in [calm_worker, *chaos.live()]:
            assert not w.children(""), f"{w.log_path.name} started a child process: {w.children('')}"

    try:
        asyncio.run(scenario())
        for w in [calm_worker, *chaos.live()]:
            assert w.stop() == 0, w.log()[-3000:]
        assert chaos.actions["kill -9"] >= 4, chaos.actions
        topics = asyncio.run(_read_all(kafka_bootstrap, calm, chaotic))
        said = [str(r.get("msg", "")) for w in chaos.workers for r in w.log_records()]
    except AssertionError:
        for w in [calm_worker, *chaos.workers]:
            print(f"---- {w.log_path.name}\n{w.log()[-2500:]}")
        raise
    finally:
        for w in [calm_worker, *chaos.workers]:
            if w.alive:
                w.kill()
    calm_out, chaos_out, calm_dlq, chaos_dlq, calm_display, chaos_display, calm_index, chaos_index = topics
    assert calm_out, "the calm worker published nothing"
    a, b = outputs_by_key(calm_out), outputs_by_key(chaos_out)
    assert a == b, f"output topics differ ({chaos.actions}): {_first_difference(a, b)}"
    shown_a, shown_b = outputs_by_key(calm_display), outputs_by_key(chaos_display)
    assert sum(len(v) > 1 for v in shown_a.values()) >= 3, "several runs have several display records"
    assert shown_a == shown_b, f"display topics differ ({chaos.actions}): {_first_difference(shown_a, shown_b)}"
    indexed_a, indexed_b = _index_by_key(calm_index), _index_by_key(chaos_index)
    assert len(indexed_a) > 20 and all(len(v) == 1 for v in indexed_a.values()), "each index key written once"
    assert indexed_a == indexed_b, f"index topics differ ({chaos.actions}): {_first_difference(indexed_a, indexed_b)}"
    c, d = dead_letters_by_origin(calm_dlq), dead_letters_by_origin(chaos_dlq)
    assert all(len(v) == 1 for v in c.values()), "the calm worker dead-lettered a record twice"
    reasons_c = {k: [(r.key, r.value, r.headers) for r in v] for k, v in c.items()}
    reasons_d = {k: [(r.key, r.value, r.headers) for r in v] for k, v in d.items()}
    assert reasons_c == reasons_d, \
        f"dead-letter topics differ ({chaos.actions}): {_first_difference(reasons_c, reasons_d)}"
    seen = Counter(r.header("dlq-reason") for r in calm_dlq)
    assert {"duplicate", "gap", "mis-keyed", "decode-error", "open-stream-cap"} <= set(seen), seen
    assert any(m.startswith("partition rebuilt: restored") for m in said), "no rebuild restored a checkpoint"


async def _read_all(bootstrap: str, calm: Sink, chaos: Sink) -> tuple[list[Rec], ...]:
    return tuple(await asyncio.gather(
        read_topic(bootstrap, calm.output), read_topic(bootstrap, chaos.output),
        read_topic(bootstrap, calm.dlq), read_topic(bootstrap, chaos.dlq),
        read_topic(bootstrap, calm.display), read_topic(bootstrap, chaos.display),
        read_topic(bootstrap, calm.index), read_topic(bootstrap, chaos.index),
    ))  # fmt: skip


_Indexed = tuple[int, tuple[tuple[str, bytes], ...], bytes | None]


def _index_by_key(records: list[Rec]) -> dict[bytes | None, list[_Indexed]]:
    """Each key's thread index records with their partition."""
    grouped: dict[bytes | None, list[_Indexed]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r.partition, r.offset)):
        grouped[r.key].append((r.partition, r.headers, r.value))
    return dict(grouped)
