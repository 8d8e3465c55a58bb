"""One decoder process and its pipes, from the parent's side: frames out, frames back under a deadline.

The pool (pool.py) owns several and decides what a timeout or a death means for the document.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from typing import Optional

from app.sandbox.protocol import PREFIX, ProtocolError, SharedPageBuffer, decode_header, encode_frame, parse_header

WORKER_START_TIMEOUT_S = 60.0
# What a decoder inherits of the replica's environment: nothing else. The replica holds the
# Ray cluster token (or its file's path), the store's password file and API keys; a decoder
# parses strangers' files and needs none of it. Locale and temp dir only; PYTHONPATH is set.
ENVIRONMENT_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "LD_LIBRARY_PATH")
# CPU seconds a decoder may use in its whole life (RLIMIT_CPU). A page stuck past
# page_render_timeout_s is killed by the parent long before; this ends a worker whose parent
# cannot (SIGXCPU at the soft limit, SIGKILL at the hard one). The pool replaces a worker that
# has used CPU_RETIRE_SHARE of it, so that a healthy worker never meets it mid-document.
CPU_LIMIT_S = 3600
CPU_RETIRE_SHARE = 0.8
_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def worker_environment(parent: Optional[dict] = None) -> dict:
    parent = os.environ if parent is None else parent
    env = {name: parent[name] for name in ENVIRONMENT_ALLOWLIST if name in parent}
    path = os.pathsep.join(filter(None, (_PROJECT_ROOT, parent.get("PYTHONPATH"))))
    env.update(PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=path)
    return env


def spawn_decoder(command: list[str], pass_fds: tuple = ()) -> subprocess.Popen:
    """A decoder process: pipes, the scrubbed environment, and a session (process group) of its own, so
    that killing it kills all it may have started."""
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, close_fds=True,
                            pass_fds=pass_fds, env=worker_environment(), cwd=_PROJECT_ROOT, start_new_session=True)


class DecoderTimeout(Exception):
    pass


class DecoderDied(Exception):
    def __init__(self, returncode: Optional[int]):
        super().__init__(f"decoder exited with {returncode}")
        self.returncode = returncode


class DecoderProcess:
    """One worker process and its pipes. Not thread-safe: one exchange at a time."""

    def __init__(self, command: list[str], max_blob_bytes: int = 1 << 30):
        self.max_blob_bytes = max_blob_bytes  # a frame's blob is read into memory allocated up front
        self.pages = SharedPageBuffer.create(max_blob_bytes)  # where the worker leaves page pixels
        shared = [str(self.pages.fd)] if self.pages else []
        self.proc = spawn_decoder(command + shared, pass_fds=(self.pages.fd,) if self.pages else ())
        self.confinement: Optional[dict] = None  # what the worker said it gave up (app/sandbox/confine.py)
        self.ready = False
        self.busy = False  # inside an exchange: its state is unknown if the exchange did not finish
        self.document_open = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_seconds(self) -> float:
        """User and system CPU time the worker has used (Linux /proc), 0 where unknown."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exchange(self, header: dict, blob: bytes, timeout_s: float,
                 max_answer_bytes: Optional[int] = None) -> tuple[dict, bytes]:
        """Send one frame and wait for the answer, at most timeout_s (the worker's start not counted);
        an answer's blob may be up to max_answer_bytes (max_blob_bytes when None)."""
        self.busy = True
        self.wait_ready()
        self.send(header, blob)
        answer = self._receive(timeout_s, max_answer_bytes or self.max_blob_bytes)
        self.busy = False
        return answer

    def wait_ready(self) -> None:
        """Its first frame, `ready`, with what it gave up (app/sandbox/confine.py); once."""
        if self.ready:
            return
        first, _ = self._receive(WORKER_START_TIMEOUT_S)
        if first.get("type") != "ready":
            raise ProtocolError(f"worker said {first.get('type')} before ready")
        self.confinement = first.get("confinement") if isinstance(first.get("confinement"), dict) else {}
        self.ready = True

    def send(self, header: dict, blob: bytes = b"") -> None:
        try:
            self.proc.stdin.write(encode_frame(header, blob))
        except (BrokenPipeError, OSError):
            raise DecoderDied(self.proc.wait()) from None

    def _receive(self, timeout_s: float, max_blob_bytes: Optional[int] = None) -> tuple[dict, bytes]:
        deadline = time.monotonic() + timeout_s
        header_len, blob_len = decode_header(self._read(PREFIX.size, deadline))
        if blob_len > (max_blob_bytes or self.max_blob_bytes):
            raise ProtocolError(f"frame blob of {blob_len} bytes")
        header = parse_header(self._read(header_len, deadline))
        blob = self._read(blob_len, deadline)
        if "shared_bytes" in header:  # a page's pixels, left in the shared buffer
            if self.pages is None:
                raise ProtocolError("a shared page from a worker given no buffer")
            blob = self.pages.read(header["shared_bytes"])
        return header, blob

    def _read(self, size: int, deadline: float) -> bytearray:
        """Exactly `size` bytes, read straight into one buffer (a page is megabytes: no joins)."""
        fd = self.proc.stdout.fileno()
        buffer = bytearray(size)
        view, got = memoryview(buffer), 0
        while got < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise DecoderTimeout()
            count = os.readv(fd, [view[got:]])
            if not count:
                raise DecoderDied(self.proc.wait())
            got += count
        return buffer

    def kill(self) -> None:
        """The worker's whole process group (its own session): anything it started goes with it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.alive():
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        if self.pages is not None:
            self.pages.close()
            self.pages = None
