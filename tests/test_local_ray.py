"""app/local_ray: what is left of a local Ray instance after ray.shutdown() is found and ended,
also a process that no longer hangs below the runner (its parent gone, as an agent's raylet is).

The runner here is a stand-in process, never this one: below pytest runs the session's own
Ray instance, which the search must not reach."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from app.serve.local_ray import descendants, end_leftovers, processes_of_this_instance

SLEEPER = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]
QUIET = "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL"


def runner_with_a_child() -> tuple[subprocess.Popen, int]:
    """A stand-in for python -m app (it ignores SIGTERM too) with one process below it."""
    runner = subprocess.Popen([sys.executable, "-c", "import signal, subprocess, time; "
                               "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                               f"print(subprocess.Popen({SLEEPER!r}, {QUIET}).pid, flush=True); time.sleep(120)"],
                              stdout=subprocess.PIPE, text=True)
    return runner, int(runner.stdout.readline())


def orphan(env: dict) -> int:
    """A process whose parent has exited (it is reparented away from us), running SLEEPER.
    Its output is not the launcher's pipes, or reading the launcher's answer would wait for it."""
    launcher = subprocess.run([sys.executable, "-c", "import subprocess; "
                               f"print(subprocess.Popen({SLEEPER!r}, {QUIET}, start_new_session=True).pid)"],
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
    runner, child = runner_with_a_child()  # child: below the runner, found through the tree
    agent = orphan({"RAY_NODE_ID": node_id})  # reparented: found through its mark only
    stranger = orphan({"RAY_NODE_ID": "0" * 56})  # another instance's: left alone
    try:
        assert child in descendants(runner.pid) and agent not in descendants(runner.pid)
        found = processes_of_this_instance(runner.pid, node_id)
        assert {child, agent} <= found and stranger not in found and runner.pid not in found
        started = time.monotonic()
        end_leftovers(runner.pid, node_id, set(), grace_s=0.5)  # SIGTERM is ignored: SIGKILL after 0.5 s
        deadline = time.monotonic() + 5
        while (alive(agent) or alive(child)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(agent) and not alive(child)
        assert time.monotonic() - started < 5
        assert alive(stranger) and runner.poll() is None  # the runner ends itself; others are not ours
    finally:
        runner.kill()
        runner.wait()
        for pid in (child, agent, stranger):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
