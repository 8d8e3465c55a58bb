"""One decoder process and its pipes, from the parent's side: frames out, frames back under a deadline.

The pool (pool.py) owns several and decides what a timeout or a death means for the document.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import Optional

from app.sandbox.protocol import PREFIX, ProtocolError, SharedPageBuffer, decode_header, encode_frame, parse_header

WORKER_START_TIMEOUT_S = 60.0


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
        self.proc = subprocess.Popen(
            command + shared, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, close_fds=True,
            pass_fds=(self.pages.fd,) if self.pages else (), env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.ready = False
        self.busy = False  # inside an exchange: its state is unknown if the exchange did not finish
        self.document_open = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exchange(self, header: dict, blob: bytes, timeout_s: float) -> tuple[dict, bytes]:
        """Send one frame and wait for the answer, at most timeout_s (the worker's start not counted)."""
        self.busy = True
        if not self.ready:
            first, _ = self._receive(WORKER_START_TIMEOUT_S)
            if first.get("type") != "ready":
                raise ProtocolError(f"worker said {first.get('type')} before ready")
            self.ready = True
        self.send(header, blob)
        answer = self._receive(timeout_s)
        self.busy = False
        return answer

    def send(self, header: dict, blob: bytes = b"") -> None:
        try:
            self.proc.stdin.write(encode_frame(header, blob))
        except (BrokenPipeError, OSError):
            raise DecoderDied(self.proc.wait()) from None

    def _receive(self, timeout_s: float) -> tuple[dict, bytes]:
        deadline = time.monotonic() + timeout_s
        header_len, blob_len = decode_header(self._read(PREFIX.size, deadline))
        if blob_len > self.max_blob_bytes:
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
