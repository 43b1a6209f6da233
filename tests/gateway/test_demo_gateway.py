"""The demo starts the gateway beside the worker and prints a viewer URL that serves the page while it runs."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VIEWER = re.compile(r"watch a run in a browser: (http://127\.0\.0\.1:\d+/view/run-[0-9a-f]{32})")


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_demo_prints_a_viewer_url_that_serves_the_run() -> None:
    group = f"demo-gateway-{uuid.uuid4().hex[:12]}"
    demo = subprocess.Popen(["bash", "scripts/demo.sh", "--duration", "45", "--group-id", group], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    assert demo.stderr is not None
    said: list[str] = []
    url = None
    deadline = time.monotonic() + 200
    while url is None and time.monotonic() < deadline:
        line = demo.stderr.readline()
        if not line:
            break
        said.append(line)
        found = VIEWER.search(line)
        url = found.group(1) if found else None
    try:
        assert url is not None, "".join(said[-30:])
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200 and "EventSource" in page.read().decode()
        events = url.replace("/view/", "/runs/") + "/events"
        with urllib.request.urlopen(events, timeout=10) as stream:
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            assert stream.read(4) == b"id: "
    finally:
        rest = demo.communicate(timeout=200)[1]
    assert demo.returncode == 0, "".join(said[-20:]) + rest[-3000:]
    assert "gateway pid" in "".join(said)
