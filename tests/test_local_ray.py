"""app/local_ray: what is left of a local Ray instance after ray.shutdown() is found and ended,
also a process that no longer hangs below the runner (its parent gone, as an agent's raylet is)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from app.local_ray import descendants, end_leftovers, processes_of_this_instance

SLEEPER = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]


def orphan(env: dict) -> int:
    """A process whose parent has exited (it is reparented away from us), running SLEEPER.
    Its output is not the launcher's pipes, or reading the launcher's answer would wait for it."""
    quiet = "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True"
    launcher = subprocess.run([sys.executable, "-c", f"import subprocess; print(subprocess.Popen({SLEEPER!r}, {quiet}).pid)"],
                              env={**os.environ, **env}, capture_output=True, text=True, check=True)
    return int(launcher.stdout)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_leftovers_are_found_by_tree_and_by_ray_marks_and_ended_even_when_they_ignore_sigterm():
    node_id = "f" * 56
    child = subprocess.Popen(SLEEPER)  # below us: found through the tree
    agent = orphan({"RAY_NODE_ID": node_id})  # reparented: found through its mark only
    stranger = orphan({"RAY_NODE_ID": "0" * 56})  # another instance's: left alone
    try:
        time.sleep(0.5)
        assert child.pid in descendants(os.getpid()) and agent not in descendants(os.getpid())
        found = processes_of_this_instance(os.getpid(), node_id)
        assert {child.pid, agent} <= found and stranger not in found
        started = time.monotonic()
        end_leftovers(os.getpid(), node_id, set(), grace_s=0.5)  # SIGTERM is ignored: SIGKILL after 0.5 s
        child.wait(timeout=5)
        deadline = time.monotonic() + 5
        while alive(agent) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(agent) and child.returncode == -9
        assert time.monotonic() - started < 5
        assert alive(stranger)
    finally:
        for pid in (child.pid, agent, stranger):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
