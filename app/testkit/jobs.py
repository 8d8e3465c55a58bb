"""Following a job through the HTTP API until it ends."""

from __future__ import annotations

import time


def wait_finished(client, job_id: str, timeout_s: float = 240, prefix: str = "") -> dict:
    """The job's status once it is neither queued nor running (long-polled, 5 s at a time)."""
    deadline = time.monotonic() + timeout_s
    status: dict = {}
    while time.monotonic() < deadline:
        status = client.get(f"{prefix}/v1/jobs/{job_id}", params={"wait": 5}).json()
        if status["status"] not in ("queued", "running"):
            return status
    raise AssertionError(f"job {job_id} not finished in {timeout_s} s: {status}")
