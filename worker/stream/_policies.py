"""What a partition does when a run's history has a gap, or when it holds as many open runs as it may: the
policies `run`'s settings choose (`--gap-policy`, `--open-stream-policy`)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["GapPolicy", "OpenStreamPolicy"]


class GapPolicy(StrEnum):
    """What a sequence gap in a run does: close the run with RUN_ERROR, or halt the partition."""

    CLOSE_RUN = "close-run"
    HALT = "halt"


class OpenStreamPolicy(StrEnum):
    """What happens when a partition already holds `max_open_streams` open streams and a new one begins."""

    DEAD_LETTER = "dead-letter"
    HALT = "halt"
