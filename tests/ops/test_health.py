"""Liveness and readiness transitions of `Health`, driven by a fake clock."""

from __future__ import annotations

import pytest

from worker.ops.health import Health


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_live_until_the_loop_stops_beating() -> None:
    clock = FakeClock()
    h = Health(liveness_timeout_s=30, clock=clock)
    assert h.live() == (True, "ok")  # construction counts as the first beat
    clock.now += 30
    assert h.live()[0] is True
    clock.now += 0.5
    ok, why = h.live()
    assert not ok and "30.5s" in why
    h.beat()
    assert h.live()[0] is True
    clock.now += 29
    assert h.live()[0] is True


def test_not_ready_until_member() -> None:
    h = Health(clock=FakeClock())
    ok, why = h.ready()
    assert not ok and "member" in why
    h.set_member(True)
    h.set_assigned(True)
    assert h.ready() == (True, "ok, 0 partitions")
    h.set_member(False)
    assert h.ready()[0] is False


def test_a_member_is_ready_only_once_its_assignment_arrived_and_not_while_a_rebalance_runs() -> None:
    h = Health(clock=FakeClock())
    h.set_member(True)
    assert h.ready() == (False, "waiting for the group's assignment (joining or rebalancing)")  # joined, nothing yet
    h.set_partition("src", 0, "ready")
    assert h.ready()[0] is False  # a partition of an earlier assignment does not make the member ready
    h.set_assigned(True)
    assert h.ready() == (True, "ok, 1 partitions")
    h.set_assigned(False)  # a rebalance began: revoked, the next assignment not here yet
    assert h.ready() == (False, "waiting for the group's assignment (joining or rebalancing)")
    h.drop_partition("src", 0)
    h.set_assigned(True)  # an empty assignment after a completed rebalance is ready
    assert h.ready() == (True, "ok, 0 partitions")
    h.set_member(False)
    h.set_member(True)  # a member that left and joined again waits for its new assignment
    assert h.ready()[0] is False


def test_ready_only_when_every_assigned_partition_is_ready() -> None:
    h = Health(clock=FakeClock())
    h.set_member(True)
    h.set_assigned(True)
    h.set_partition("src", 0, "rebuilding")
    h.set_partition("src", 1, "ready")
    ok, why = h.ready()
    assert not ok and "src/0:rebuilding" in why and "src/1" not in why
    h.set_partition("src", 0, "ready")
    assert h.ready() == (True, "ok, 2 partitions")
    h.set_partition("src", 1, "failed")
    ok, why = h.ready()
    assert not ok and "src/1:failed" in why
    h.drop_partition("src", 1)
    assert h.ready() == (True, "ok, 1 partitions")
    h.drop_partition("src", 7)  # unknown partitions are ignored
    assert h.ready()[0] is True


def test_many_waiting_partitions_are_summarised() -> None:
    h = Health(clock=FakeClock())
    h.set_member(True)
    h.set_assigned(True)
    for p in range(12):
        h.set_partition("src", p, "rebuilding")
    ok, why = h.ready()
    assert not ok and why.endswith("and 7 more")


def test_rejects_unknown_state_and_bad_timeout() -> None:
    h = Health(clock=FakeClock())
    with pytest.raises(ValueError, match="'done'"):
        h.set_partition("src", 0, "done")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="liveness_timeout_s"):
        Health(liveness_timeout_s=0)


def test_a_blocked_member_is_not_ready_and_says_why_while_it_stays_live() -> None:
    clock = FakeClock()
    h = Health(liveness_timeout_s=30, clock=clock)
    h.set_member(True)
    h.set_assigned(True)
    h.set_blocked("group member not authorised: READ on Group 'g'")
    assert h.ready() == (False, "group member not authorised: READ on Group 'g'")
    h.beat()
    assert h.live()[0] is True
    h.set_blocked("")
    assert h.ready() == (True, "ok, 0 partitions")
