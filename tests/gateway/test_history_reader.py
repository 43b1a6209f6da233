"""The history reader on the real broker: a run's events read back in order, and its pooled consumer left with no
partition fetching once a read is done (a fetch left at a partition's end holds up that consumer's next read and
requests for up to fetch_max_wait_ms)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.kafka.conftest import TopicFactory
from worker.contract import SEQ, TYPE
from worker.gateway.directory import DisplayPointer
from worker.gateway.reader import HistoryReader, history
from worker.gateway.settings import GatewaySettings

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

RUNS, EVENTS = 3, 5


def _headers(n: int) -> list[tuple[str, bytes]]:
    kind = b"RUN_FINISHED" if n == EVENTS - 1 else b"TEXT_MESSAGE_CONTENT"
    return [("agui-event-id", b"e"), (SEQ, str(n).encode()), (TYPE, kind)]


async def _scenario(bootstrap: str, output: str, display: str, made: list[AIOKafkaConsumer]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        stamps = {}
        for run in range(RUNS):  # the runs' events one after another, as one thread's finished runs lie
            for n in range(EVENTS):
                sent = await producer.send_and_wait(output, f"{run}:{n}".encode(), key=f"run-{run}".encode(),
                                                    partition=0, headers=_headers(n))  # fmt: skip
            stamps[run] = sent.timestamp
        until = RUNS * EVENTS
        shown = [await producer.send_and_wait(display, f"display {run}".encode(), key=f"run-{run}".encode(),
                                              partition=0) for run in range(RUNS)]  # fmt: skip
    finally:
        await producer.stop()
    settings = GatewaySettings(bootstrap_servers=bootstrap, output_topic=output, display_topic=display,
                               insecure_no_auth=True)  # fmt: skip
    reader = HistoryReader(settings, 1)
    await reader.start()
    try:
        (consumer,) = made

        def none_fetching(after: str) -> None:
            assert consumer.assignment(), after
            assert consumer.paused() == consumer.assignment(), f"a partition left fetching after {after}"

        for run in range(RUNS):
            run_id = f"run-{run}"
            start = await reader.locate(0, run_id, 0, until, hint_ms=stamps[run], known_last=EVENTS - 1)
            assert start is not None
            none_fetching(f"locating {run_id}")
            values = []
            async for batch in reader.events(0, run_id, 0, until, start_at=start):
                none_fetching(f"a batch of {run_id}")
                values.extend(event.value for event in batch)
            assert values == [f"{run}:{n}".encode() for n in range(EVENTS)]
            none_fetching(f"reading {run_id}")
            pointer = DisplayPointer(0, shown[run].offset, EVENTS - 1, 0, "thread")
            assert await reader.display_value(pointer) == f"display {run}".encode()
            none_fetching(f"the display record of {run_id}")
    finally:
        await reader.stop()


def test_a_pooled_reader_is_left_with_no_partition_fetching(
    kafka_bootstrap: str, topic_factory: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[AIOKafkaConsumer] = []
    make = history.gateway_consumer

    def consumer(*args: Any, **options: Any) -> AIOKafkaConsumer:
        made.append(make(*args, **options))
        return made[-1]

    monkeypatch.setattr(history, "gateway_consumer", consumer)
    asyncio.run(_scenario(kafka_bootstrap, topic_factory("out"), topic_factory("display"), made))
