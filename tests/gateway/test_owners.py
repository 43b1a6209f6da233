"""The gateway group's assignment and routing without a broker: shares are balanced and sticky, every member learns
the same map, a run is routed to its partition's owner (here, loading, a peer, nobody), and the peer mark is
accepted only as signed for the very request."""

from __future__ import annotations

import itertools

import orjson
import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from worker.client import partition_for
from worker.errors import GatewayError
from worker.gateway.routing import Owners, OwnersAssignor, PeerKey, Where
from worker.gateway.routing.group import balanced


@pytest.mark.parametrize(("partitions", "members"), list(itertools.product([1, 2, 6, 12, 13], [1, 2, 3, 4, 5])))
def test_every_partition_has_one_owner_and_shares_differ_by_at_most_one(partitions: int, members: int) -> None:
    held: dict[str, list[int]] = {f"m{i}": [p for p in range(partitions) if p % (members + 1) == i]
                                  for i in range(members)}  # fmt: skip
    shares = balanced(range(partitions), held)
    owned = sorted(p for parts in shares.values() for p in parts)
    assert owned == list(range(partitions))
    sizes = [len(parts) for parts in shares.values()]
    assert max(sizes) - min(sizes) <= 1


def test_a_member_keeps_what_it_holds_when_one_joins_and_the_leaver_s_share_is_spread() -> None:
    before = balanced(range(12), {"a": [], "b": [], "c": []})
    assert sorted(map(len, before.values())) == [4, 4, 4]
    joined = balanced(range(12), {**before, "d": []})
    for member in "abc":
        assert set(joined[member]) <= set(before[member]), "a member only gives partitions away when one joins"
    assert len(joined["d"]) == 3
    left = balanced(range(12), {"a": joined["a"], "b": joined["b"], "d": joined["d"]})
    for member in "abd":
        assert set(joined[member]) <= set(left[member]), "a member keeps all it held when another leaves"
    assert balanced(range(12), dict(reversed(list(joined.items())))) == joined, "every leader computes the same"


class _Cluster:
    def partitions_for_topic(self, topic: str) -> set[int]:
        assert topic == "out"
        return set(range(6))


def test_every_member_learns_the_whole_map_with_its_own_share() -> None:
    maps: dict[str, dict[int, str]] = {}
    assignors = {name: OwnersAssignor(f"http://{name}", list, lambda urls, name=name: maps.__setitem__(name, urls))
                 for name in ("a", "b")}  # fmt: skip
    members = {name: ConsumerProtocolMemberMetadata(0, ["out"], assignor.metadata(["out"]).user_data)
               for name, assignor in assignors.items()}  # fmt: skip
    assignments = assignors["a"].assign(_Cluster(), members)
    for name, assignment in assignments.items():
        assignors[name].on_assignment(assignment)
        (topic, parts), = assignment.assignment
        assert topic == "out" and all(maps[name][p] == f"http://{name}" for p in parts)
    assert maps["a"] == maps["b"] and sorted(maps["a"]) == list(range(6))
    assert orjson.loads(members["a"].user_data) == {"url": "http://a", "held": []}


def test_a_run_is_routed_to_its_partition_s_owner() -> None:
    owners = Owners("http://me")
    run = "run-1"
    assert owners.route(run).where is Where.NOBODY, "before the topic was described"
    owners.partitions = 4
    mine = partition_for(run.encode(), 4)
    other = (mine + 1) % 4
    gained, lost = owners.assign({other: "http://peer"}, [mine])
    assert gained == {mine} and not lost and not owners.ready
    assert owners.route(run).where is Where.LOADING
    owners.loaded([mine])
    assert owners.ready and owners.route(run).where is Where.HERE
    gained, lost = owners.assign({mine: "http://peer"}, [other])
    assert gained == {other} and lost == {mine}
    assert owners.route(run) == (Where.PEER, mine, "http://peer")
    owners.assign({}, [])
    assert owners.route(run).where is Where.NOBODY and owners.ready, "an empty share is ready"


def test_the_peer_mark_is_accepted_only_as_signed_for_the_request() -> None:
    key = PeerKey(b"k" * 32)
    mark = key.sign("GET", "/runs/r/events?after=3", now=1_000)
    key.check(mark, "GET", "/runs/r/events?after=3", now=1_030)
    for method, target, now in (("POST", "/runs/r/events?after=3", 1_030), ("GET", "/runs/x/events?after=3", 1_030),
                                ("GET", "/runs/r/events?after=3", 1_100)):  # fmt: skip
        with pytest.raises(GatewayError) as refused:
            key.check(mark, method, target, now=now)
        assert refused.value.status == 401 and refused.value.code == "bad-peer"
    with pytest.raises(GatewayError):
        PeerKey(b"o" * 32).check(mark, "GET", "/runs/r/events?after=3", now=1_030)
    for forged in ("²." + mark.partition(".")[2], "٣" * 10 + "." + mark.partition(".")[2], "", "."):
        with pytest.raises(GatewayError) as refused:  # digits int() refuses, or reads as another number
            key.check(forged, "GET", "/runs/r/events?after=3", now=1_030)
        assert refused.value.code == "bad-peer"
    PeerKey(None).check("unsigned", "GET", "/anything")
