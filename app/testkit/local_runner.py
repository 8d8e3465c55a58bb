"""`python -m app` as `make run` starts it, for tests that need the whole local runner (its own Ray,
its flags, its Ctrl-C): started in its own process group, waited for until it says it is ready, its
output kept draining (a full pipe would stall the service), and stopped as Ctrl-C stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

ROOT = Path(__file__).resolve().parents[2]
READY = "OCR service ready"


@dataclass
class LocalRunner:
    process: subprocess.Popen
    printed: str  # its output up to the ready line (and the lines asked for after it)


def start_local_runner(arguments: list[str], env: Optional[dict] = None, after_ready_lines: int = 0) -> LocalRunner:
    process = subprocess.Popen([sys.executable, "-m", "app", *arguments], cwd=ROOT,
                               env=env if env is not None else {**os.environ, "PYTHONUNBUFFERED": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    printed = []
    for line in process.stdout:
        printed.append(line)
        if READY in line:
            break
    else:
        process.wait(timeout=30)
        raise RuntimeError(f"python -m app exited ({process.returncode}) before it was ready:\n"
                           + "".join(printed[-30:]))
    printed += [next(process.stdout) for _ in range(after_ready_lines)]
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
    return LocalRunner(process, "".join(printed))


def ctrl_c(runner: LocalRunner, timeout_s: float = 60) -> float:
    """What Ctrl-C does (SIGINT to the whole foreground group); the seconds until the runner exited."""
    started = time.monotonic()
    os.killpg(runner.process.pid, signal.SIGINT)
    runner.process.wait(timeout=timeout_s)
    return time.monotonic() - started


def kill(runner: LocalRunner) -> None:
    if runner.process.poll() is None:
        os.killpg(runner.process.pid, signal.SIGKILL)
        runner.process.wait(timeout=30)


@contextmanager
def local_runner(arguments: list[str], env: Optional[dict] = None, after_ready_lines: int = 0) -> Iterator[LocalRunner]:
    runner = start_local_runner(arguments, env, after_ready_lines)
    try:
        yield runner
    finally:
        if runner.process.poll() is None:
            try:
                ctrl_c(runner)
            except subprocess.TimeoutExpired:
                kill(runner)
