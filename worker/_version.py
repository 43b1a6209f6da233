"""The installed package's version, as `python -m worker --version` and `harness_agui_worker_info` show it."""

from __future__ import annotations

from importlib import metadata

__all__ = ["package_version"]


def package_version() -> str:
    """The version of the installed `harness-agui-worker` distribution; `0+unknown` when it is not installed."""
    try:
        return metadata.version("harness-agui-worker")
    except metadata.PackageNotFoundError:
        return "0+unknown"
