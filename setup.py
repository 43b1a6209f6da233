"""Packaging hook: the native per-record path, the Rust crate in `native/`, built into the extension module
`worker._native_core` (one abi3 module for CPython 3.11 and later) when a Rust tool chain is there; without one, the
pure-Python build, whose sources are the reference and the fallback.

HARNESS_AGUI_NATIVE decides what a missing or failing tool chain means: unset, the build goes on without the module;
`1` (the image, scripts/test.sh, devtools/wheel.py), the build fails; `0`, the module is not built at all.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from setuptools import setup

ROOT = Path(__file__).resolve().parent
NATIVE = ROOT / "native"
# What the crate is built from: its manifest, lock file and sources (not a build's target directory).
NATIVE_INPUTS = ("Cargo.toml", "Cargo.lock", "src")


def native_digest(root: Path = NATIVE) -> str:
    """A SHA-256 over the crate's inputs (relative path and bytes of each file, in path order): the module embeds the
    one it was built from, so a test run can tell an installation built from other sources."""
    digest = hashlib.sha256()
    files = sorted(p for name in NATIVE_INPUTS for p in ([root / name] if (root / name).is_file()
                                                         else (root / name).rglob("*")) if p.is_file())
    for file in files:
        digest.update(f"\0{file.relative_to(root).as_posix()}\0".encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _native() -> dict[str, Any]:
    choice = os.environ.get("HARNESS_AGUI_NATIVE", "")
    if choice not in ("", "0", "1"):
        raise SystemExit(f"setup.py: HARNESS_AGUI_NATIVE must be 0, 1 or unset, got {choice!r}")
    if choice == "0":
        return {}
    if not (NATIVE / "Cargo.toml").is_file():
        if choice == "1":
            raise SystemExit("setup.py: HARNESS_AGUI_NATIVE=1 but native/Cargo.toml is not in the build context")
        return {}
    try:
        from setuptools_rust import Binding, RustExtension  # noqa: PLC0415  (only a native build needs it)
    except ImportError as exc:
        if choice == "1":
            raise SystemExit("setup.py: HARNESS_AGUI_NATIVE=1 needs setuptools-rust (requirements-build.lock)") from exc
        return {}
    extension = RustExtension(
        "worker._native_core", path=str(NATIVE / "Cargo.toml"), binding=Binding.PyO3, debug=False,
        optional=choice != "1", args=["--locked"], env={**os.environ, "HARNESS_AGUI_NATIVE_DIGEST": native_digest()},
    )  # fmt: skip
    return {"rust_extensions": [extension], "options": {"bdist_wheel": {"py_limited_api": "cp311"}}}


if __name__ == "__main__":
    setup(**_native())
