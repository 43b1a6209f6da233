"""Item identity, ordinals, response groups, memory sources, authored inputs and delta capture."""

from __future__ import annotations

import hashlib

import pytest

from tests.display._events import BASE_TS, custom, text, tool
from worker.display import DisplayFold, DisplaySnapshot, item_id
from worker.errors import AguiObservationError, ConfigError

REQUEST_STARTED = {
    "schema_version": "1",
    "kind": "lifecycle",
    "payload": {"type": "model_request_started", "request_id": "model-request-1", "request_index": 0},
}
MEMORY_RECALL = {
    "schema_version": "1",
    "kind": "context",
    "payload": {
        "type": "memory_recall",
        "memories": [{"memory": "m1", "recall": "recalled", "records": [{"id": "r1", "sha256": "ab"}]}],
    },
}


def test_item_id_is_the_sha256_rule() -> None:
    digest = hashlib.sha256(b"run-1\x00tool_call\x00sub:call_1").hexdigest()
    assert item_id("run-1", "tool_call", "sub:call_1") == "itm_" + digest[:32]


def test_ordinals_are_dense_from_first_and_observations_keyed_by_position() -> None:
    fold = DisplayFold("run-t", attempt=2, first=10)
    records = fold.fold(
        [
            {"type": "RUN_STARTED", "timestamp": BASE_TS, "threadId": "t", "runId": "run-t"},
            text("START", "m1", BASE_TS + 1),
            text("END", "m1", BASE_TS + 2),
            custom("a13n.harness.state", {"x": 1}, BASE_TS + 3),
        ]
    )
    assert [r.item.ordinal for r in records if r.item] == [10, 11, 11, 12]
    assert records[0].item is not None
    assert records[0].item.id == item_id("run-t", "observation", "2:1")
    assert records[3].item is not None
    assert records[3].item.id == item_id("run-t", "observation", "2:4")
    snapshot = fold.export()
    assert snapshot.continuation.next_ordinal == 13
    assert [item.first_stream_id for item in snapshot.items] == ["2-1", "2-2", "2-4"]


def test_subagent_events_get_their_own_items() -> None:
    fold = DisplayFold("run-t")
    records = fold.fold([text("START", "m1", BASE_TS), text("START", "m1", BASE_TS, subagentRunId="child")])
    assert records[0].item is not None and records[1].item is not None
    assert records[1].item.id == item_id("run-t", "text_message", "child:m1") != records[0].item.id


def test_response_group_comes_from_the_latest_request_start_of_the_scope() -> None:
    fold = DisplayFold("run-t", attempt=1)
    records = fold.fold(
        [
            text("START", "before", BASE_TS),
            custom("a13n.harness.lifecycle", REQUEST_STARTED, BASE_TS + 1),
            text("START", "after", BASE_TS + 2),
            tool("START", "c1", BASE_TS + 3, toolCallName="t", subagentRunId="child"),
        ]
    )
    groups = [record.item.response_group if record.item else None for record in records]
    assert groups == [None, None, "run-t:1:2", None]
    assert fold.export().continuation.response_groups == {"root": "run-t:1:2"}


def test_memory_sources_attach_at_the_next_assistant_end() -> None:
    fold = DisplayFold("run-t")
    records = fold.fold(
        [
            custom("a13n.harness.context", MEMORY_RECALL, BASE_TS),
            text("START", "m1", BASE_TS + 1),
            text("CONTENT", "m1", BASE_TS + 1, "hi"),
            text("END", "m1", BASE_TS + 2),
        ]
    )
    assert [r.item.memory_sources is not None for r in records if r.item] == [False, False, False, True]
    end = records[-1].item
    assert end is not None and end.memory_sources is not None
    [source] = end.memory_sources
    assert (source.kind, source.memory, source.status) == ("record", "m1", "recalled")
    assert [record.id for record in source.records] == ["r1"]
    dumped = records[-1].model_dump(mode="json")["item"]
    assert dumped["memory_sources"][0]["records"] == [{"id": "r1", "sha256": "ab"}]
    assert "memory_sources" not in records[-2].model_dump(mode="json")["item"]
    assert fold.export().continuation.memory_sources["root"] == (source,)


def test_authored_input_becomes_a_completed_user_message() -> None:
    event = {
        "input_id": "input-1",
        "source": "user",
        "content": "Say hello",
        "message_id": "run-t:input:1",
        "role": "user",
    }
    fold = DisplayFold("run-t")
    [record] = fold.fold([custom("a13n.input.user", event, BASE_TS, metadata={"display": True})])
    assert record.item is not None
    assert (record.item.kind, record.item.state) == ("text_message", "completed")
    assert record.item.id == item_id("run-t", "text_message", "run-t:input:1")
    assert fold.items[record.item.id].content == {
        "messageId": "run-t:input:1",
        "role": "user",
        "metadata": {"display": True},
        "text": "Say hello",
        "input_source": "user",
        "input_group": "input-1",
    }


def test_restore_refuses_a_continuation_of_another_policy() -> None:
    fold = DisplayFold("run-t", retain_content=True)
    fold.fold([text("START", "a", BASE_TS)])
    snapshot = DisplaySnapshot.model_validate_json(fold.export().model_dump_json())
    assert snapshot.continuation.retain_content is True
    assert DisplayFold.restore(snapshot).export() == fold.export()
    with pytest.raises(ConfigError, match="retain_content=True"):
        DisplayFold("run-t", snapshot.items, retain_content=False, continuation=snapshot.continuation)
    with pytest.raises(ConfigError, match="attempt 0"):
        DisplayFold("run-t", attempt=1, retain_content=True, continuation=snapshot.continuation)
    with pytest.raises(ConfigError, match="run_id 'run-t'"):
        DisplayFold("run-u", retain_content=True, continuation=snapshot.continuation)


def test_events_without_timestamp_use_the_epoch_not_the_clock() -> None:
    fold = DisplayFold("run-t")
    fold.fold([{"type": "TEXT_MESSAGE_START", "messageId": "m", "role": "assistant"}])
    [item] = fold.export().items
    assert item.started_at.timestamp() == 0


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"timestamp": 1}, "type"),
        ({"type": "TEXT_MESSAGE_START", "timestamp": 1}, "messageId"),
        ({"type": "TOOL_CALL_ARGS", "timestamp": 1, "toolCallId": "c"}, "delta"),
    ],
)
def test_malformed_event_refuses_the_whole_batch(event: dict[str, object], field: str) -> None:
    fold = DisplayFold("run-t")
    with pytest.raises(AguiObservationError, match=field):
        fold.fold([text("START", "ok", BASE_TS), event])
    assert not fold.items and fold.position.sequence == 0


def test_a_part_kind_that_is_no_text_makes_an_observation_not_a_crash() -> None:
    fold = DisplayFold("run-t")
    event = custom("a13n.pydantic_ai.part_start", {"part": {"part_kind": ["builtin-tool-call"]}}, BASE_TS)
    records = fold.fold([event])
    assert records[0].item is not None
    assert records[0].item.kind == "observation"
    assert fold.export().items[0].content["value"] == event["value"]
