"""Callback delivery under hostile receivers (issue 37, findings 3 and 4): the real CallbackSender
against real local sockets, its store a list (the stores' claims are tested in test_jobs_store.py)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import socket
import time

import pytest

from app.errors import BadRequest
from app.jobs.callback_policy import AddressRefused, Target, allowed_target, checked_address
from app.jobs.callbacks import CallbackSender
from app.jobs.model import SUCCEEDED, Job
from app.settings.jobs import Callbacks
from app.ops.secrets import SecretFileError


def secret_file(tmp_path, name: str, secret: bytes, mode: int = 0o600) -> str:
    path = tmp_path / name
    path.write_bytes(secret)
    os.chmod(path, mode)
    return str(path)


class ListStore:
    """Due callbacks in a list; what each delivery recorded, with when."""

    def __init__(self):
        self.due: list[Job] = []
        self.recorded: dict[str, tuple[dict, float]] = {}

    def claim_callback(self, hold_s: float):
        return self.due.pop(0) if self.due else None

    def record_callback(self, job_id: str, state: dict, due):
        self.recorded[job_id] = (state, time.monotonic())


def finished_job(job_id: str, url: str) -> Job:
    return Job(id=job_id, status=SUCCEEDED, callback_url=url, pages=[1], finished_at=time.time())


class Receiver:
    """A TCP receiver: reads the request, then answers `answer` at `byte_every_s` per byte (0: at once)."""

    def __init__(self, answer: bytes = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
                 byte_every_s: float = 0.0):
        self.answer, self.every = answer, byte_every_s
        self.requests: list[bytes] = []

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next((line.split(b":")[1] for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length")), b"0"))
        self.requests.append(head + await reader.readexactly(length))
        try:
            if self.every:
                for byte in self.answer:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    await asyncio.sleep(self.every)
            else:
                writer.write(self.answer)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        writer.close()

    def close(self):
        self._server.close()


def test_a_receiver_that_answers_a_byte_a_second_delays_no_other_callback_past_its_deadline(tmp_path):
    """Finding 3: per-phase timeouts never fired on a byte a second, and the loop waited on every delivery
    together, so a callback due after the slow one started waited for it (for ever)."""

    async def scenario():
        slow = Receiver(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100, byte_every_s=1.0)
        fast = Receiver()
        slow_port, fast_port = await slow.start(), await fast.start()
        settings = Callbacks(allowed_hosts=[f"127.0.0.1:{slow_port}", f"127.0.0.1:{fast_port}"], timeout_s=2.0,
                             secret_file=secret_file(tmp_path, "key", b"k" * 32), max_attempts=1)
        store = ListStore()
        sender = CallbackSender(settings, store)
        store.due.append(finished_job("slow", f"http://127.0.0.1:{slow_port}/hook"))
        runner = asyncio.get_running_loop().create_task(sender.run(poll_s=0.1))
        await asyncio.sleep(0.5)  # the slow delivery is under way
        store.due.append(finished_job("fast", f"http://127.0.0.1:{fast_port}/hook"))
        due_at = time.monotonic()
        while "fast" not in store.recorded or "slow" not in store.recorded:
            assert time.monotonic() - due_at < 10, store.recorded
            await asyncio.sleep(0.05)
        runner.cancel()
        await sender.close()
        slow.close(), fast.close()
        return store.recorded, due_at

    recorded, due_at = asyncio.run(scenario())
    fast_state, fast_at = recorded["fast"]
    slow_state, slow_at = recorded["slow"]
    assert fast_state["status"] == "delivered" and fast_at - due_at < 1.0
    assert slow_state["status"] == "failed" and slow_state["last_error"] == "timeout"
    assert slow_at - due_at < 2.0 + 0.5  # its one deadline, however slowly it answered


def test_an_answer_is_read_no_further_than_its_cap(tmp_path):
    async def scenario():
        huge = Receiver(b"HTTP/1.1 200 OK\r\nContent-Length: 50000000\r\n\r\n" + b"x" * 50_000_000)
        port = await huge.start()
        settings = Callbacks(allowed_hosts=[f"127.0.0.1:{port}"], secret_file=secret_file(tmp_path, "key", b"k" * 32))
        sender = CallbackSender(settings, ListStore())
        state, _ = await sender.attempt(finished_job("big", f"http://127.0.0.1:{port}/hook"))
        await sender.close()
        huge.close()
        return state

    assert asyncio.run(scenario())["status"] == "delivered"


def callbacks(*hosts: str, **more) -> Callbacks:
    return Callbacks.model_construct(allowed_hosts=list(hosts), secret_file=None, receiver_secret_files={},
                                     **more)


def test_a_bare_host_allows_only_its_schemes_port():
    """Finding 4: `receiver.example` allowed every port, so 6379 (Redis) and 8265 (Ray) passed."""
    settings = callbacks("receiver.example", "other.example:8443")
    assert allowed_target("https://receiver.example/hook", settings).port == 443
    assert allowed_target("http://receiver.example/hook", settings).port == 80
    assert allowed_target("https://other.example:8443/x?y=1", settings).path == "/x?y=1"
    for url in ("http://receiver.example:6379/", "https://receiver.example:8265/", "http://receiver.example:443/",
                "https://other.example/hook"):
        with pytest.raises(BadRequest) as refused:
            allowed_target(url, settings)
        assert refused.value.code == "callback_not_allowed"


def test_the_address_is_checked_once_resolved_and_loopback_only_where_named():
    named = Target("http", "receiver.example", 80, "/", "receiver.example")
    assert checked_address(named, ["10.1.2.3", "127.0.0.1"]) == "10.1.2.3"
    for rebound in (["127.0.0.1"], ["::1"], ["::ffff:127.0.0.1"], ["169.254.169.254"], ["0.0.0.0"], ["224.0.0.1"],
                    ["fe80::1%eth0"], []):
        with pytest.raises(AddressRefused):
            checked_address(named, rebound)
    for host in ("127.0.0.1", "localhost"):
        assert checked_address(Target("http", host, 80, "/", host), ["127.0.0.1"]) == "127.0.0.1"
    with pytest.raises(AddressRefused):
        checked_address(Target("http", "169.254.169.254", 80, "/", "169.254.169.254"), ["169.254.169.254"])


def test_the_connection_goes_to_the_one_resolved_address_and_the_owner_sees_a_class_only(tmp_path, monkeypatch):
    """Resolved once per attempt (a rebinding DNS gets one answer in), the Host header kept; a refused
    port reads `connection_failed`, not the socket's error (a port-scan oracle)."""
    resolutions = []

    async def scenario():
        receiver = Receiver()
        port = await receiver.start()
        closed = socket.socket()
        closed.bind(("127.0.0.1", 0))
        closed_port = closed.getsockname()[1]
        closed.close()
        loop = asyncio.get_running_loop()
        real = loop.getaddrinfo

        async def counting(host, *args, **kwargs):
            resolutions.append(host)
            return await real(host, *args, **kwargs)

        monkeypatch.setattr(loop, "getaddrinfo", counting)
        settings = Callbacks(allowed_hosts=[f"localhost:{port}", f"localhost:{closed_port}"],
                             secret_file=secret_file(tmp_path, "key", b"k" * 32))
        sender = CallbackSender(settings, ListStore())
        good, _ = await sender.attempt(finished_job("a", f"http://localhost:{port}/hook"))
        bad, _ = await sender.attempt(finished_job("b", f"http://localhost:{closed_port}/hook"))
        await sender.close()
        receiver.close()
        return good, bad, receiver.requests, port

    good, bad, requests, port = asyncio.run(scenario())
    assert resolutions == ["localhost", "localhost"]
    assert good["status"] == "delivered" and f"Host: localhost:{port}".encode() in requests[0]
    assert bad["last_error"] == "connection_failed" and bad["last_status"] is None


def test_each_receiver_signs_with_its_own_key_and_a_leaky_or_empty_key_is_refused(tmp_path):
    async def scenario():
        one, two = Receiver(), Receiver()
        ports = await one.start(), await two.start()
        hosts = [f"127.0.0.1:{port}" for port in ports]
        settings = Callbacks(allowed_hosts=hosts, secret_file=secret_file(tmp_path, "shared", b"s" * 32),
                             receiver_secret_files={hosts[1]: secret_file(tmp_path, "two", b"t" * 32)})
        sender = CallbackSender(settings, ListStore())
        for n, port in enumerate(ports):
            await sender.attempt(finished_job(f"j{n}", f"http://127.0.0.1:{port}/hook"))
        await sender.close()
        one.close(), two.close()
        return one.requests[0], two.requests[0]

    for request, key in zip(asyncio.run(scenario()), (b"s" * 32, b"t" * 32)):
        head, body = request.split(b"\r\n\r\n", 1)
        fields = dict(part.split("=", 1) for part in
                      next(line for line in head.decode().split("\r\n") if line.startswith("X-OCR-Signature"))
                      .split(": ", 1)[1].split(","))
        expected = hmac.new(key, fields["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(expected, fields["v1"])
    for path, why in ((secret_file(tmp_path, "open", b"k" * 32, 0o644), "chmod 600"),
                      (secret_file(tmp_path, "empty", b"\n"), "empty")):
        with pytest.raises(SecretFileError, match=why):
            CallbackSender(Callbacks(allowed_hosts=["h"], secret_file=path), ListStore())
