"""The project's native wheel, built as the image's builder stage builds it: the files its COPY lines bring in,
copied to a fresh directory, then `pip wheel` with HARNESS_AGUI_NATIVE=1 against this Python's packages and the Rust
tool chain on the PATH, cargo's target directory kept in the tools cache (`CARGO_TARGET_DIR`, default
`~/.cache/harness-agui-worker/cargo-target`), so a rebuild compiles only what changed.

    python -m devtools.wheel    # prints the path of the wheel

The latest wheel is kept in this environment (`<sys.prefix>/harness-agui-wheels/<key>/`), the key a digest of the
copied files, the Python, the Rust compiler and the installed versions of the locked packages: the same inputs reuse
it, as Docker reuses a cached layer.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from devtools._kafka_jars import cache_root
from devtools.dockerfile import copy_build_context
from devtools.lockfile import parse_lock

__all__ = ["PIP_WHEEL", "WHEELS", "build", "cargo_target", "main"]

PIP_WHEEL = ("pip", "wheel", "--no-cache-dir", "--no-deps", "--no-build-isolation")
"""The builder stage's `pip wheel` options (tests/deploy/test_dockerfile.py holds the Dockerfile to them)."""
WHEELS = Path(sys.prefix) / "harness-agui-wheels"


def _installed(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def cargo_target() -> Path:
    """Cargo's target directory for the project's builds: `$CARGO_TARGET_DIR`, else `cargo-target` in the tools
    cache."""
    configured = os.environ.get("CARGO_TARGET_DIR")
    return Path(configured) if configured else cache_root() / "cargo-target"


def _rustc() -> str:
    try:
        return subprocess.run(["rustc", "-vV"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"devtools.wheel: the native build needs a Rust tool chain on the PATH ({exc})") from None


def _key(context: Path) -> str:
    """A digest of what decides the wheel's content: the context's files, the Python, the Rust compiler, and the
    installed versions of the packages the context's lock files name (the build's tool chain)."""
    digest = hashlib.sha256(sys.version.encode())
    digest.update(_rustc().encode())
    for file in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(f"\0{file.relative_to(context).as_posix()}\0".encode())
        digest.update(file.read_bytes())
        if file.parent == context and file.suffix == ".lock":
            for name in sorted(parse_lock(file.read_text())):
                digest.update(f"\0{name}=={_installed(name)}".encode())
    return digest.hexdigest()[:24]


def build() -> Path:
    """The native wheel of the current sources, built unless WHEELS holds one built from the same inputs;
    SystemExit with the build's output when it fails."""
    with tempfile.TemporaryDirectory(prefix="harness-agui-wheel-") as tmp:
        context = copy_build_context(Path(tmp) / "context")
        kept = WHEELS / _key(context)
        found = sorted(kept.glob("*.whl"))
        if found:
            return found[0]
        staging = Path(tmp) / "wheels"
        # As in the builder stage, the build sees this environment's packages and the context, no other path.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
        done = subprocess.run(
            [sys.executable, "-m", *PIP_WHEEL, "--disable-pip-version-check", "--wheel-dir", str(staging), "."],
            cwd=context, env={**env, "HARNESS_AGUI_NATIVE": "1", "CARGO_TARGET_DIR": str(cargo_target())},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"{done.stdout[-6000:]}{done.stderr[-6000:]}\ndevtools.wheel: pip wheel failed")
        [wheel] = staging.glob("*.whl")
        for old in WHEELS.glob("*/*.whl"):  # one wheel kept: the latest
            old.unlink()
            old.parent.rmdir()
        kept.mkdir(parents=True)
        return Path(shutil.move(wheel, kept / wheel.name))


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m devtools.wheel", description=__doc__.split("\n")[0]).parse_args(argv)
    print(build())
    return 0


if __name__ == "__main__":
    sys.exit(main())
