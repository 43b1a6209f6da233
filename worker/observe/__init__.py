"""Harness → AG-UI observers, their continuation, and the output encoding (conversion-spec §1b, §1c)."""

from worker.errors import AguiObservationError
from worker.observe._content import execution_value, public_tool_result_content, public_value, tool_result_content
from worker.observe._continuation import CursorModel, ObserverContinuation, StateModel
from worker.observe._encode import ORJSON_AGREES, encode_event, encode_event_data
from worker.observe._fragments import FRAGMENT_EVENT_NAME, fragment_custom_event
from worker.observe._json import has_float, loads_exact
from worker.observe._observer import HarnessAguiObserver
from worker.observe._processor import AguiEventProcessor, validate_replacement
from worker.observe._stream import HarnessAguiStreamObserver, announced_child

__all__ = [
    "FRAGMENT_EVENT_NAME",
    "ORJSON_AGREES",
    "AguiEventProcessor",
    "AguiObservationError",
    "CursorModel",
    "HarnessAguiObserver",
    "HarnessAguiStreamObserver",
    "ObserverContinuation",
    "StateModel",
    "announced_child",
    "encode_event",
    "encode_event_data",
    "execution_value",
    "fragment_custom_event",
    "has_float",
    "loads_exact",
    "public_tool_result_content",
    "public_value",
    "tool_result_content",
    "validate_replacement",
]
