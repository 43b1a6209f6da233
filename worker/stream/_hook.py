"""The processor hook: a user's AguiEventProcessor named `module:attribute`, loaded once and held to the contract.

The worker's observers call the processor through `encodable`, so that a replacement event the output could not
encode fails inside `observe`, where a failure changes nothing, rather than after the stream moved on.
"""

from __future__ import annotations

import importlib
from typing import Any

from ag_ui.core import BaseEvent

from worker.errors import ConfigError
from worker.observe import AguiEventProcessor, encode_event, validate_replacement

__all__ = ["encodable", "load_processor"]


def load_processor(spec: str) -> AguiEventProcessor:
    """Import `module:attribute` (the attribute may be dotted) and return it; ConfigError names what is wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"processor {spec!r} must be written module:attribute")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises while importing: the worker cannot start
        reason = " ".join(str(exc).split())
        raise ConfigError(f"processor {spec!r} cannot be imported: {type(exc).__name__}: {reason}") from None
    for name in attribute.split("."):
        if not hasattr(target, name):
            raise ConfigError(f"processor {spec!r}: {module_name} has no attribute {attribute}")
        target = getattr(target, name)
    if not callable(target):
        raise ConfigError(f"processor {spec!r} is a {type(target).__name__}, not a callable")
    processor: AguiEventProcessor = target
    return processor


def encodable(processor: AguiEventProcessor | str) -> AguiEventProcessor:
    """`processor` (or the one `module:attribute` names), each replacement validated against the processor
    contract and encoded once, so that an invalid or unencodable replacement raises inside `observe`, which
    is atomic. One named by its spec pickles as that spec: observers built by replay helpers cross processes."""
    if not isinstance(processor, str):
        return _Encodable(processor, None)
    loaded = _BY_SPEC.get(processor)
    if loaded is None:
        loaded = _BY_SPEC[processor] = _Encodable(load_processor(processor), processor)
    return loaded


class _Encodable:
    __slots__ = ("_processor", "_spec")

    def __init__(self, processor: AguiEventProcessor, spec: str | None) -> None:
        self._processor = processor
        self._spec = spec

    def __call__(self, item: Any, event: BaseEvent) -> BaseEvent | None:
        # The user's processor gets its own copy: `event` must stay the original the replacement is checked against.
        candidate = self._processor(item, event.model_copy(deep=True))
        if candidate is None:
            return None
        replacement = validate_replacement(event, candidate)
        encode_event(replacement)
        return replacement

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self._spec is not None:
            return encodable, (self._spec,)
        return _Encodable, (self._processor, None)


_BY_SPEC: dict[str, _Encodable] = {}
