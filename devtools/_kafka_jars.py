"""Resolves Apache Kafka's broker jars with Maven into a per-version cache outside the work tree.

The cache directory `<cache>/kafka-<version>/libs` is complete exactly when its stamp file holds the digest
of the pom and version that produced it; anything else is resolved again under a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from worker.errors import ConfigError, KafkaWorkerError

__all__ = ["KAFKA_VERSION", "LOG_CONFIG", "POM", "cache_root", "kafka_home", "resolve_jars", "resolve_maven_libs"]

KAFKA_VERSION = "4.1.1"
"""The Kafka release the project tests against (Maven `org.apache.kafka:kafka_2.13`)."""

POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
LOG_CONFIG = Path(__file__).resolve().parent / "kafka" / "log4j2.properties"


def cache_root() -> Path:
    """The tools cache: `$HARNESS_WORKER_CACHE`, else `~/.cache/harness-agui-worker`."""
    configured = os.environ.get("HARNESS_WORKER_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "harness-agui-worker"


def kafka_home(version: str = KAFKA_VERSION) -> Path:
    """The cache directory of one Kafka version; its `libs/` holds the class path."""
    return cache_root() / f"kafka-{version}"


def _digest(pom: Path, version: str) -> str:
    return hashlib.sha256(pom.read_bytes() + b"\0" + version.encode()).hexdigest()


def _is_complete(home: Path, digest: str) -> bool:
    stamp = home / "libs.sha256"
    return stamp.is_file() and stamp.read_text().strip() == digest and (home / "libs").is_dir()


def resolve_jars(version: str = KAFKA_VERSION, *, verbose: bool = False) -> Path:
    """Return the `libs` directory of the Kafka broker `version`, running Maven once if missing or stale."""
    return resolve_maven_libs(POM, "kafka_2.13", kafka_home(version), version, verbose=verbose)


def resolve_maven_libs(pom: Path, artifact: str, home: Path, version: str, *, verbose: bool = False) -> Path:
    """Copy the runtime class path of `pom` (which depends on `org.apache.kafka:<artifact>:<version>`) into
    `home/libs`, under a file lock; the stamp of pom and version makes a complete cache reusable."""
    if not version or "/" in version or version.startswith("."):
        raise ConfigError(f"Kafka version must be a plain release number, got {version!r}")
    digest = _digest(pom, version)
    if _is_complete(home, digest):
        return home / "libs"
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaWorkerError(f"cannot resolve org.apache.kafka:{artifact}: `mvn` is not on PATH (install Maven)")
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_complete(home, digest):
            return home / "libs"
        staging = home / f"libs.staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        command = [
            mvn, "-B", "-q", "-Dstyle.color=never", "-f", str(pom), f"-Dkafka.version={version}",
            "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={staging}",
        ]  # fmt: skip
        began = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        expected = staging / f"{artifact}-{version}.jar"
        if done.returncode != 0 or not expected.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-30:])
            shutil.rmtree(staging, ignore_errors=True)
            raise KafkaWorkerError(
                f"Maven could not resolve org.apache.kafka:{artifact}:{version} "
                f"(exit {done.returncode}, {expected.name} present: {expected.is_file()}):\n{tail}"
            )
        shutil.rmtree(home / "libs", ignore_errors=True)
        staging.rename(home / "libs")
        (home / "libs.sha256").write_text(digest + "\n")
        if verbose:
            count = len(list((home / "libs").glob("*.jar")))
            print(f"resolved {artifact} {version}: {count} jars in {time.monotonic() - began:.1f} s -> {home}/libs",
                  file=sys.stderr)
    return home / "libs"
