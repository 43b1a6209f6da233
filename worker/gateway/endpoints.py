"""The gateway's HTTP API as one table: every endpoint (method, path, the GatewayApi method that answers it, what a
success is, which error codes it may answer) and every error code (status, meaning, whether a Retry-After comes
with it). The aiohttp application is built from `ENDPOINTS` (api.py), the answers' Retry-After from `ERRORS`, and
the OpenAPI document from both (openapi.py), so the API and its description cannot part.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = ["ENDPOINTS", "ERRORS", "Endpoint", "ErrorCode", "Success", "codes_of"]


class ErrorCode(NamedTuple):
    """An error answer `{"error": <code>, "message": <what to fix>}`: its status, what it means, and whether it
    carries Retry-After (the request may be sent again as it is, later)."""

    status: int
    meaning: str
    retry_after: bool = False


ERRORS: dict[str, ErrorCode] = {
    "bad-cursor": ErrorCode(400, "a `Last-Event-ID` that is not `<run id>:<n>`, an `after` that is not an event "
                                 "number (a thread's: not `<run id>:<n>`), or a thread's cursor of a run not of the "
                                 "thread"),
    "bad-query": ErrorCode(400, "a query parameter out of its range (`limit`, `before`, `follow`)"),
    "bad-body": ErrorCode(400, "a POST body that is not a JSON `RunAgentInput` of the path's run and its thread (or "
                               "of the path's thread)"),
    "no-token": ErrorCode(401, "no access token: send `Authorization: Bearer <token>` or `?token=`"),
    "bad-token": ErrorCode(401, "a token that is malformed, badly signed, or grants not exactly one run or thread"),
    "expired-token": ErrorCode(401, "a token past its `exp` (or its v1 expiry)"),
    "premature-token": ErrorCode(401, "a token before its `nbf` or `iat`"),
    "wrong-audience": ErrorCode(401, "a JWT whose `aud` does not name the gateway's `auth_audience`"),
    "wrong-issuer": ErrorCode(401, "a JWT whose `iss` is not the gateway's `auth_issuer`"),
    "wrong-algorithm": ErrorCode(401, "a JWT signed with an algorithm the gateway, or its key, refuses"),
    "unsigned-token": ErrorCode(401, "a JWT with `alg: none`"),
    "unknown-key": ErrorCode(401, "a JWT whose `kid` is none of the gateway's keys"),
    "bad-peer": ErrorCode(401, "between replicas only: a forwarded request not signed with the deployment's peer "
                               "key"),
    "forbidden": ErrorCode(403, "a valid token for another run or thread"),
    "unknown-run": ErrorCode(404, "neither topic has shown the gateway the run"),
    "no-display": ErrorCode(404, "the run has no display record yet"),
    "unknown-thread": ErrorCode(404, "the thread index names no run of the thread (its owner, the only replica that "
                                     "would know it, answers)"),
    "no-thread-index": ErrorCode(404, "the gateway runs without `--thread-index-topic`: it serves no threads"),
    "no-route": ErrorCode(404, "no endpoint has this path"),
    "method-not-allowed": ErrorCode(405, "the path's endpoints take other methods (the `Allow` header names them)"),
    "not-held": ErrorCode(410, "the topics no longer hold the run"),
    "body-too-large": ErrorCode(413, "a POST body over `max_body_bytes`"),
    "peer-failed": ErrorCode(502, "the replica serving the run (or thread) answered no gateway error (a proxy's "
                                  "page, a crashed replica's 500): the message names its status, this replica's log "
                                  "what it said", retry_after=True),
    "busy": ErrorCode(503, "the connection limit (`max_connections`), or a draining replica", retry_after=True),
    "keys-unavailable": ErrorCode(503, "the identity provider's keys could not be fetched", retry_after=True),
    "kafka-unavailable": ErrorCode(503, "a read of older events failed", retry_after=True),
    "no-owner": ErrorCode(503, "no replica served the partition of the run (or thread) within `forward_wait_ms` "
                               "(a rebalance, a replica killed)", retry_after=True),
    "partition-moved": ErrorCode(503, "the run (or thread) moved to another replica before the stream's first frame: "
                                      "attach again"),
    "owner-lost": ErrorCode(503, "the replica serving the run went away before the stream's first frame: attach "
                                 "again"),
    "not-owner": ErrorCode(503, "between replicas only: a forwarded request reached a replica that does not serve "
                                "the run now (the forwarding replica tries again)", retry_after=True),
}  # fmt: skip

# The codes of the requests for a run: its token (checked first), its way to the owner, and the run itself.
_TOKEN = ("no-token", "bad-token", "expired-token", "premature-token", "wrong-audience", "wrong-issuer",
          "wrong-algorithm", "unsigned-token", "unknown-key", "keys-unavailable", "forbidden")  # fmt: skip
_ROUTED = ("bad-peer", "not-owner", "no-owner", "peer-failed", "unknown-run", "kafka-unavailable")
_STREAM = ("busy", "not-held", "partition-moved", "owner-lost")
# A thread's: its token (a thread's only), its way to the owner, the thread and, for its streams, its runs'.
_THREAD = (*_TOKEN, "bad-peer", "not-owner", "no-owner", "peer-failed", "no-thread-index", "unknown-thread")
_THREAD_STREAM = (*_THREAD, "bad-query", "unknown-run", "kafka-unavailable", "busy", "partition-moved", "owner-lost")


class Success(NamedTuple):
    """A success: its status and media type, the name of its body's schema (openapi.py), both "" for no body, and
    when it is answered ("": the endpoint's summary)."""

    status: int
    media_type: str
    schema: str
    description: str = ""


class Endpoint(NamedTuple):
    """One endpoint: `method` and `path` (aiohttp's form), `name` (GatewayApi's handler, and the operationId), what a
    success is (and `also`, its other successes), the error codes it may answer, whether it needs an access token,
    and which of the parameters openapi.py describes it takes (query `after`, `token`; header `Last-Event-ID`; the
    `RunAgentInput` body)."""

    method: Literal["GET", "POST"]
    path: str
    name: str
    summary: str
    success: Success
    errors: tuple[str, ...] = ()
    token: bool = False
    parameters: tuple[str, ...] = ()
    also: tuple[Success, ...] = ()


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("GET", "/runs/{run_id}/events", "events", "A run's events for EventSource",
             Success(200, "text/event-stream", "EventStream"), ("bad-cursor", *_TOKEN, *_ROUTED, *_STREAM),
             token=True, parameters=("after", "Last-Event-ID"),
             also=(Success(204, "", "", "The cursor is at or past the run's terminal event: nothing more comes (an "
                                        "EventSource stops reconnecting)."),)),
    Endpoint("POST", "/runs/{run_id}", "agent", "A whole run for HttpAgent",
             Success(200, "text/event-stream", "EventStream"),
             ("bad-body", "body-too-large", *_TOKEN, *_ROUTED, *_STREAM), token=True, parameters=("RunAgentInput",)),
    Endpoint("GET", "/runs/{run_id}/display", "display", "A run's latest display record",
             Success(200, "application/json", "Display"), ("no-display", *_TOKEN, *_ROUTED), token=True),
    Endpoint("GET", "/view/{run_id}", "view", "The viewer page of a run",
             Success(200, "text/html", "Page"), parameters=("token",)),
    Endpoint("GET", "/threads/{thread_id}", "thread", "A thread's runs, newest first, a page at a time",
             Success(200, "application/json", "ThreadRuns"), ("bad-query", *_THREAD), token=True,
             parameters=("limit", "before")),
    Endpoint("GET", "/threads/{thread_id}/events", "thread_events", "A thread's runs as one stream for EventSource",
             Success(200, "text/event-stream", "EventStream"), ("bad-cursor", *_THREAD_STREAM), token=True,
             parameters=("thread-after", "Last-Event-ID", "follow")),
    Endpoint("POST", "/threads/{thread_id}/connect", "thread_connect",
             "A thread's runs as one verifiable stream, for an AG-UI agent's connect()",
             Success(200, "text/event-stream", "EventStream"), ("bad-body", "body-too-large", *_THREAD_STREAM),
             token=True, parameters=("RunAgentInput", "follow")),
    Endpoint("GET", "/view/threads/{thread_id}", "thread_view", "The viewer page of a thread",
             Success(200, "text/html", "Page"), parameters=("token",)),
    Endpoint("GET", "/openapi.json", "openapi", "This document", Success(200, "application/json", "OpenApi")),
)  # fmt: skip


def codes_of(endpoint: Endpoint) -> dict[int, list[str]]:
    """The endpoint's error codes by status, each list in the table's order."""
    by_status: dict[int, list[str]] = {}
    for code in endpoint.errors:
        by_status.setdefault(ERRORS[code].status, []).append(code)
    return dict(sorted(by_status.items()))
