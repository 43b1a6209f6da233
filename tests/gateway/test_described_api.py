"""The described API against live gateways on the real broker: two replicas of a secured gateway, each owning one of
the two partitions (so about half of all requests are forwarded to the other), and a worker that converted a few
finished runs, writing the thread index. `GET /openapi.json` is the document docs/openapi.json holds; schemathesis
generates requests from it (valid and invalid, for every operation, with a token for the path's run or thread,
none, or a malformed one, through either replica), and every answer must match the document: a documented status,
content type, body and headers, and no 5xx but a documented 503. The runs' own requests (their events from cursors,
display records, an `HttpAgent` POST, the viewer) and their threads' (the list, the stream from cursors, a
`connect()`) are checked the same way."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi import checks

from tests.gateway.support import (
    GatewayProcess,
    Topics,
    partition_of,
    start_worker,
    thread_of,
    until_one_partition_each,
    wait_converted,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Run, corpus, interleave, produce
from worker.gateway.endpoints import ERRORS
from worker.gateway.openapi import document
from worker.gateway.tokens import mint_token

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]

KEY = b"d" * 48
FLAGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500")
CHECKS = [checks.status_code_conformance, checks.content_type_conformance, checks.response_schema_conformance,
          checks.response_headers_conformance]  # fmt: skip
EXAMPLES = 300  # per generation mode, over every operation
RETRYABLE = {code for code, error in ERRORS.items() if error.status == 503}


def _finished_runs() -> list[Run]:
    """The smallest golden runs that end with a terminal event, on both partitions."""
    runs = [r for r in sorted(corpus(), key=lambda r: len(r.lines))
            if r.events and json.loads(r.events[-1])["type"] in ("RUN_FINISHED", "RUN_ERROR")][:6]  # fmt: skip
    assert {partition_of(r.key) for r in runs} == {0, 1}
    return runs


def _bearer(subject: str, scope: str = "run") -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(KEY, scope, subject, 600)}"}  # type: ignore[arg-type]


def _until_known(gateways: list[GatewayProcess], runs: list[Run], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    for gateway in gateways:
        for run in runs:
            while requests.get(f"{gateway.url}/runs/{run.key}/display", headers=_bearer(run.key),
                               timeout=10).status_code != 200:  # fmt: skip
                assert time.monotonic() < deadline, f"run {run.key} never served through {gateway.name}"
                time.sleep(0.1)


class _Answers:
    """Every answer checked against the document, counted by (method, path, status, error code)."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[str, str, int, str]] = Counter()

    def check(self, case: schemathesis.Case, base_url: str, headers: dict[str, str]) -> schemathesis.Response:
        response = case.call(base_url=base_url, headers=headers, timeout=60)
        code = ""
        if response.headers.get("content-type", [""])[0].startswith("application/json") and response.status_code >= 400:
            code = str(response.json().get("error"))
        self.seen[(case.method, case.path, response.status_code, code)] += 1
        assert response.status_code < 500 or (response.status_code == 503 and code in RETRYABLE), (
            case.method, case.formatted_path, response.status_code, response.text[:500])  # fmt: skip
        case.validate_response(response, checks=CHECKS)
        return response


def _check_thread(answers: _Answers, schema: schemathesis.BaseSchema, url: str, run: Run) -> None:
    """The thread of a run (a thread of one run): its list, its stream whole and from cursors, a `connect()`."""
    thread, last = thread_of(run), len(run.events) - 1
    bearer = _bearer(thread, "thread")
    listed = answers.check(schema["/threads/{thread_id}"]["GET"].Case(path_parameters={"thread_id": thread}), url,
                           bearer)  # fmt: skip
    assert listed.status_code == 200 and listed.json()["runs"][0]["runId"] == run.key
    events = schema["/threads/{thread_id}/events"]["GET"]
    for query, headers, status in [({"follow": "false"}, {}, 200),
                                   ({"follow": "false", "after": f"{run.key}:0"}, {}, 200),
                                   ({"follow": "false"}, {"Last-Event-ID": f"{run.key}:{last // 2}"}, 200),
                                   ({"follow": "false"}, {"Last-Event-ID": "another-run:3"}, 400),
                                   ({"follow": "maybe"}, {}, 400)]:  # fmt: skip
        answer = answers.check(events.Case(path_parameters={"thread_id": thread}, query=query, headers=headers), url,
                               bearer)  # fmt: skip
        assert answer.status_code == status, (query, headers, answer.text[:300])
    refused = answers.check(events.Case(path_parameters={"thread_id": thread}), url, _bearer(run.key))
    assert refused.status_code == 403  # a run's token opens no thread
    body = {"threadId": thread, "runId": "any", "messages": [], "tools": [], "context": []}
    connect = schema["/threads/{thread_id}/connect"]["POST"].Case(
        path_parameters={"thread_id": thread}, query={"follow": "false"}, body=body, media_type="application/json")
    answer = answers.check(connect, url, bearer)
    assert answer.status_code == 200 and json.loads(run.events[-1])["type"] in answer.text


def test_every_answer_of_two_live_replicas_matches_the_document(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topics = Topics.create(topic_factory)
    key_file = tmp_path / "gateway.key"
    key_file.write_bytes(KEY + b"\n")
    runs = _finished_runs()
    index = topic_factory("index", 2, {"cleanup.policy": "compact"})
    worker = start_worker(tmp_path, kafka_bootstrap, topics, "--thread-index-topic", index)
    gateways = [GatewayProcess(tmp_path, kafka_bootstrap, topics, ("--auth-key-file", str(key_file), *FLAGS,
                                                                   "--thread-index-topic", index),
                               name=f"g{i}") for i in range(2)]  # fmt: skip
    try:
        asyncio.run(produce(kafka_bootstrap, topics.source, interleave(runs)))
        asyncio.run(wait_converted(kafka_bootstrap, topics, [r.key for r in runs]))
        for gateway in gateways:
            gateway.start()
        until_one_partition_each(gateways)
        _until_known(gateways, runs)
        served = requests.get(f"{gateways[0].url}/openapi.json", timeout=10).json()
        assert served == document() == json.loads((Path(__file__).parents[2] / "docs" / "openapi.json").read_text())
        schema = schemathesis.openapi.from_dict(served)
        answers = _Answers()
        urls = st.sampled_from([g.url for g in gateways])

        def token_for(case: schemathesis.Case, which: str) -> dict[str, str]:
            run_id = (case.path_parameters or {}).get("run_id")
            thread_id = (case.path_parameters or {}).get("thread_id")
            if which == "own" and isinstance(run_id, str):
                return _bearer(run_id)
            if which == "own" and isinstance(thread_id, str):
                return _bearer(thread_id, "thread")
            if which == "other":
                return _bearer(runs[0].key)
            return {"Authorization": "Bearer v1.run.x.1.y"} if which == "malformed" else {}

        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=schema.as_strategy(mode), url=urls,
                   which=st.sampled_from(["own", "own", "none", "other", "malformed"]))  # fmt: skip
            def generated(case: schemathesis.Case, url: str, which: str) -> None:
                answers.check(case, url, token_for(case, which))

            generated()

        # Requests for the runs themselves: bodies and cursors generated, each run's own path and token (its events
        # from a cursor at or past its terminal event: 204).
        own = schema.include(path_regex=r"^/(runs/\{run_id\}(/display|/events)?|view/\{run_id\})$")
        for run in runs[:2]:

            @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=own.as_strategy(path_parameters={"run_id": run.key}), url=urls)
            def of_the_run(case: schemathesis.Case, url: str) -> None:
                answers.check(case, url, _bearer(case.path_parameters["run_id"]))

            of_the_run()
            events = schema["/runs/{run_id}/events"]["GET"]
            agent = schema["/runs/{run_id}"]["POST"]
            last = len(run.events) - 1
            for url in (g.url for g in gateways):
                for query, headers, status in [({}, {}, 200), ({"after": 0}, {}, 200), ({"after": last - 1}, {}, 200),
                                               ({}, {"Last-Event-ID": f"{run.key}:{last // 2}"}, 200),
                                               ({}, {"Last-Event-ID": "another-run:3"}, 200),
                                               ({"after": last}, {}, 204),
                                               ({}, {"Last-Event-ID": f"{run.key}:{last}"}, 204)]:  # fmt: skip
                    answer = answers.check(events.Case(path_parameters={"run_id": run.key}, query=query,
                                                       headers=headers), url, _bearer(run.key))  # fmt: skip
                    assert answer.status_code == status, (query, headers, answer.text[:300])
                body = {"threadId": thread_of(run), "runId": run.key, "messages": [], "tools": [], "context": []}
                refused = answers.check(events.Case(path_parameters={"run_id": run.key}), url, _bearer(runs[-1].key))
                assert refused.status_code == 403
                posted = agent.Case(path_parameters={"run_id": run.key}, body=body, media_type="application/json")
                answer = answers.check(posted, url, _bearer(thread_of(run), "thread"))
                assert answer.status_code == 200 and json.loads(run.events[-1])["type"] in answer.text
                _check_thread(answers, schema, url, run)
        by_status: Counter[int] = Counter()
        for (_, _, status, _), count in answers.seen.items():
            by_status[status] += count
        print("answers by status:", sorted(by_status.items()))
        every = {(method, path) for method, path, _, _ in answers.seen}
        assert every == {(method.upper(), path) for path, item in served["paths"].items() for method in item
                         if method != "parameters"}, "an operation was never asked"  # fmt: skip
        codes = {code for *_, code in answers.seen}
        assert {"no-token", "bad-token", "forbidden", "unknown-run", "bad-cursor", "bad-body", "unknown-thread",
                "bad-query"} <= codes, answers.seen
        assert sum(g.metric("harness_agui_gateway_forwarded_requests_total", outcome="ok") for g in gateways) > 50
    except BaseException:
        for gateway in gateways:
            print(gateway.log()[-3000:])
        raise
    finally:
        for gateway in gateways:
            gateway.kill()
        worker.kill()
