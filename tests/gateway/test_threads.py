"""A thread served by one gateway replica on the real broker: its runs listed newest first and paged; its stream
exactly its runs' events in the order of the thread index's start records, under the runs' own ids, resumed by
`Last-Event-ID` in the middle of a run and at a run's end; a thread of one run as the run's own stream; the token
checked before anything is looked up (a run's token is 403, none 401); an unknown thread 404."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import (
    THREAD_KEY,
    Frame,
    GatewayProcess,
    read_stream,
    run_scenario,
    thread_site,
    wait_converted,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Rec, Run, corpus, in_thread, produce, read_topic
from worker.gateway.tokens import mint_jwt

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

THREAD = "thread-conversation"
NAMES = ["s01_hello", "s05_failed", "r0000", "s02_tool_roundtrip"]


def thread_runs(names: list[str], thread: str, copy: int = 0) -> list[Run]:
    """Golden runs re-keyed and put in one thread."""
    return [in_thread(run, thread) for run in corpus(copy + 1, names=names)[copy * len(names):]]


async def start_order(bootstrap: str, index: str, thread: str) -> list[str]:
    """The thread's runs in the order of their start records in the index topic (the truth the gateway follows)."""
    records: list[Rec] = await read_topic(bootstrap, index)
    return [(r.key or b"")[len(b"start:"):].decode() for r in sorted(records, key=lambda r: r.offset)
            if (r.key or b"").startswith(b"start:") and r.header("thread-id") == thread]  # fmt: skip


def expected_frames(runs: dict[str, Run], order: list[str]) -> list[tuple[str, bytes]]:
    return [(f"{key}:{n}", event) for key in order for n, event in enumerate(runs[key].events)]


def got(frames: list[Frame]) -> list[tuple[str | None, bytes]]:
    return [(frame.id, frame.data.encode()) for frame in frames]


def test_a_thread_is_its_runs_in_start_order_listed_resumed_and_guarded(
    topic_factory: TopicFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics, index, worker, flags = thread_site(topic_factory, kafka_bootstrap, tmp_path)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics, flags).start()
    runs = {run.key: run for run in thread_runs(NAMES, THREAD)}
    (alone,) = thread_runs(["s09_big_fragments"], "thread-alone", copy=1)
    token = mint_jwt(THREAD_KEY, "thread", THREAD, 600)
    bearer = {"Authorization": f"Bearer {token}"}

    async def scenario() -> None:
        for run in [*runs.values(), alone]:  # one after another: each starts once the one before was converted
            await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in run.lines])
            await wait_converted(kafka_bootstrap, topics, [run.key])
        order = await start_order(kafka_bootstrap, index, THREAD)
        assert sorted(order) == sorted(runs), order
        want = expected_frames(runs, order)
        async with aiohttp.ClientSession() as session:
            url = f"{gateway.url}/threads/{THREAD}"
            for _ in range(200):  # the gateway reads the index a moment after the worker commits
                async with session.get(url, headers=bearer) as resp:
                    listed = await resp.json()
                if resp.status == 200 and len(listed["runs"]) == len(runs) and \
                        all(r["aguiSeq"] is not None for r in listed["runs"]):  # fmt: skip
                    break
                await asyncio.sleep(0.05)
            assert [r["runId"] for r in listed["runs"]] == order[::-1] and listed["next"] is None, listed
            assert {r["runId"]: r["state"] for r in listed["runs"]} == {
                key: "error" if b'"RUN_ERROR"' in run.events[-1] else "finished" for key, run in runs.items()}
            assert all(r["aguiSeq"] == len(runs[r["runId"]].events) - 1 for r in listed["runs"]), listed
            async with session.get(f"{url}?limit=3", headers=bearer) as resp:
                first = await resp.json()
            async with session.get(f"{url}?limit=3&before={first['next']}", headers=bearer) as resp:
                rest = await resp.json()
            assert [r["runId"] for r in first["runs"] + rest["runs"]] == order[::-1] and rest["next"] is None

            status, frames, ended = await read_stream(session, f"{url}/events?follow=false", headers=bearer)
            assert status == 200 and ended and got(frames) == want
            cut = len(runs[order[0]].events) + 2  # the middle of the second run
            status, frames, ended = await read_stream(session, f"{url}/events?follow=false",
                                                      headers={**bearer, "Last-Event-ID": want[cut - 1][0]})
            assert status == 200 and ended and got(frames) == want[cut:]
            at_end = len(runs[order[0]].events)  # the first run's terminal: the next run from its event 0
            status, frames, _ = await read_stream(session, f"{url}/events?follow=false&token={token}",
                                                  headers={"Last-Event-ID": want[at_end - 1][0]})
            assert status == 200 and got(frames) == want[at_end:]

            started = time.monotonic()
            status, frames, ended = await read_stream(session, f"{url}/events", headers=bearer, limit=len(want))
            assert status == 200 and got(frames) == want and not ended  # following: the stream stays open
            assert time.monotonic() - started < 30

            run_token = mint_jwt(THREAD_KEY, "run", order[0], 600)
            other = mint_jwt(THREAD_KEY, "thread", "another-thread", 600)
            for headers, code in (({}, "no-token"), ({"Authorization": f"Bearer {run_token}"}, "forbidden"),
                                  ({"Authorization": f"Bearer {other}"}, "forbidden")):  # fmt: skip
                for path in ("", "/events"):
                    status, frames, _ = await read_stream(session, url + path, headers=headers)
                    assert (status, frames[0].event()["error"]) == (401 if code == "no-token" else 403, code)
            unknown = mint_jwt(THREAD_KEY, "thread", "no-such-thread", 600)
            status, frames, _ = await read_stream(session, f"{gateway.url}/threads/no-such-thread/events",
                                                  headers={"Authorization": f"Bearer {unknown}"})
            assert (status, frames[0].event()["error"]) == (404, "unknown-thread")

            single = {"Authorization": f"Bearer {mint_jwt(THREAD_KEY, 'thread', 'thread-alone', 600)}"}
            status, as_thread, _ = await read_stream(session, f"{gateway.url}/threads/thread-alone/events",
                                                     headers=single, limit=len(alone.events))
            status_run, as_run, _ = await read_stream(session, f"{gateway.url}/runs/{alone.key}/events",
                                                      headers=single)
            assert status == status_run == 200 and got(as_thread) == got(as_run)
            assert [f.data.encode() for f in as_run] == alone.events

    run_scenario(scenario(), gateway, worker)
