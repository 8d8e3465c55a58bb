"""Whether a host name is this machine: the one rule for the client (keys in clear) and the local runner."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
