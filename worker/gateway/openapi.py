"""The OpenAPI 3.1 document of the gateway's HTTP API, built from its one table (endpoints.py): served at
`GET /openapi.json` and kept in docs/openapi.json (`python -m devtools.gen_docs` writes it, a test keeps it current).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from worker.gateway.endpoints import ENDPOINTS, ERRORS, Endpoint, Success, codes_of

__all__ = ["document"]

_ERROR = {
    "type": "object",
    "description": "Every error answer: a code naming the cause, and one line saying what to fix.",
    "required": ["error", "message"],
    "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
    "additionalProperties": False,
}
_SCHEMAS: dict[str, dict[str, Any]] = {
    "Error": _ERROR,
    "EventStream": {
        "type": "object",
        "description": "One event of the stream (before OpenAPI 3.2's itemSchema, the schema of an event stream "
                       "describes each event): LF only, no `event:` field; a durable event carries the id "
                       "`<run id>:<n>`, in event order, an event the gateway makes (a late-join prelude) none. "
                       "Comments between events (`: keep-alive`, or why a stream ends early) are no events. The "
                       "stream ends after the run's terminal event.",
        "required": ["data"],
        "properties": {
            "id": {"type": "string", "pattern": "^.+:(0|[1-9][0-9]{0,17})$"},
            "event": {"type": "string"},
            "data": {"type": "string", "contentMediaType": "application/json",
                     "contentSchema": {"$ref": "#/components/schemas/AguiEvent"}},
        },
    },
    "AguiEvent": {
        "type": "object",
        "description": "An AG-UI event, as the worker's output topic holds it.",
        "required": ["type"],
        "properties": {"type": {"type": "string"}},
    },
    "Display": {
        "type": "object",
        "required": ["runId", "threadId", "aguiSeq", "snapshot"],
        "properties": {
            "runId": {"type": "string"},
            "threadId": {"type": "string", "description": "The run's thread (\"\" when its record names none)."},
            "aguiSeq": {"type": "integer", "description": "The number of the last event the record covers."},
            "snapshot": {"type": "object", "description": "The display record: the run's messages, reasoning and "
                                                          "tool calls as a client holds them."},
        },
        "additionalProperties": False,
    },
    "RunAgentInput": {
        "type": "object",
        "description": "AG-UI's RunAgentInput, as `HttpAgent` sends it; the gateway reads `threadId` and `runId` (for "
                       "a thread's connect, `threadId`, the path's thread).",
        "required": ["threadId", "runId"],
        "properties": {
            "threadId": {"type": "string", "description": "The run's thread (or the path's thread)."},
            "runId": {"type": "string", "description": "The path's run (for a thread's connect, any)."},
            "messages": {"type": "array"},
            "tools": {"type": "array"},
            "context": {"type": "array"},
            "state": {},
            "forwardedProps": {},
        },
    },
    "ThreadRuns": {
        "type": "object",
        "description": "A page of a thread's runs, newest first (the reverse of their start order).",
        "required": ["threadId", "runs", "next"],
        "properties": {
            "threadId": {"type": "string"},
            "runs": {"type": "array", "items": {
                "type": "object",
                "required": ["runId", "state", "firstEventAt", "lastEventAt", "aguiSeq"],
                "properties": {
                    "runId": {"type": "string"},
                    "state": {"enum": ["running", "finished", "error"]},
                    "firstEventAt": {"type": ["integer", "null"], "description": "Its first event's time, Unix ms."},
                    "lastEventAt": {"type": ["integer", "null"], "description": "Its terminal event's time; null "
                                                                                "while it runs."},
                    "aguiSeq": {"type": ["integer", "null"], "description": "Its terminal event's number; null "
                                                                            "while it runs."},
                },
                "additionalProperties": False,
            }},
            "next": {"type": ["string", "null"], "description": "`before` of the next page; null on the last."},
        },
        "additionalProperties": False,
    },
    "Page": {"type": "string", "description": "A self-contained HTML page (no build step, no CDN)."},
    "OpenApi": {"type": "object", "description": "An OpenAPI 3.1 document."},
}  # fmt: skip
_PARAMETERS: dict[str, dict[str, Any]] = {
    "after": {
        "name": "after", "in": "query", "required": False,
        "description": "Resume after this event number (as `Last-Event-ID: <run id>:<n>` does).",
        "schema": {"type": "integer", "minimum": 0, "maximum": 10**18 - 1},
    },
    "Last-Event-ID": {
        "name": "Last-Event-ID", "in": "header", "required": False,
        "description": "The id of the last frame the client has, `<run id>:<n>`: the stream goes on from event "
                       "`n + 1`; a cursor of another run gets the late-join prelude.",
        "schema": {"type": "string"},
    },
    "thread-after": {
        "name": "after", "in": "query", "required": False,
        "description": "Resume a thread stream after this event, `<run id>:<n>` (as `Last-Event-ID` does): the rest "
                       "of that run, then the later runs.",
        "schema": {"type": "string"},
    },
    "follow": {
        "name": "follow", "in": "query", "required": False,
        "description": "`false`: end the stream after the runs the thread has when it attached; `true` (the "
                       "default): stay for every later run.",
        "schema": {"enum": ["true", "false"]},
    },
    "limit": {
        "name": "limit", "in": "query", "required": False, "description": "Runs in a page (50 by default).",
        "schema": {"type": "integer", "minimum": 1, "maximum": 500},
    },
    "before": {
        "name": "before", "in": "query", "required": False,
        "description": "A page's `next`: the runs that started before it.",
        "schema": {"type": "string", "pattern": "^[0-9]{1,18}$"},
    },
    "token": {
        "name": "token", "in": "query", "required": False,
        "description": "An access token the page passes on to the stream it opens.",
        "schema": {"type": "string"},
    },
}  # fmt: skip
_PATH_PARAMETER = {
    "in": "path", "required": True, "description": "The root run's id (the records' key).",
    "schema": {"type": "string", "minLength": 1},
}  # fmt: skip
_PATH_DESCRIPTIONS = {"thread_id": "The thread's id (every run of it carries it)."}
_RETRY_AFTER = {
    "description": "Seconds to wait before sending the request again; with the codes "
                   + ", ".join(f"`{code}`" for code, error in ERRORS.items() if error.retry_after) + ".",
    "schema": {"type": "integer", "minimum": 0},
}
_CORS = {name: {"schema": {"type": "string"}} for name in
         ("Access-Control-Allow-Methods", "Access-Control-Allow-Headers", "Access-Control-Max-Age")}  # fmt: skip


def _error_answer(codes: list[str]) -> dict[str, Any]:
    lines = "; ".join(f"`{code}`: {ERRORS[code].meaning}" for code in codes)
    answer: dict[str, Any] = {"description": lines, "content": {"application/json": {"schema": {
        "allOf": [{"$ref": "#/components/schemas/Error"}, {"properties": {"error": {"enum": codes}}}]}}}}
    if any(ERRORS[code].retry_after for code in codes):
        answer["headers"] = {"Retry-After": {"$ref": "#/components/headers/Retry-After"}}
    return answer


def _success(endpoint: Endpoint, success: Success) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": success.description or endpoint.summary}
    if success.media_type:
        answer["content"] = {success.media_type: {"schema": {"$ref": f"#/components/schemas/{success.schema}"}}}
    return answer


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": endpoint.name,
        "summary": endpoint.summary,
        "parameters": [{"$ref": f"#/components/parameters/{name}"} for name in endpoint.parameters
                       if name in _PARAMETERS],
        "responses": {str(success.status): _success(endpoint, success)
                      for success in (endpoint.success, *endpoint.also)},
    }  # fmt: skip
    if "RunAgentInput" in endpoint.parameters:
        operation["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/RunAgentInput"}}}}
    for status, codes in codes_of(endpoint).items():
        operation["responses"][str(status)] = _error_answer(codes)
    if endpoint.token:
        operation["security"] = [{"bearer": []}, {"queryToken": []}]
    return operation


def _preflight(path: str) -> dict[str, Any]:
    return {
        "operationId": "preflight " + path,
        "summary": "CORS preflight",
        "responses": {"204": {"description": "The methods and headers a page of an allowed origin may send.",
                              "headers": _CORS}},
    }  # fmt: skip


def _package_version() -> str:
    try:
        return version("harness-agui-worker")
    except PackageNotFoundError:  # pragma: no cover - a checkout run without installing
        return "0"


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every endpoint in `ENDPOINTS` and every error code in `ERRORS`."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in ENDPOINTS:
        path = paths.setdefault(endpoint.path, {})
        names = [part[1:-1] for part in endpoint.path.split("/") if part.startswith("{")]
        if names:
            path["parameters"] = [{"name": name, **_PATH_PARAMETER} | (
                {"description": _PATH_DESCRIPTIONS[name]} if name in _PATH_DESCRIPTIONS else {}) for name in names]
        path[endpoint.method.lower()] = _operation(endpoint)
    for name, path in paths.items():
        path["options"] = _preflight(name)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "harness-agui-worker gateway",
            "version": _package_version(),
            "description": "AG-UI event streams of the worker's output topic over HTTP: runs and threads for "
                           "EventSource and AG-UI agents, display records, a thread's runs, the viewer page. Errors "
                           "are JSON `{\"error\", \"message\"}`. Probes and metrics are on the metrics port, not "
                           "here.",
        },
        "paths": paths,
        "components": {
            "schemas": _SCHEMAS,
            "parameters": _PARAMETERS,
            "headers": {"Retry-After": _RETRY_AFTER},
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "A JWT (or a v1 token) granting one run (`run_id`) or one thread "
                                          "(`thread_id`)."},
                "queryToken": {"type": "apiKey", "in": "query", "name": "token",
                               "description": "The same token as a query parameter, for EventSource."},
            },
        },
    }  # fmt: skip
