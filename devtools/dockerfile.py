"""The Dockerfile as data: its instructions and stages, what `.dockerignore` keeps out of the build context, and a
copy of exactly the files the builder stage's COPY lines bring in, for building outside Docker what it builds.
"""

from __future__ import annotations

import fnmatch
import re
import shutil
from pathlib import Path

__all__ = ["DOCKERFILE", "copy_build_context", "ignored", "instructions", "stages"]

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each stage, the builder first; ARGs before the first FROM belong to none."""
    result: list[list[tuple[str, str]]] = []
    for ins in instructions():
        if ins[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def ignored(path: str) -> bool:
    """.dockerignore semantics for the patterns this repository uses: the last matching line wins."""
    verdict = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line.lstrip("!").rstrip("/")
        parts = Path(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(p, pattern) for p in prefixes):
            verdict = not negate
    return verdict


def copy_build_context(dest: Path) -> Path:
    """Copy into `dest` what the builder stage's COPY lines copy from the context, leaving out what
    `.dockerignore` keeps out, so that a file the image would miss is missing here too."""
    for word, args in stages()[0]:
        if word != "COPY" or args.startswith("--from="):  # from another image, not the context
            continue
        *sources, target = args.split()
        for source in sources:
            base = dest / (source if target in ("./", ".") else target.removeprefix("./"))
            src = ROOT / source
            files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
            for file in files:
                relative = file.relative_to(ROOT).as_posix()
                if ignored(relative):
                    continue
                out = base / file.relative_to(src) if src.is_dir() else base
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, out)
    return dest
