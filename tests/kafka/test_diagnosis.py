"""Fencing is decided from the producer's state, missing ACLs are named, ownership comes from the stable group.

No broker: aiokafka's own TransactionManager and Sender are driven into the states a broker would put them in
(`Sender._fail_all` is what runs when the sender task dies), and DescribeGroups answers are built by hand.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IllegalOperation,
    KafkaError,
    ProducerFenced,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.producer.transaction_manager import TransactionManager

from tests.kafka.support import phase_after
from worker.client import Fault, Names, diagnose, force_close, member_id, observe_producer
from worker.client._diagnosis import Step
from worker.errors import DeadlineError
from worker.live.transaction import Transaction
from worker.recovery.ownership import Ownership, owner_in

NAMES = Names("harness-agui-worker:g:src:0", "g", "src")
TP = TopicPartition("src", 0)


async def _producer() -> AIOKafkaProducer:
    """A transactional producer that never connects; its transaction manager is READY with a producer id."""
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id=NAMES.transactional_id)
    producer._txn_manager.set_pid_and_epoch(1000, 0)
    return producer


def _sender_dies(producer: AIOKafkaProducer, exc: BaseException) -> None:
    """What aiokafka does when the broker refuses the epoch: the sender task ends with the error and its
    done-callback (`_fail_all`) fails the batches and moves the transaction manager to FATAL_ERROR."""
    task: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task.set_exception(exc)
    producer._sender._sender_task = task
    producer._sender._fail_all(task)


async def test_a_fenced_producer_is_diagnosed_from_its_state_whatever_later_calls_raise() -> None:
    producer = await _producer()
    await producer.begin_transaction()
    _sender_dies(producer, ProducerFenced())
    view = observe_producer(producer)
    assert (view.state, view.sender_running, type(view.sender_error)) == ("FATAL_ERROR", False, ProducerFenced)
    # After the sender died, the next calls fail with errors that say nothing about fencing.
    with pytest.raises(AssertionError) as on_begin:
        await producer.begin_transaction()
    with pytest.raises(IllegalOperation) as on_offsets:
        await producer.send_offsets_to_transaction({TP: 1}, "g")
    with pytest.raises(AssertionError) as on_abort:
        await producer.abort_transaction()
    for later in (on_begin.value, on_offsets.value, on_abort.value):
        assert diagnose(observe_producer(producer), later, NAMES).fault is Fault.FENCED
    assert not view.can_abort, "a dead sender sends no abort"
    await producer.stop()


async def test_a_fence_exception_from_a_producer_whose_abort_went_through_is_not_a_fence() -> None:
    """A successful abort proves the broker still accepts our epoch: whatever a delivery raised, not fenced."""
    producer = await _producer()
    await producer.begin_transaction()
    manager = producer._txn_manager
    manager.aborting_transaction()
    manager.complete_transaction()  # the broker answered the abort: READY again
    diagnosis = diagnose(observe_producer(producer), ProducerFenced(), NAMES)
    assert diagnosis.fault is Fault.ERROR
    await producer.stop()


async def test_a_deadline_is_a_deadline_unless_the_producer_turns_out_fenced() -> None:
    producer = await _producer()
    await producer.begin_transaction()
    late = DeadlineError("commit", 5.0, "src[0]")
    assert diagnose(observe_producer(producer), late, NAMES).fault is Fault.DEADLINE
    _sender_dies(producer, ProducerFenced())
    assert diagnose(observe_producer(producer), late, NAMES).fault is Fault.FENCED
    assert diagnose(None, late, NAMES).fault is Fault.DEADLINE
    await producer.stop()


async def test_a_missing_transactional_id_acl_is_unauthorised_not_fenced_and_names_the_grant() -> None:
    producer = await _producer()
    await producer.begin_transaction()
    _sender_dies(producer, TransactionalIdAuthorizationFailed(NAMES.transactional_id))  # on AddPartitionsToTxn
    diagnosis = diagnose(observe_producer(producer), IllegalOperation("not in transaction"), NAMES)
    assert diagnosis.fault is Fault.UNAUTHORISED
    [denied] = diagnosis.denied
    assert denied.label == ("transactional-id", "write-describe")
    assert denied.grant == "WRITE and DESCRIBE on TransactionalId 'harness-agui-worker:g:src:0'"
    assert diagnosis.describe("User:w") == (
        "not authorised: WRITE and DESCRIBE on TransactionalId 'harness-agui-worker:g:src:0' for User:w "
        "(TransactionalIdAuthorizationFailed); grant it as README.md#access-control shows")
    await producer.stop()


async def test_topic_and_group_acls_come_from_the_abortable_transaction_error() -> None:
    producer = await _producer()
    await producer.begin_transaction()
    producer._txn_manager.error_transaction(TopicAuthorizationFailedError({"agui.events", "dlq"}))
    diagnosis = diagnose(observe_producer(producer), KafkaError("commit failed"), NAMES, "transaction")
    assert diagnosis.fault is Fault.UNAUTHORISED
    assert [d.grant for d in diagnosis.denied] == ["WRITE on Topic 'agui.events'", "WRITE on Topic 'dlq'"]
    assert {d.label for d in diagnosis.denied} == {("topic", "write")}
    await producer.stop()


def test_the_step_that_was_refused_decides_the_operation_named() -> None:
    def grants(exc: BaseException, step: Step) -> list[str]:
        return [d.grant for d in diagnose(None, exc, NAMES, step).denied]

    assert grants(TopicAuthorizationFailedError("g.changelog"), "rebuild") == ["READ on Topic 'g.changelog'"]
    assert grants(TopicAuthorizationFailedError("src"), "poll") == ["READ on Topic 'src'"]
    assert grants(GroupAuthorizationFailedError("g"), "poll") == ["READ on Group 'g'"]
    assert grants(GroupAuthorizationFailedError("g"), "rebuild") == ["DESCRIBE on Group 'g'"]
    assert grants(GroupAuthorizationFailedError("g"), "transaction") == ["READ on Group 'g'"]


async def test_the_cause_an_abort_forgets_is_found_in_the_view_taken_before_it() -> None:
    """aiokafka replaces the error that made a transaction abortable when it aborts: the cause is in the first view."""
    producer = await _producer()
    await producer.begin_transaction()
    producer._txn_manager.error_transaction(TopicAuthorizationFailedError({"agui.events"}))
    before = observe_producer(producer)
    producer._txn_manager.aborting_transaction()
    after = observe_producer(producer)
    fault = IllegalOperation("Can't send messages while not in transaction")
    assert diagnose(after, fault, NAMES).fault is Fault.ERROR, "the abort's new waiter holds no cause"
    diagnosis = diagnose([before, after], fault, NAMES)
    assert [d.grant for d in diagnosis.denied] == ["WRITE on Topic 'agui.events'"]
    await producer.stop()


async def test_an_error_wrapped_by_the_client_is_found_through_its_cause() -> None:
    try:
        try:
            raise TransactionalIdAuthorizationFailed("x")
        except KafkaError as inner:
            raise KafkaError("Unexpected error during batch delivery") from inner
    except KafkaError as outer:
        assert diagnose(None, outer, NAMES).fault is Fault.UNAUTHORISED


class _Broker:
    """A producer stand-in over aiokafka's real TransactionManager: `abort_transaction` gets the broker's
    answer `reply` (None accepts the epoch)."""

    def __init__(self, reply: BaseException | None) -> None:
        self._txn_manager = TransactionManager(NAMES.transactional_id, 60_000)
        self._txn_manager.set_pid_and_epoch(1, 0)
        self._txn_manager.begin_transaction()
        self._sender: Any = type("Sender", (), {"sender_task": asyncio.get_running_loop().create_future()})()
        self.reply = reply
        self.aborts = 0

    async def begin_transaction(self) -> None:
        return None  # the transaction manager is in its transaction already

    async def abort_transaction(self) -> None:
        self.aborts += 1
        self._txn_manager.aborting_transaction()
        if self.reply is None:
            self._txn_manager.complete_transaction()
            return
        task = self._sender.sender_task
        task.set_exception(self.reply)
        self._txn_manager.fatal_error(self.reply)
        raise self.reply


async def _ended(broker: _Broker) -> Any:
    """The producer as observed after its partition's transaction was ended the way containment ends it."""
    txn = Transaction(broker, TP, "g", deadline_s=1.0)  # type: ignore[arg-type]
    await txn.begin()
    await txn.abort()
    return observe_producer(broker)


async def test_containment_aborts_first_so_the_brokers_answer_decides() -> None:
    fenced = _Broker(ProducerFenced())
    diagnosis = diagnose(await _ended(fenced), ProducerFenced(), NAMES)
    assert (fenced.aborts, diagnosis.fault) == (1, Fault.FENCED)
    ours = _Broker(None)
    diagnosis = diagnose(await _ended(ours), ProducerFenced(), NAMES)
    assert (ours.aborts, diagnosis.fault) == (1, Fault.ERROR)
    assert observe_producer(ours).state == "READY"
    ours._sender.sender_task.cancel()


async def test_no_abort_is_tried_once_the_sender_is_gone() -> None:
    gone = _Broker(None)
    gone._sender.sender_task.set_exception(ProducerFenced())
    txn = Transaction(gone, TP, "g", deadline_s=1.0)  # type: ignore[arg-type]
    await txn.begin()
    await txn.abort()
    assert gone.aborts == 0 and await phase_after(txn) == "broken"


async def test_force_close_returns_even_when_stop_would_wait_for_ever() -> None:
    class _Stuck:
        def __init__(self) -> None:
            self.client = self
            self.closed = False

        async def stop(self) -> None:
            await asyncio.Event().wait()  # batches that are never delivered

        async def close(self) -> None:
            self.closed = True

    stuck = _Stuck()
    async with asyncio.timeout(2):
        await force_close(stuck, 0.05)
    assert stuck.closed


def test_member_id_of_an_object_without_a_coordinator_is_empty() -> None:
    assert member_id(object()) == ""


def _group(state: str, members: dict[str, list[int]], error_code: int = 0) -> dict[str, Any]:
    return {
        "error_code": error_code, "group": "g", "state": state,
        "members": [
            {"member_id": member, "member_assignment": ConsumerProtocolMemberAssignment(
                0, [("src", partitions)], b"").encode() if partitions else b""}
            for member, partitions in members.items()
        ],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("group", "member", "expected"),
    [
        (_group("Stable", {"me": [0, 1], "other": [2]}), "me", Ownership.OWNER),
        (_group("Stable", {"me": [1], "other": [0]}), "me", Ownership.NOT_OWNER),
        (_group("Stable", {"me": [], "other": [0]}), "me", Ownership.NOT_OWNER),
        (_group("Stable", {"heir": [0, 1, 2]}), "zombie", Ownership.NOT_OWNER),
        (_group("Stable", {"heir": [0, 1, 2]}), "", Ownership.NOT_OWNER),
        (_group("PreparingRebalance", {}), "me", Ownership.UNKNOWN),
        (_group("CompletingRebalance", {}), "me", Ownership.UNKNOWN),
        (_group("Empty", {}), "me", Ownership.NOT_OWNER),
        (_group("", {}, error_code=16), "me", Ownership.UNKNOWN),
    ],
    ids=["owner", "other-owner", "no-partitions", "evicted-zombie", "no-member-id", "preparing", "completing",
         "empty", "coordinator-moved"],
)
def test_ownership_needs_a_stable_group_listing_this_member_with_the_partition(
    group: dict[str, Any], member: str, expected: Ownership
) -> None:
    assert owner_in([group], "g", member, TP) is expected


def test_a_group_acl_error_is_raised_for_the_diagnosis() -> None:
    with pytest.raises(GroupAuthorizationFailedError):
        owner_in([_group("", {}, error_code=30)], "g", "me", TP)
    assert owner_in([], "g", "me", TP) is Ownership.UNKNOWN


async def test_an_error_names_the_first_real_cause_not_the_calls_refused_after_it() -> None:
    producer = await _producer()
    await producer.begin_transaction()
    producer._txn_manager.error_transaction(KafkaError("NotEnoughReplicas: the partition has 1 of 2 in sync"))
    before = observe_producer(producer)
    later = IllegalOperation("Can't send messages while not in transaction")
    diagnosis = diagnose([before], later, NAMES)
    assert diagnosis.fault is Fault.ERROR
    assert "NotEnoughReplicas" in diagnosis.describe() and "IllegalOperation" not in diagnosis.describe()
    try:
        try:
            raise KafkaError("leader not available")
        except KafkaError as inner:
            raise KafkaError("Unexpected error during batch delivery") from inner
    except KafkaError as outer:
        assert diagnose(None, outer, NAMES).describe() == "KafkaError: leader not available"
    await producer.stop()
