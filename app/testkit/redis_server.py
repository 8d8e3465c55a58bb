"""A real redis-server (Debian's package) for the tests: started on a free port, AOF on, in a temp dir.

Not found means the machine lacks the package: `.ci/run` installs it, so in CI this never skips.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager

from app.testkit.ports import free_port


@contextmanager
def redis_server(password: str | None = None, port: int | None = None, data_dir: str | None = None):
    """Yield the URL redis://127.0.0.1:PORT/0 of a fresh server; it is stopped on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed: apt-get install redis-server (.ci/run does this)")
    port = port or free_port()
    directory = data_dir or tempfile.mkdtemp(prefix="ocr-redis-")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--appendonly", "yes",
               "--appendfsync", "everysec", "--save", "", "--daemonize", "no", "--logfile", f"{directory}/redis.log"]
    if password:
        command += ["--requirepass", password]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {port}")
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
