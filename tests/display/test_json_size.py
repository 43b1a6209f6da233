"""The display bounds' measure: fast paths give exactly the stdlib's compact ASCII-escaped length."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.display import json_size
from worker.display.bounding import json_size_exceeds

_TEXT = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from("\x00\x1f\x7f\u2028\U0001f600é\"\\/"))
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_TEXT, inner, max_size=5),
    max_leaves=30,
)


def _reference(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")))


@settings(max_examples=400, deadline=None)
@given(value=_JSON)
def test_json_size_is_the_stdlib_length(value: object) -> None:
    assert json_size(value) == _reference(value)


@settings(max_examples=300, deadline=None)
@given(value=_JSON, limit=st.integers(min_value=0, max_value=400))
def test_json_size_exceeds_agrees_with_the_length(value: object, limit: int) -> None:
    assert json_size_exceeds(value, limit) == (_reference(value) > limit)
