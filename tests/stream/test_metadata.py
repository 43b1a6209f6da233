"""The offset-commit metadata carrying replay_from."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.stream import decode_replay_metadata, encode_replay_metadata


def test_encoding_is_small_compact_json() -> None:
    assert encode_replay_metadata(42) == '{"v":1,"replay_from":42}'


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_round_trip(offset: int) -> None:
    assert decode_replay_metadata(encode_replay_metadata(offset)) == offset


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3"])
def test_encoding_refuses_what_is_not_an_offset(bad: object) -> None:
    with pytest.raises(ValueError, match="replay_from"):
        encode_replay_metadata(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [None, "", " ", "x", "null", "[]", "{}", '{"replay_from":3}', '{"v":2,"replay_from":3}',
     '{"v":true,"replay_from":3}', '{"v":"1","replay_from":3}', '{"v":1}', '{"v":1,"replay_from":-1}',
     '{"v":1,"replay_from":1.0}', '{"v":1,"replay_from":true}', '{"v":1,"replay_from":"3"}',
     '{"v":1,"replay_from":99999999999999999999999}', "\ud800"],
)
def test_missing_foreign_or_malformed_metadata_decodes_to_none(text: str | None) -> None:
    assert decode_replay_metadata(text) is None


@given(st.one_of(st.none(), st.text(), st.binary().map(lambda b: b.decode("latin-1"))))
def test_decoding_never_raises(text: str | None) -> None:
    result = decode_replay_metadata(text)
    assert result is None or (isinstance(result, int) and result >= 0)
