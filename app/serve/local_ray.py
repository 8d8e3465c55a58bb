"""The processes of the Ray instance that `python -m app` starts, so that Ctrl-C leaves none behind.

ray.shutdown() ends the raylet, the GCS and the workers it started, but not always all of
them at once: the raylet's agents (dashboard/metrics, runtime-env) notice their parent is
gone only seconds later, and a raylet that is being stopped can still start a fresh agent,
which then belongs to nobody (its parent becomes pid 1). Such a process is found two ways:
below this process in the tree, or by the marks Ray puts in its environment, RAY_NODE_ID
(agents) and RAY_RAYLET_PID (workers, and the decoder workers they start). Linux only:
elsewhere nothing is found and ray.shutdown() alone stays in charge.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def processes_of_this_instance(root: int, node_id: str) -> set[int]:
    """Processes below `root` and processes Ray marked as this node's (or its raylet's)."""
    tree = descendants(root)
    marks = {f"RAY_NODE_ID={node_id}".encode()} | {f"RAY_RAYLET_PID={pid}".encode() for pid in tree}
    return tree | {pid for pid in _pids() if pid != root and marks & _environment(pid)}


def end_leftovers(root: int, node_id: str, known: set[int], grace_s: float = 2.0) -> None:
    """After ray.shutdown(): SIGTERM what is left of the instance, SIGKILL it after `grace_s`.
    Looked for again once that is done, since the raylet (ended in the first pass) can have
    started a process meanwhile; a pass that finds nothing alive ends the search."""
    for _ in range(3):
        left = {pid for pid in known | processes_of_this_instance(root, node_id) if _signal(pid, 0)}
        if not left:
            return
        end_processes(left, grace_s)
        known = set()


def descendants(root: int) -> set[int]:
    """Every process below `root`, from /proc."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        parent = _stat_field(pid, 1)
        if parent is not None:
            children.setdefault(int(parent), []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def end_processes(pids: set[int], grace_s: float = 2.0) -> None:
    """SIGTERM what is still alive, then SIGKILL what is left after `grace_s`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = {pid for pid in pids if _signal(pid, sig)}
        deadline = time.monotonic() + grace_s
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = {pid for pid in alive if _signal(pid, 0)}
        if not alive:
            return
        pids = alive


def _pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def _stat_field(pid: int, index: int):
    """Field `index` after the command name in /proc/PID/stat (0: state, 1: parent), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[index]
    except (OSError, IndexError):
        return None


def _environment(pid: int) -> set[bytes]:
    try:
        return set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
    except OSError:  # gone, or not ours to read
        return set()


def _signal(pid: int, sig: int) -> bool:
    """Send `sig`; False when the process is gone or a zombie (it has ended, only unreaped)."""
    if _stat_field(pid, 0) in (None, "Z"):
        return False
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False
