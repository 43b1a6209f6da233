"""An adversarial source: the golden runs interleaved a few at a time, with every kind of trouble a source holds.

Late duplicates of ended streams (sequence 0 included), records of one run under another open run's key,
sequence gaps, undecodable values; the interleaving keeps a varying handful of runs open at once, so a small
`--max-open-streams` is reached and a small `--closed-stream-memory` forgets. Seeded: the same seed, the same
records.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.kafka.support import read_lines, rekey, source_files

__all__ = ["Trouble", "adversarial_source"]

_POISON = (b"{not json", b"[1, 2, 3]", b'{"thread_id": "t", "run_id": 7}', b"")


@dataclass
class Trouble:
    """What the generator put in, by kind, so a test can check the source holds what it claims."""

    late_duplicates: int = 0
    late_starts: int = 0  # late duplicates of a run's sequence 0
    mis_keyed: int = 0
    gaps: int = 0
    poison: int = 0
    runs: int = 0
    records: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass
class _Run:
    key: bytes
    lines: list[bytes]
    at: int = 0


def adversarial_source(seed: int, *, open_runs: tuple[int, int] = (4, 12), trouble_rate: float = 0.03) -> Trouble:
    """Every golden run once (re-keyed with the seed), interleaved with `open_runs` runs open at a time."""
    rng = random.Random(seed)
    pending: list[_Run] = []
    gaps = 0
    for path in source_files():
        key, lines = rekey(read_lines(path), f"adv{seed}")
        if rng.random() < 0.08 and len(lines) > 4:
            del lines[rng.randrange(2, len(lines) - 1)]  # a gap: one middle item never produced
            gaps += 1
        pending.append(_Run(key.encode(), lines))
    rng.shuffle(pending)
    out = Trouble(runs=len(pending), gaps=gaps)
    active: list[_Run] = []
    ended: list[_Run] = []
    records = out.records
    while pending or active:
        target = rng.randint(*open_runs)
        while len(active) < target and pending:
            active.append(pending.pop())
        run = rng.choice(active)
        records.append((run.key, run.lines[run.at]))
        run.at += 1
        if run.at == len(run.lines):
            active.remove(run)
            ended.append(run)
        if rng.random() >= trouble_rate:
            continue
        kind = rng.randrange(3)
        if kind == 0 and ended:
            late = rng.choice(ended[-12:] if rng.random() < 0.8 else ended)  # mostly still remembered
            index = 0 if rng.random() < 0.5 else rng.randrange(len(late.lines))
            records.append((late.key, late.lines[index]))
            out.late_duplicates += 1
            out.late_starts += index == 0
        elif kind == 1 and active and (len(active) > 1 or ended):
            host = rng.choice(active)
            donors = [r for r in [*active, *ended[-20:]] if r is not host]
            donor = rng.choice(donors)
            index = 0 if rng.random() < 0.5 else min(2, len(donor.lines) - 1)
            records.append((host.key, donor.lines[index]))
            out.mis_keyed += 1
        elif kind == 2 and active:
            records.append((rng.choice(active).key, rng.choice(_POISON)))
            out.poison += 1
    return out
