"""The described API (no broker): the OpenAPI document is valid OpenAPI 3.1 and served as docs/openapi.json holds it;
aiohttp's router, the document and the table are the same routes; every error code the gateway's code raises is in
the table with its status; and the answers the table shapes (Retry-After, unknown paths and methods) follow it, in a
GatewayApi serving one empty partition."""

from __future__ import annotations

import ast
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from schemathesis.specs.openapi.definitions import OPENAPI_31

from tests.gateway.jwt_support import AUDIENCE, ISSUER, JwksServer, SigningKey, claims, mint
from tests.gateway.support import in_process_api
from worker.gateway.endpoints import ENDPOINTS, ERRORS
from worker.gateway.openapi import document

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "worker" / "gateway"


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async with TestClient(TestServer(in_process_api()[0].application())) as test_client:
        yield test_client


def test_the_document_is_openapi_3_1_and_its_schemas_are_json_schema_2020_12() -> None:
    described = document()
    jsonschema.Draft202012Validator(OPENAPI_31).validate(described)
    for schema in described["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)
    assert json.loads((ROOT / "docs" / "openapi.json").read_text()) == described


def _routes(app: web.Application) -> set[tuple[str, str]]:
    """The (method, path) pairs aiohttp's router answers, paths in the document's form."""
    return {(route.method, route.resource.canonical) for route in app.router.routes() if route.resource is not None}


def _described(described: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in described["paths"].items() for method in item
            if method in ("get", "post", "put", "patch", "delete")}  # fmt: skip


def _apart(app: web.Application, described: dict[str, Any]) -> set[tuple[str, str]]:
    """The routes only one of the router and the document has (the router's catch-all CORS preflight aside)."""
    return _routes(app) ^ (_described(described) | {("OPTIONS", "/{tail}")})


def test_the_router_and_the_document_hold_the_same_routes_and_a_preflight_on_each_path() -> None:
    app, described = in_process_api()[0].application(), document()
    assert _described(described) == {(e.method, e.path) for e in ENDPOINTS} and len(ENDPOINTS) >= 5
    assert not _apart(app, described), _apart(app, described)
    assert all("options" in item for item in described["paths"].values())


def test_a_route_added_to_the_router_alone_is_found() -> None:
    app = in_process_api()[0].application()

    async def stray(request: web.Request) -> web.Response:
        return web.Response()

    app.router.add_route("GET", "/runs/{run_id}/stray", stray)
    assert _apart(app, document()) == {("GET", "/runs/{run_id}/stray")}


def _raised(sources: dict[str, str]) -> set[tuple[int, str]]:
    """Every (status, code) the sources make an error answer with: `GatewayError(status, "code", ...)` and any
    call or `super().__init__` of that shape, `_refused("code", ...)` (401) and `Unavailable(..., code=...)` (503,
    `busy` by default)."""
    found: set[tuple[int, str]] = set()
    for path, source in sources.items():
        for node in ast.walk(ast.parse(source, path)):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "ErrorCode":
                continue  # the table itself
            args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
            if len(args) >= 2 and isinstance(args[0], int) and 400 <= args[0] < 600 and isinstance(args[1], str):
                found.add((args[0], args[1]))
            elif name == "_refused" and args and isinstance(args[0], str):
                found.add((401, args[0]))
            elif name == "Unavailable":
                code = next((k.value.value for k in node.keywords if k.arg == "code"
                             and isinstance(k.value, ast.Constant)), "busy")  # fmt: skip
                found.add((503, str(code)))
    return found


def _gateway_sources() -> dict[str, str]:
    return {str(path.relative_to(ROOT)): path.read_text() for path in sorted(GATEWAY.rglob("*.py"))}


def test_every_error_the_gateway_raises_is_in_the_table_with_its_status() -> None:
    raised = _raised(_gateway_sources())
    table = {(error.status, code) for code, error in ERRORS.items()}
    assert len(raised) >= 20, "the scan finds nothing: the rule checks nothing"
    assert raised == table, f"raised, not in the table: {sorted(raised - table)}; never: {sorted(table - raised)}"


def test_an_error_planted_outside_the_table_is_found() -> None:
    sources = _gateway_sources()
    sources["worker/gateway/api.py"] += "\n\ndef _planted():\n    raise GatewayError(418, 'teapot', 'short')\n"
    sources["worker/gateway/keys.py"] += "\n\ndef _planted():\n    return Unavailable('x', 5, code='kettle')\n"
    table = {(error.status, code) for code, error in ERRORS.items()}
    assert _raised(sources) - table == {(418, "teapot"), (503, "kettle")}


async def test_unknown_paths_and_methods_are_json_errors_of_the_table(client: TestClient[Any, Any]) -> None:
    async with client.get("/nowhere") as answer:
        assert (answer.status, (await answer.json())["error"]) == (404, "no-route")
    async with client.put("/runs/r-1/events") as answer:
        assert (answer.status, (await answer.json())["error"]) == (405, "method-not-allowed")
        assert answer.headers["Allow"] == "GET, OPTIONS"
    async with client.get("/runs/r{1}/events") as answer:  # braces are a run id's own characters
        assert (answer.status, (await answer.json())["error"]) == (404, "unknown-run")
    for path in ("/runs/r-1/events", "/view/r%0A1", "/nowhere"):  # a preflight on any path, a line break too
        async with client.options(path) as answer:
            assert answer.status == 204, path
    async with client.get("/openapi.json") as answer:
        assert answer.status == 200 and orjson.loads(await answer.read()) == document()


@pytest.mark.parametrize("after", ["²", "٣", "-1", "1e3", "1" * 19, ""])
async def test_an_after_that_is_not_an_event_number_is_a_bad_cursor(client: TestClient[Any, Any], after: str) -> None:
    async with client.get("/runs/r-1/events", params={"after": after}) as answer:
        assert (answer.status, (await answer.json())["error"]) == (400, "bad-cursor")


@pytest.mark.parametrize("query", [{"limit": "²"}, {"limit": "٣"}, {"limit": "0"}, {"limit": "501"}, {"before": "²"},
                                   {"before": "1" * 19}, {"before": ""}])  # fmt: skip
async def test_a_page_query_that_is_not_a_number_is_a_bad_query(client: TestClient[Any, Any],
                                                                query: dict[str, str]) -> None:  # fmt: skip
    async with client.get("/threads/t-1", params=query) as answer:
        assert (answer.status, (await answer.json())["error"]) == (400, "bad-query")
    async with client.get("/threads/t-1", params={"limit": "5"}) as answer:  # and a good page of an unknown thread
        assert (answer.status, (await answer.json())["error"]) == (404, "unknown-thread")


async def test_a_503_whose_code_carries_retry_after_has_it() -> None:
    async with JwksServer([SigningKey("k1", "RS256")], down=True) as idp:
        api, _ = in_process_api(insecure_no_auth=False, auth_jwks_url=idp.url, auth_audience=AUDIENCE,
                                auth_issuer=ISSUER, retry_after_s=7)
        async with TestClient(TestServer(api.application())) as test_client:
            token = mint(idp.keys[0], claims(run_id="r-1"))
            async with test_client.get("/runs/r-1/display", headers={"Authorization": f"Bearer {token}"}) as answer:
                body = await answer.json()
                assert (answer.status, body["error"], answer.headers.get("Retry-After")) == (
                    503, "keys-unavailable", "7"), body
