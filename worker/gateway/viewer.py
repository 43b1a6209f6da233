"""The viewer page: one self-contained HTML document (no build step, no CDN) that follows a run with EventSource."""

from __future__ import annotations

__all__ = ["VIEWER_PAGE"]

VIEWER_PAGE = "<!doctype html><title>run viewer</title><p>viewer</p>"
