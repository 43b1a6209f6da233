"""What a partition's failure means, decided from the producer's state and never from the exception class alone.

Once aiokafka's sender has died of a fence, later calls raise `IllegalOperation` or `AssertionError`; a fence that
a produce response reported leaves the producer in a transaction until the abort's reply. So the partition's task
first ends the transaction (`Transaction.abort`, when an abort can still reach the broker) and observes the
producer afterwards: it is fenced only when its sender stopped on a newer epoch. A successful abort proves the
epoch is still ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidProducerEpoch,
    ProducerFenced,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from worker.errors import DeadlineError
from worker.kafka._aiokafka import ProducerView

__all__ = ["Diagnosis", "Fault", "Names", "diagnose"]

_FENCES = (ProducerFenced, InvalidProducerEpoch)


class Fault(Enum):
    """Why a partition failed; the label of `harness_agui_transaction_failures_total`."""

    FENCED = "fenced"  # the broker holds a newer epoch of our transactional id
    UNAUTHORISED = "unauthorised"  # an ACL is missing
    DEADLINE = "deadline"  # a broker call did not finish in time
    ERROR = "error"  # anything else: abort and rebuild from the committed offset


@dataclass(frozen=True, slots=True)
class Names:
    """The names an ACL is granted on, for the message that says which one is missing."""

    transactional_id: str
    group_id: str
    source_topic: str


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A fault, the error that decided it, and for UNAUTHORISED the resource kind and the ACL to grant."""

    fault: Fault
    cause: BaseException
    resource: str = ""  # transactional-id, topic, group or cluster
    acl: str = ""

    def describe(self) -> str:
        """One line for the log."""
        if self.fault is Fault.UNAUTHORISED:
            return f"not authorised: grant {self.acl} ({type(self.cause).__name__})"
        if self.fault is Fault.FENCED:
            return "producer fenced: the broker holds a newer epoch of this partition's transactional id"
        return f"{type(self.cause).__name__}: {self.cause}"


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def _topics(exc: BaseException) -> list[str]:
    arg: Any = exc.args[0] if exc.args else None
    if isinstance(arg, str):
        return [arg]
    if isinstance(arg, set | frozenset | list | tuple):
        return sorted(str(t) for t in arg)
    return []


def _unauthorised(exc: BaseException, names: Names) -> Diagnosis | None:
    if isinstance(exc, TransactionalIdAuthorizationFailed):
        return Diagnosis(Fault.UNAUTHORISED, exc, "transactional-id",
                         f"WRITE and DESCRIBE on TransactionalId '{names.transactional_id}'")
    if isinstance(exc, TopicAuthorizationFailedError):
        topics = _topics(exc)
        grants = [f"{'READ' if t == names.source_topic else 'WRITE'} on Topic '{t}'" for t in topics]
        return Diagnosis(Fault.UNAUTHORISED, exc, "topic",
                         ", ".join(grants) or "WRITE on the output and dead-letter topics, READ on the source topic")
    if isinstance(exc, GroupAuthorizationFailedError):
        return Diagnosis(Fault.UNAUTHORISED, exc, "group", f"READ on Group '{names.group_id}'")
    if isinstance(exc, ClusterAuthorizationFailedError):
        return Diagnosis(Fault.UNAUTHORISED, exc, "cluster", "IDEMPOTENT_WRITE on Cluster")
    return None


def diagnose(view: ProducerView | None, exc: BaseException, names: Names) -> Diagnosis:
    """Classify a failure: a missing ACL anywhere in the errors seen; fenced only when the producer's sender
    stopped on a newer epoch (its state FATAL_ERROR); a deadline; else an error."""
    producer_errors = [] if view is None else [*_chain(view.sender_error), *_chain(view.transaction_error)]
    for err in [*_chain(exc), *producer_errors]:
        found = _unauthorised(err, names)
        if found is not None:
            return found
    if view is not None and view.state == "FATAL_ERROR":
        fence = next((err for err in producer_errors if isinstance(err, _FENCES)), None)
        if fence is not None:
            return Diagnosis(Fault.FENCED, fence)
    deadline = next((err for err in _chain(exc) if isinstance(err, DeadlineError)), None)
    if deadline is not None:
        return Diagnosis(Fault.DEADLINE, deadline)
    return Diagnosis(Fault.ERROR, exc)
