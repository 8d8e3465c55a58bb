"""Ctrl-C on `make run` (python -m app) stops everything within 10 s and leaves no Ray process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, png_bytes, render_text_page

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.own_cluster
STOP_WITHIN_S = 10


def ray_processes() -> dict[int, str]:
    """Processes of any Ray instance, and our decoder workers, by pid: what must not outlive the runner."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "/ray/" in cmdline or cmdline.startswith("ray::") or "app.sandbox.worker" in cmdline:
            found[int(entry.name)] = cmdline[:160]
    return found


def test_ctrl_c_stops_the_local_runner_within_10_s_and_leaves_no_ray_process():
    before = ray_processes()
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    runner = subprocess.Popen([sys.executable, "-m", "app", "--port", str(port), "--num-cpus", "2",
                               "--metrics-port", str(free_port()), "--dashboard-port", str(free_port())], cwd=ROOT,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        for line in runner.stdout:  # the runner prints one line when it is ready
            if "OCR service ready" in line:
                break
        else:
            pytest.fail("the runner exited before it was ready")
        page = png_bytes(render_text_page(["Stop me 42"]))
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/ocr", content=page, headers={"content-type": "image/png"},
                            timeout=120)
        assert answer.status_code == 200, answer.text
        started = time.monotonic()
        os.killpg(runner.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        runner.wait(timeout=60)
        stopped_s = time.monotonic() - started
        print(f"python -m app stopped {stopped_s:.1f}s after Ctrl-C")
        assert stopped_s < STOP_WITHIN_S
        deadline = time.monotonic() + 5
        while (left := set(ray_processes()) - set(before)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, {pid: ray_processes().get(pid) for pid in left}
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
        for pid in set(ray_processes()) - set(before):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
