"""What a partition's failure means, decided from the producer's state and never from the exception class alone.

Once aiokafka's sender has died of a fence, later calls raise `IllegalOperation` or `AssertionError`; a fence that
a produce response reported leaves the producer in a transaction until the abort's reply. So the partition's task
first ends the transaction (`Transaction.abort`, when an abort can still reach the broker) and observes the
producer afterwards: it is fenced only when its sender stopped on a newer epoch. A successful abort proves the
epoch is still ours.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    IllegalOperation,
    InvalidProducerEpoch,
    ProducerFenced,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from worker.client._aiokafka import ProducerView
from worker.errors import AuthorizationError, DeadlineError

__all__ = [
    "ACCESS_CONTROL_HELP", "Denied", "Diagnosis", "Fault", "Names", "Step", "authorization_error", "denied_rights",
    "diagnose",
]

_FENCES = (ProducerFenced, InvalidProducerEpoch)


class Fault(Enum):
    """Why a partition failed; the label of `harness_agui_transaction_failures_total`."""

    FENCED = "fenced"  # the broker holds a newer epoch of our transactional id
    UNAUTHORISED = "unauthorised"  # an ACL is missing
    DEADLINE = "deadline"  # a broker call did not finish in time
    ERROR = "error"  # anything else: abort and rebuild from the committed offset


ACCESS_CONTROL_HELP = "README.md#access-control"
"""Where an operator finds the grants that fix a refusal (named in every refusal's log line)."""

Step = Literal["poll", "rebuild", "transaction"]
"""What the worker was doing when the broker refused: which requests it sent decides the operation refused."""

# The operation each step's requests need on a resource type (Kafka's ACL operations): the group consumer joins
# and fetches (READ on its group and the source topic); a rebuild reads offsets, the group's assignment, the source
# and the changelog (DESCRIBE on the group, READ on the topics); a transaction writes records and commits offsets
# in the group (WRITE on topics, READ on the group). Starting a producer needs WRITE and DESCRIBE on its
# transactional id at any step.
_OPERATIONS: dict[Step, dict[str, tuple[str, ...]]] = {
    "poll": {"Topic": ("READ",), "Group": ("READ",)},
    "rebuild": {"Topic": ("READ",), "Group": ("DESCRIBE",)},
    "transaction": {"Topic": ("WRITE",), "Group": ("READ",)},
}


@dataclass(frozen=True, slots=True)
class Names:
    """The names an ACL is granted on, for the message that says which one is missing; `principal` is the
    worker's own (`User:<name>`), empty when the client cannot tell."""

    transactional_id: str
    group_id: str
    source_topic: str
    principal: str = ""


@dataclass(frozen=True, slots=True)
class Denied:
    """One missing right: `operations` on the resource of `resource_type` named `name` (Kafka's ACL terms)."""

    resource_type: str  # Topic, Group, TransactionalId or Cluster
    name: str
    operations: tuple[str, ...]

    @property
    def grant(self) -> str:
        """The right as an operator reads it: `WRITE on Topic 'agui.events'`."""
        where = self.resource_type if not self.name else f"{self.resource_type} '{self.name}'"
        return f"{' and '.join(self.operations)} on {where}"

    @property
    def label(self) -> tuple[str, str]:
        """The labels of `harness_agui_authorization_failures_total`: resource type and operation, lower case."""
        kind = {"TransactionalId": "transactional-id"}.get(self.resource_type, self.resource_type.lower())
        return kind, "-".join(self.operations).lower().replace("_", "-")


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """A fault, the error that decided it, and for UNAUTHORISED the rights the broker refused."""

    fault: Fault
    cause: BaseException
    denied: tuple[Denied, ...] = field(default=())

    def describe(self, principal: str = "") -> str:
        """One line for the log: what was refused, to whom, and where the fix is written."""
        if self.fault is Fault.UNAUTHORISED:
            who = f" for {principal}" if principal else ""
            rights = ", ".join(d.grant for d in self.denied)
            return (f"not authorised: {rights}{who} ({type(self.cause).__name__}); grant it as "
                    f"{ACCESS_CONTROL_HELP} shows")
        if self.fault is Fault.FENCED:
            return "producer fenced: the broker holds a newer epoch of this partition's transactional id"
        text, kind = str(self.cause), type(self.cause).__name__
        return text if text.startswith(kind) else f"{kind}: {text}"  # aiokafka's errors name their class already


def authorization_error(denied: tuple[Denied, ...], principal: str, what: str) -> AuthorizationError:
    """The error for rights the broker refused while the worker did `what`, named as every refusal is."""
    who = f" for {principal}" if principal else ""
    rights = ", ".join(d.grant for d in denied)
    return AuthorizationError(f"not authorised to {what}: {rights}{who}; grant it as {ACCESS_CONTROL_HELP} shows",
                              tuple(d.label for d in denied))


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def _names(exc: BaseException) -> list[str]:
    """The resource names an aiokafka authorization error carries (a name, or a set of topic names)."""
    arg: Any = exc.args[0] if exc.args else None
    if isinstance(arg, str):
        return [arg]
    if isinstance(arg, set | frozenset | list | tuple):
        return sorted(str(t) for t in arg)
    return []


def denied_rights(exc: BaseException, names: Names, step: Step) -> tuple[Denied, ...]:
    """The rights an authorization error refused at `step`; empty for any other error."""
    if isinstance(exc, TransactionalIdAuthorizationFailed):
        return (Denied("TransactionalId", names.transactional_id, ("WRITE", "DESCRIBE")),)
    if isinstance(exc, TopicAuthorizationFailedError):
        operations = _OPERATIONS[step]["Topic"]
        topics = _names(exc) or [names.source_topic]
        return tuple(Denied("Topic", topic, operations) for topic in topics)
    if isinstance(exc, GroupAuthorizationFailedError):
        return (Denied("Group", names.group_id, _OPERATIONS[step]["Group"]),)
    if isinstance(exc, ClusterAuthorizationFailedError):
        return (Denied("Cluster", "", ("IDEMPOTENT_WRITE",)),)
    return ()


def diagnose(
    views: list[ProducerView] | ProducerView | None, exc: BaseException, names: Names, step: Step = "transaction"
) -> Diagnosis:
    """Classify a failure at `step`: a missing ACL anywhere in the errors seen (the exception's chain, then the
    producer's, observed before and after its transaction was aborted: an abort forgets the error that made the
    transaction abortable); fenced only when the producer's sender stopped on a newer epoch (its state
    FATAL_ERROR); a deadline; else an error, its cause the first of those errors that says what went wrong."""
    seen = [] if views is None else [views] if isinstance(views, ProducerView) else list(views)
    producer_errors = [err for view in seen for cause in (view.sender_error, view.transaction_error)
                       for err in _chain(cause)]  # fmt: skip
    for err in [*_chain(exc), *producer_errors]:
        denied = denied_rights(err, names, step)
        if denied:
            return Diagnosis(Fault.UNAUTHORISED, err, denied)
    if seen and seen[-1].state == "FATAL_ERROR":
        fence = next((err for err in producer_errors if isinstance(err, _FENCES)), None)
        if fence is not None:
            return Diagnosis(Fault.FENCED, fence)
    deadline = next((err for err in _chain(exc) if isinstance(err, DeadlineError)), None)
    if deadline is not None:
        return Diagnosis(Fault.DEADLINE, deadline)
    real = next((err for err in [*_chain(exc), *producer_errors] if not _says_nothing(err)), exc)
    return Diagnosis(Fault.ERROR, real)


def _says_nothing(exc: BaseException) -> bool:
    """An error aiokafka raises after the real one: a call refused because the transaction already failed, or a
    wrapper whose cause holds the reason."""
    if isinstance(exc, IllegalOperation | AssertionError):
        return True
    return "Unexpected error during batch delivery" in str(exc) and exc.__cause__ is not None
