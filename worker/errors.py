"""The worker's one error tree; every error names what was wrong and with what.

    WorkerError
    ├── DecodeError             a source record is not a valid Harness wire item   (also ValueError)
    ├── AguiObservationError    an observer refused an item or a call               (also ValueError)
    ├── ConfigError             a setting is missing or inconsistent                 (also ValueError)
    ├── GapError                a run's source history has a hole (halt policy)
    ├── DisplayGapError         a display reader was handed a run's AG-UI events with one missing
    ├── ShardedReplayError      a replay split across processes cannot stand in for the in-process one
    ├── CheckpointError         a changelog partition is unreadable or inconsistent: rebuild by replay instead
    ├── CheckpointVersionError  a changelog partition was written in a format this release does not read
    ├── GatewayError            the gateway cannot serve an HTTP request as asked (status and code for the answer)
    ├── NativePanicError        the native module panicked, caught at its boundary (the record it served goes)
    └── KafkaWorkerError        the broker or client failed in a way the worker cannot absorb
        ├── AuthorizationError  the broker refused a right the worker needs: retried until it is granted
        ├── RebuildError        a partition could not be rebuilt from its source history
        ├── FencedError         another worker now owns a partition's transactional id
        ├── DeadlineError       a broker call of one partition did not finish within its deadline
        ├── StalledReadError    a read up to a partition's end offset stopped moving
        └── TokenError          the OIDC token endpoint refused or did not answer        (also ConnectionError)
"""

from __future__ import annotations

__all__ = [
    "AguiObservationError",
    "AuthorizationError",
    "CheckpointError",
    "CheckpointVersionError",
    "ConfigError",
    "DeadlineError",
    "DecodeError",
    "DisplayGapError",
    "FencedError",
    "GapError",
    "GatewayError",
    "KafkaWorkerError",
    "NativePanicError",
    "RebuildError",
    "ShardedReplayError",
    "StalledReadError",
    "TokenError",
    "WorkerError",
]


class WorkerError(Exception):
    """Base of every error the worker raises on purpose."""


class DecodeError(WorkerError, ValueError):
    """A record value is not a Harness wire item; `path` names the offending field (`$` is the root)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class AguiObservationError(WorkerError, ValueError):
    """An observer refused an item or a call; its state is unchanged."""


class ConfigError(WorkerError, ValueError):
    """A setting is missing, malformed or inconsistent with another."""


class NativePanicError(WorkerError):
    """The native module panicked (a bug of ours), caught at its boundary: the call it served is abandoned, and the
    record it served is dead-lettered with this message."""


class GapError(WorkerError):
    """A run's source history has a hole and the gap policy says to halt the partition."""


class DisplayGapError(WorkerError):
    """A display reader got a run's AG-UI event past the one it continues with; `expected` and `got` are agui-seq."""

    def __init__(self, run_id: str, expected: int, got: int) -> None:
        self.run_id = run_id
        self.expected = expected
        self.got = got
        super().__init__(
            f"display of run {run_id} continues at agui-seq {expected} but got {got}: read the output topic "
            f"from an earlier offset (the events {expected}..{got - 1} are missing)"
        )


class ShardedReplayError(WorkerError):
    """A replay split by key across processes cannot stand in for the in-process one; replay in-process."""


class CheckpointError(WorkerError):
    """A changelog partition cannot be restored; `key` names the record at fault and `reason` says why in a word:
    `none` (no checkpoint), `ahead` (beyond the committed offset), `unreadable` (unreadable or inconsistent), or
    `display-off` for a run written without the display state the worker now keeps."""

    def __init__(
        self, message: str, *, topic: str, partition: int, key: bytes | None = None, reason: str = "unreadable"
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.key = key
        self.reason = reason
        where = f"changelog of {topic}[{partition}]"
        super().__init__(f"{where}, record {key!r}: {message}" if key is not None else f"{where}: {message}")


class CheckpointVersionError(WorkerError):
    """A changelog partition was written in checkpoint format `version`, which this release cannot read."""

    def __init__(self, message: str, *, topic: str, partition: int, version: object) -> None:
        self.topic = topic
        self.partition = partition
        self.version = version
        super().__init__(f"changelog of {topic}[{partition}]: {message}")


class GatewayError(WorkerError):
    """The gateway cannot serve a request as asked: `status` is the HTTP status of the answer, `code` a word
    naming the cause (`unknown-run`, `bad-cursor`, `bad-token`, ...), the message says what to fix."""

    def __init__(self, status: int, code: str, message: str) -> None:
        self.status = status
        self.code = code
        super().__init__(message)


class KafkaWorkerError(WorkerError):
    """The broker or the client failed in a way the worker cannot absorb by retrying."""


class AuthorizationError(KafkaWorkerError):
    """The broker refused a right the worker needs; the message names each one (`CREATE on Topic 'x'`) and the
    principal, `labels` holds each right's (resource type, operation) for the metrics. Retried until granted."""

    def __init__(self, message: str, labels: tuple[tuple[str, str], ...]) -> None:
        self.labels = labels
        super().__init__(message)


class RebuildError(KafkaWorkerError):
    """A partition could not be rebuilt by replaying its source history."""


class FencedError(KafkaWorkerError):
    """A newer producer with the same transactional id exists: the partition belongs to someone else."""


class DeadlineError(KafkaWorkerError):
    """A broker call (`call`: begin, send, commit, abort, producer-start, ...) of one partition did not finish within
    `seconds`; the partition alone is failed and isolated."""

    def __init__(self, call: str, seconds: float, where: str) -> None:
        self.call = call
        self.seconds = seconds
        self.where = where
        super().__init__(f"{where}: {call} did not finish within {seconds:g} s")


class StalledReadError(KafkaWorkerError):
    """A read up to end offsets made no progress for `seconds`: the position of `topic`[`partition`] (one of
    `partitions` still being read) stayed at `position`, below `end`."""

    def __init__(
        self, topic: str, partition: int, *, position: int, end: int, seconds: float, partitions: int = 1
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.position = position
        self.end = end
        self.seconds = seconds
        more = f" (and {partitions - 1} more partitions)" if partitions > 1 else ""
        super().__init__(f"reading {topic}[{partition}] made no progress for {seconds:g} s at offset {position} of "
                         f"{end}{more}")


class TokenError(KafkaWorkerError, ConnectionError):
    """The OIDC token endpoint at `endpoint` refused the worker or did not answer; `cause` is `authentication`
    (the client id or secret was refused) or `unreachable`. A ConnectionError, so the Kafka client treats it as a
    connection that failed and tries again; the message never holds a secret."""

    def __init__(self, message: str, *, endpoint: str, cause: str) -> None:
        self.endpoint = endpoint
        self.cause = cause
        super().__init__(f"OIDC token endpoint {endpoint}: {message}")
