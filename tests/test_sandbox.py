"""The decoder sandbox without Ray: limits kill and replace a worker, and nothing else is harmed."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from PIL import Image

from app.config import Limits
from app.errors import DocumentTooComplex, UnprocessableDocument
from app.sandbox import DecodeSandbox
from app.sandbox.process import DecoderProcess
from load.hostile import damaged_tiffs, fan_out_forms_pdf, self_drawing_form_pdf
from tests.conftest import pdf_bytes, render_text_page

TIMEOUT_S = 3.0
LIMITS = Limits(decode_memory_mb=640, page_render_timeout_s=TIMEOUT_S, pdf_dpi=72)


@pytest.fixture
def sandbox():
    pool = DecodeSandbox(LIMITS, max_side=1000, max_pixels=1_000_000, workers=2)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def good_pdf() -> bytes:
    return pdf_bytes([render_text_page([f"Page {i}"], width=600) for i in range(1, 4)])


async def read_all(pool: DecodeSandbox, data: bytes) -> list:
    return [page async for page in pool.pages(data, None, None, "test")]


def run(coro):
    return asyncio.run(coro)


def test_pages_come_back_in_order_with_geometry(sandbox, good_pdf):
    pages = run(read_all(sandbox, good_pdf))
    assert [p.page_number for p in pages] == [1, 2, 3]
    assert all(p.image.shape == (p.height, p.width, 3) and p.image.dtype == np.uint8 and p.dpi == 72 for p in pages)
    assert all(int(p.image[p.height // 2, p.width // 2].max()) == 255 for p in pages)  # white paper, raw
    assert all(p.width == p.source_width == 432 for p in pages)  # 600 px at 100 dpi, rendered at 72


@pytest.mark.parametrize("header, size", [
    ({"width": 10, "height": 10, "mode": "RGB"}, 299),  # a byte short
    ({"width": 10, "height": 10, "mode": "CMYK"}, 400),  # not a mode the engines take
    ({"width": 1001, "height": 1, "mode": "L"}, 1001),  # wider than the budget
    ({"width": "10", "height": 10, "mode": "L"}, 100),  # not a number
])
def test_a_page_that_does_not_match_its_header_is_refused_and_its_worker_ended(sandbox, header, size):
    from app.errors import ServiceUnavailable

    worker = DecoderProcess(sandbox._command)
    header = {"type": "page", "page_number": 1, "source_width": 10, "source_height": 10, "scale": 1.0,
              "dpi": None, "decode_ms": 1.0, "resize_encode_ms": 1.0, **header}
    with pytest.raises(ServiceUnavailable) as caught:
        sandbox._checked_page(worker, header, bytes(size), "test")
    assert caught.value.code == "decoder_unavailable" and not worker.alive()
    good = sandbox._checked_page(DecoderProcess(sandbox._command), {**header, "width": 10, "height": 10,
                                                                    "mode": "L"}, bytes(100), "test")
    assert good.image.shape == (10, 10)


@pytest.fixture
def patient_sandbox():
    """A wall-clock limit far above the memory bomb's few seconds: only the memory cap can stop it
    (with 3 s, a loaded machine sometimes reached the time limit first)."""
    pool = DecodeSandbox(Limits(decode_memory_mb=640, page_render_timeout_s=60, pdf_dpi=72), max_side=1000,
                         max_pixels=1_000_000, workers=2)
    yield pool
    pool.close()


def test_memory_bomb_is_stopped_by_the_cap_and_the_worker_replaced(patient_sandbox, good_pdf):
    sandbox = patient_sandbox
    pids_before = set(sandbox.worker_pids())
    started = time.monotonic()
    with pytest.raises(DocumentTooComplex) as caught:
        run(read_all(sandbox, self_drawing_form_pdf()))
    assert "decode_memory_mb=640" in caught.value.message
    assert caught.value.status == 422 and not caught.value.retryable
    assert time.monotonic() - started < 40
    assert sandbox.stats["crashes"] + sandbox.stats["memory"] == 1
    assert len(set(sandbox.worker_pids()) - pids_before) == 1  # one fresh worker took the dead one's place
    assert len(run(read_all(sandbox, good_pdf))) == 3  # and the pool still serves


def test_cpu_bomb_is_killed_at_the_page_time_limit(sandbox):
    started = time.monotonic()
    with pytest.raises(DocumentTooComplex) as caught:
        run(read_all(sandbox, fan_out_forms_pdf(6, 10)))  # about 75 s of rendering on one core
    elapsed = time.monotonic() - started
    assert "page_render_timeout_s=3" in caught.value.message
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 10
    assert sandbox.stats["timeouts"] == 1


def test_other_documents_render_in_parallel_with_a_bomb(sandbox, good_pdf):
    async def scenario():
        bomb = asyncio.ensure_future(read_all(sandbox, fan_out_forms_pdf(6, 10)))
        await asyncio.sleep(0.5)
        started = time.monotonic()
        pages = await read_all(sandbox, good_pdf)
        good_seconds = time.monotonic() - started
        with pytest.raises(DocumentTooComplex):
            await bomb
        return pages, good_seconds

    pages, good_seconds = run(scenario())
    assert len(pages) == 3
    assert good_seconds < TIMEOUT_S / 2  # it did not wait behind the bomb (no process-wide lock)


def test_a_client_that_leaves_mid_document_gives_the_worker_back(sandbox, good_pdf):
    async def first_page_only():
        stream = sandbox.pages(good_pdf, None, None, "leaver")
        page = await stream.__anext__()
        await stream.aclose()
        return page

    pids = set(sandbox.worker_pids())
    assert run(first_page_only()).page_number == 1
    assert set(sandbox.worker_pids()) == pids and sandbox.stats["replaced"] == 0
    assert len(run(read_all(sandbox, good_pdf))) == 3  # the worker closed that document and took the next


def test_decoding_errors_come_back_as_their_4xx(sandbox):
    with pytest.raises(UnprocessableDocument) as caught:
        run(read_all(sandbox, damaged_tiffs()["tiff-cut-50"]))
    assert caught.value.code == "corrupt_image" and caught.value.status == 422
    assert sandbox.stats["replaced"] == 0  # a clean error keeps the worker


def test_a_worker_cannot_name_an_error_class_outside_the_list(sandbox):
    error = sandbox._worker_error(DecoderProcess(["true"]), {"type": "error", "class": "OCRServiceError",
                                                            "code": "x", "message": "m"})
    assert type(error) is UnprocessableDocument and error.status == 422


def test_a_pdf_page_arrives_through_shared_memory_in_rgb_order(sandbox):
    """Colour order survives PDFium's RGB render and the shared buffer: a red page stays red, not
    blue (BGR), and the frame carried no pixels of its own."""
    left, right = Image.new("RGB", (300, 200), (220, 30, 10)), Image.new("RGB", (300, 200), (10, 30, 220))
    page_image = Image.new("RGB", (600, 200))
    page_image.paste(left, (0, 0))
    page_image.paste(right, (300, 0))
    worker = DecoderProcess(sandbox._command, sandbox._max_blob)
    try:
        worker.exchange({"type": "open", "content_type": "application/pdf", "pages": None},
                        pdf_bytes([page_image]), TIMEOUT_S)
        header, blob = worker.exchange({"type": "next"}, b"", TIMEOUT_S)
    finally:
        worker.kill()
    assert header["shared_bytes"] == len(blob) == header["width"] * header["height"] * 3
    page = sandbox._checked_page(DecoderProcess(["true"]), header, blob, "test")
    red, blue = page.image[page.height // 2, page.width // 4], page.image[page.height // 2, 3 * page.width // 4]
    assert red[0] > 200 and red[2] < 40 and blue[2] > 200 and blue[0] < 40, (red, blue)


@pytest.mark.parametrize("length", [-1, (1 << 20) + 1, "100", None])
def test_a_shared_page_length_outside_the_buffer_is_a_protocol_error(length):
    from app.sandbox.protocol import ProtocolError, SharedPageBuffer

    shared = SharedPageBuffer.create(1 << 20)
    try:
        assert shared.write(b"\x07" * 100) == 100 and shared.read(100) == b"\x07" * 100
        assert shared.write(bytes((1 << 20) + 1)) is None  # too big: the pipe carries it
        with pytest.raises(ProtocolError):
            shared.read(length)
    finally:
        shared.close()


def test_a_decoder_holds_no_secret_of_its_replica_and_runs_under_limits(monkeypatch, good_pdf):
    secrets = {"RAY_AUTH_TOKEN": "ray-token-value", "RAY_AUTH_TOKEN_PATH": "/etc/ocr/secrets/ray_token",
               "REDIS_PASSWORD": "redis-password-value", "OCR_API_KEY": "api-key-value",
               "AWS_SECRET_ACCESS_KEY": "aws-secret-value"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    pool = DecodeSandbox(LIMITS, max_side=1000, max_pixels=1_000_000, workers=1)
    try:
        assert len(run(read_all(pool, good_pdf))) == 3  # it still decodes
        (pid,) = pool.worker_pids()
        environ = open(f"/proc/{pid}/environ", "rb").read().decode()
        for name, value in secrets.items():
            assert name not in environ and value not in environ, name
        limits = {line[:26].strip(): line[26:].split()[:2] for line in open(f"/proc/{pid}/limits").readlines()[1:]}
        assert limits["Max cpu time"] != ["unlimited", "unlimited"], limits["Max cpu time"]
        assert limits["Max file size"] == ["0", "0"]
        assert limits["Max address space"] == [str(640 * 1024 * 1024)] * 2
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
        assert status["NoNewPrivs"].strip() == "1"
    finally:
        pool.close()
