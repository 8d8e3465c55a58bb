"""Free local ports for test and benchmark servers."""

from __future__ import annotations

import random
import socket

# Below the kernel's ephemeral range (32768-60999 here): Ray's own processes bind ephemeral ports
# while they start, and once took the port a test had just found free before Serve's proxy bound it.
_QUIET_PORTS = range(20000, 32000)
_handed_out: set[int] = set()


def free_port() -> int:
    """A port free now that no earlier call in this process returned."""
    for _ in range(200):
        port = random.choice(_QUIET_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port in 20000-32000")
