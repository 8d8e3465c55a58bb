"""Ending what a test started: a process group, and Ray processes that left it."""

from __future__ import annotations

import os
import signal
import subprocess


def kill_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=20)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def kill_leftovers(temp_dir: str) -> None:
    """Ray processes that left the group still name the cluster's temp dir in their command line."""
    found = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True).stdout.split()
    for pid in found:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def ray_processes() -> dict[int, str]:
    """Processes of any Ray instance, and our decoder workers, by pid: what must not outlive a runner."""
    from pathlib import Path

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
