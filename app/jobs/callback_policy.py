"""Where a callback may go: the allowlist's hosts on their named (or the scheme's own) port, at an
address checked after the one resolution that the connection then uses (no DNS rebinding), signed
with the receiver's own key. app/jobs/callbacks.py delivers; this decides."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit, urlunsplit

from app.errors import BadRequest
from app.settings.jobs import Callbacks
from app.ops.secrets import read_secret

MAX_URL = 2048
DEFAULT_PORTS = {"https": 443, "http": 80}
LOOPBACK_NAMES = {"localhost", "localhost.localdomain"}


class AddressRefused(Exception):
    """The receiver's host resolved to an address callbacks never reach."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # with its query
    entry: str  # the allowlist entry that admits it

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    def url_at(self, address: str) -> str:
        """The URL with the host replaced by the address it resolved to: the connection goes there."""
        at = f"[{address}]" if ":" in address else address
        return urlunsplit((self.scheme, f"{at}:{self.port}", self.path or "/", "", ""))


def allowed_target(url: str, settings: Callbacks) -> Target:
    """The callback_url's receiver, if the allowlist admits it; else 400 saying why."""
    if not settings.allowed_hosts:
        raise BadRequest("Callbacks are not enabled here: jobs.callbacks.allowed_hosts is empty.",
                         code="callback_not_allowed")
    parts = urlsplit(url) if len(url) <= MAX_URL else None
    try:
        port = parts.port if parts else None
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        raise BadRequest(f"callback_url must be an http(s) URL of at most {MAX_URL} characters, without credentials.",
                         code="invalid_callback_url")
    host, default = parts.hostname.lower(), DEFAULT_PORTS[parts.scheme]
    port = port or default
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    for entry in (f"{host}:{port}", host if port == default else None):
        if entry and entry in settings.allowed_hosts:
            return Target(parts.scheme, host, port, path, entry)
    raise BadRequest(f"callback_url's receiver {host}:{port} is not in jobs.callbacks.allowed_hosts (a bare host "
                     f"there allows only port {default} for {parts.scheme}).", code="callback_not_allowed")


def allowed_url(url: str, settings: Callbacks) -> str:
    allowed_target(url, settings)
    return url


def checked_address(target: Target, resolved: list[str]) -> str:
    """The first resolved address, if callbacks may reach it: never link-local (cloud metadata, the
    node's own services), multicast, unspecified or reserved; loopback only where the allowlist entry
    itself names loopback (a name that later resolves to 127.0.0.1 must not reach the node's Redis)."""
    if not resolved:
        raise AddressRefused(f"{target.host} did not resolve")
    address = ipaddress.ip_address(resolved[0].split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    if address.is_link_local or address.is_multicast or address.is_unspecified or address.is_reserved:
        raise AddressRefused(f"{target.host} resolved to {address}")
    if address.is_loopback and not _names_loopback(target.host):
        raise AddressRefused(f"{target.host} resolved to loopback {address}")
    return str(address)


def _names_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Secrets:
    """Each receiver's signing key: its own file where receiver_secret_files names one, else secret_file.
    Read once, at start-up, and refused there if a file is empty or others may read it."""

    def __init__(self, settings: Callbacks):
        self._default = read_secret(settings.secret_file, "jobs.callbacks.secret_file") if settings.secret_file else b""
        self._own = {entry: read_secret(path, f"jobs.callbacks.receiver_secret_files[{entry!r}]")
                     for entry, path in settings.receiver_secret_files.items()}

    def for_target(self, target: Target) -> bytes:
        return self._own.get(target.entry, self._default)

    def named(self, entry: Optional[str]) -> bytes:
        return self._own.get(entry or "", self._default)
