"""A seeded fuzzer of hostile requests, made in code: mutated documents and abused HTTP.

    cases = list(fuzz_cases(seed=7, count=300))
    results = [send_case(url, case) for case in cases]

Every case says what it is in its name (`png/ihdr-huge-width#12`), so a failure can be
replayed with the same seed. Documents are small so that the ones that do decode cost
milliseconds of OCR; the cost of a case is in what it claims, not in its size.
"""

from __future__ import annotations

import io
import random
import socket
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional
from urllib.parse import urlsplit

import httpx
from PIL import Image

from app.testkit.raw_http import read_response
from app.synthetic import render_text_page
from load.hostile import apng_frame_bomb, fan_out_forms_pdf, pdf_from_objects, png_chunk, self_drawing_form_pdf


@dataclass
class Case:
    name: str
    body: bytes = b""
    content_type: Optional[str] = "application/octet-stream"
    multipart: bool = False  # send the body as multipart field 'file'
    params: dict = field(default_factory=dict)
    raw: Optional[bytes] = None  # a whole HTTP request sent over a socket as it is
    method: str = "POST"
    path: str = "/v1/ocr"  # /v1/jobs... for the job routes
    headers: dict = field(default_factory=dict)
    complete: bool = True  # False: the request is cut short on purpose (no answer required)
    slow_chunks: int = 0  # send the raw request in this many pieces, 50 ms apart


@dataclass
class Outcome:
    name: str
    status: Optional[int]  # None: the connection was dropped without an answer
    json_error: bool  # the body is {"error": {"code", "message", "retryable"}}
    code: Optional[str]
    seconds: float
    from_proxy: bool = False  # answered by the HTTP server before the application (protocol garbage)
    job_id: Optional[str] = None  # a job the case's submit was accepted as


def base_documents() -> dict[str, bytes]:
    page = render_text_page(["Fuzz 2026 total 12.50"], width=360, font_size=28, margin=16)
    out = {}
    for fmt, kind in (("PNG", "png"), ("JPEG", "jpeg"), ("TIFF", "tiff"), ("GIF", "gif"), ("WEBP", "webp")):
        buffer = io.BytesIO()
        page.convert("L" if fmt == "GIF" else "RGB").save(buffer, format=fmt)
        out[kind] = buffer.getvalue()
    buffer = io.BytesIO()
    page.save(buffer, format="PDF", resolution=72)
    out["pdf"] = buffer.getvalue()
    return out


# --- document mutations: each takes (rng, data) and returns (label, mutated bytes) -----------------

def flip_bytes(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    out = bytearray(data)
    for _ in range(rng.randint(1, 24)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return "flip", bytes(out)


def truncate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    return "truncate", data[: rng.randrange(1, len(data))]


def insert_garbage(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    at = rng.randrange(len(data))
    return "insert", data[:at] + rng.randbytes(rng.randint(1, 4096)) + data[at:]


def duplicate_slice(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    start = rng.randrange(len(data))
    piece = data[start : start + rng.randint(1, 2048)]
    return "duplicate", data[:start] + piece * rng.randint(2, 50) + data[start:]


def _png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    chunks, at = [], 8
    while at + 8 <= len(data):
        length = struct.unpack(">I", data[at : at + 4])[0]
        chunks.append((data[at + 4 : at + 8], data[at + 8 : at + 8 + length]))
        at += 12 + length
    return chunks


def _png_from(chunks: list[tuple[bytes, bytes]]) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + b"".join(png_chunk(kind, body) for kind, body in chunks)


def png_dimension_lie(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """IHDR claims another size, with a correct CRC so the decoder believes it."""
    chunks = _png_chunks(data)
    kind, ihdr = chunks[0]
    width, height = rng.choice([(0, 10), (10, 0), (2**31 - 1, 1), (1, 2**31 - 1), (100_000, 100_000),
                                (65_535, 65_535), (1, 1), (360, 10_000)])
    chunks[0] = (kind, struct.pack(">II", width, height) + ihdr[8:])
    return f"ihdr-{width}x{height}", _png_from(chunks)


def png_chunk_length_lie(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """A chunk's length field claims more (or less) than the file holds."""
    at = 8 + 12 + 13  # the chunk after IHDR
    lie = rng.choice([0, 1, 2**31 - 1, 0xFFFFFFFF, len(data) * 10])
    return f"chunk-len-{lie}", data[:at] + struct.pack(">I", lie) + data[at + 4 :]


def png_zlib_bomb(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """IDAT that inflates far beyond what IHDR promises (a small header, a huge stream)."""
    chunks = _png_chunks(data)
    idat = zlib.compress(b"\x00" * rng.choice([10**6, 5 * 10**7]), 9)
    chunks = [c for c in chunks if c[0] != b"IDAT"]
    chunks.insert(1, (b"IDAT", idat))
    return f"zlib-bomb-{len(idat)}", _png_from(chunks)


def jpeg_dimension_lie(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    at = data.find(b"\xff\xc0")
    if at < 0:
        return "sof-missing", data
    height, width = rng.choice([(0, 0), (65_535, 65_535), (1, 65_535), (65_535, 1), (8, 8)])
    return f"sof-{width}x{height}", data[: at + 5] + struct.pack(">HH", height, width) + data[at + 9 :]


def gif_frame_flood(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    frames = rng.choice([200, 2000])
    images = [Image.new("L", (4, 4), i % 256) for i in range(frames)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:])
    return f"gif-frames-{frames}", buffer.getvalue()


def gif_screen_lie(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    return "gif-screen-65535", data[:6] + struct.pack("<HH", 65_535, 65_535) + data[10:]


def tiff_offset_lie(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    lie = rng.choice([0, 8, len(data) + 1, 0xFFFFFFFF, len(data) // 2])
    return f"tiff-ifd-{lie}", data[:4] + struct.pack("<I", lie) + data[8:]


def tiff_many_pages(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    images = [Image.new("L", (8, 8), 255)] * rng.choice([60, 300])
    buffer = io.BytesIO()
    images[0].save(buffer, format="TIFF", save_all=True, append_images=images[1:])
    return f"tiff-pages-{len(images)}", buffer.getvalue()


def apng_bomb(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    frames = rng.choice([2**31, 2**32 - 1, 10**6, 51])
    return f"apng-frames-{frames}", apng_frame_bomb(frames)


def webp_riff_lie(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    lie = rng.choice([0, 0xFFFFFFFF, 12])
    return f"riff-len-{lie}", data[:4] + struct.pack("<I", lie) + data[8:]


def pdf_forms(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    if rng.random() < 0.5:
        draws = rng.choice([2, 3])
        return f"pdf-self-form-x{draws}", self_drawing_form_pdf(draws)
    levels, fan = rng.choice([(3, 5), (4, 6), (7, 10), (2, 200)])
    return f"pdf-fan-{levels}x{fan}", fan_out_forms_pdf(levels, fan)


def pdf_count_lie(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    count = rng.choice([0, -1, 10**9, 2**31])
    kids = b"[3 0 R]" if rng.random() < 0.5 else b"[" + b"3 0 R " * 400 + b"]"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids " + kids + b" /Count %d >>" % count,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
    ]
    return f"pdf-count-{count}-kids-{len(kids)}", pdf_from_objects(objects)


def pdf_page_tree_cycle(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
        b"<< /Type /Pages /Parent 2 0 R /Kids [2 0 R] /Count 1 >>",
    ]
    return "pdf-tree-cycle", pdf_from_objects(objects)


def pdf_mediabox_lie(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    box = rng.choice([b"[0 0 0 0]", b"[0 0 1e9 1e9]", b"[0 0 14400 14400]", b"[0 0 -5 -5]", b"[0 0 1 1e9]",
                      b"[0 0 nan nan]", b"[a b c]"])
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox " + box + b" >>",
    ]
    return f"pdf-mediabox-{box.decode()}", pdf_from_objects(objects)


def pdf_xref_garbage(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    at = data.rfind(b"startxref")
    return "pdf-xref-garbage", data[:at] + b"startxref\n" + str(rng.randrange(10**9)).encode() + b"\n%%EOF\n"


def pdf_stream_bomb(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    content = zlib.compress(b"0 0 m 1 1 l S\n" * rng.choice([10**5, 10**6]), 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
        b"<< /Filter /FlateDecode /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
    ]
    return f"pdf-flate-{len(content)}", pdf_from_objects(objects)


MUTATIONS: dict[str, list[Callable]] = {
    "png": [flip_bytes, truncate, insert_garbage, duplicate_slice, png_dimension_lie, png_chunk_length_lie,
            png_zlib_bomb, apng_bomb],
    "jpeg": [flip_bytes, truncate, insert_garbage, jpeg_dimension_lie],
    "tiff": [flip_bytes, truncate, tiff_offset_lie, tiff_many_pages],
    "gif": [flip_bytes, truncate, gif_frame_flood, gif_screen_lie],
    "webp": [flip_bytes, truncate, webp_riff_lie],
    "pdf": [flip_bytes, truncate, insert_garbage, pdf_forms, pdf_count_lie, pdf_page_tree_cycle, pdf_mediabox_lie,
            pdf_xref_garbage, pdf_stream_bomb],
}
DECLARED = {"png": "image/png", "jpeg": "image/jpeg", "tiff": "image/tiff", "gif": "image/gif",
            "webp": "image/webp", "pdf": "application/pdf"}
PAGE_ABUSE = ["0", "-1", "1-999999999", "999999999", "a,b", "1," * 400, "3-1", "1-", "-", "1--2", " ", "1-2,2-1",
              "9" * 500, "1-1,1-1,1-1", "\u0661"]


# --- request abuse ----------------------------------------------------------------------------------

def http_request(path: str, headers: list[tuple[str, str]], body: bytes, host: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}"] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def request_abuse(rng: random.Random, docs: dict[str, bytes], host: str) -> Case:
    png = docs["png"]
    choice = rng.randrange(12)
    if choice == 0:
        return Case("http/multipart-no-boundary", png, "multipart/form-data")
    if choice == 1:
        body = b"--a\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.png\"\r\n\r\n" + png
        return Case("http/multipart-unterminated", body, "multipart/form-data; boundary=a")
    if choice == 2:
        part = b"--a\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.png\"\r\n\r\n" + png + b"\r\n"
        return Case("http/multipart-two-files", part * 2 + b"--a--\r\n", "multipart/form-data; boundary=a")
    if choice == 3:
        body = b"--a\r\nContent-Disposition: form-data; name=\"f" + b"x" * 70000 + b"\"\r\n\r\nv\r\n--a--\r\n"
        return Case("http/multipart-huge-name", body, "multipart/form-data; boundary=a")
    if choice == 4:
        fields = b"".join(b"--a\r\nContent-Disposition: form-data; name=\"k%d\"\r\n\r\nv\r\n" % i for i in range(500))
        return Case("http/multipart-500-fields", fields + b"--a--\r\n", "multipart/form-data; boundary=a")
    if choice == 5:  # Content-Length claims less than is sent
        raw = http_request("/v1/ocr", [("Content-Type", "image/png"), ("Content-Length", "10")], png, host)
        return Case("http/content-length-short", raw=raw)
    if choice == 6:  # Content-Length claims more: the body never completes (answered by the read timeout)
        raw = http_request("/v1/ocr", [("Content-Type", "image/png"), ("Content-Length", str(len(png) + 50))], png,
                           host)
        return Case("http/content-length-long", raw=raw, complete=False)
    if choice == 7:
        chunks = b"".join(b"%x\r\n" % len(png[i : i + 97]) + png[i : i + 97] + b"\r\n" for i in range(0, len(png), 97))
        raw = http_request("/v1/ocr", [("Content-Type", "image/png"), ("Transfer-Encoding", "chunked")],
                           chunks + b"0\r\n\r\n", host)
        return Case("http/chunked", raw=raw)
    if choice == 8:
        raw = http_request("/v1/ocr", [("Content-Type", "image/png"), ("Transfer-Encoding", "chunked")],
                           b"zz\r\nnot hex\r\n0\r\n\r\n", host)
        return Case("http/chunked-bad-size", raw=raw)
    if choice == 9:
        raw = http_request("/v1/ocr", [("Content-Type", "image/png"), ("Content-Length", str(len(png)))], png, host)
        return Case("http/slow-body", raw=raw, slow_chunks=20)
    if choice == 10:
        headers = [("Content-Type", "image/png"), ("X-Request-ID", "\u00ff" * 300 + "<script>"),
                   ("Content-Length", str(len(png)))] + [(f"X-Pad-{i}", "y" * 100) for i in range(50)]
        return Case("http/header-abuse", raw=http_request("/v1/ocr", headers, png, host))
    if rng.random() < 0.2:  # a control byte in a header: httpx would refuse to send it, a socket does
        raw = http_request("/v1/ocr", [("Content-Type", "image/png; x=\x00\x07"), ("Content-Length", str(len(png)))],
                           png, host)
        return Case("http/header-control-bytes", raw=raw)
    declared = rng.choice(["text/html", "image/png; charset=utf-8", "application/pdf", "image/x-nothing", ""])
    return Case(f"http/declared-{declared[:12]!r}", docs["pdf"] if "png" in declared else png, declared or None)


JOB_IDS = ["0" * 32, "f" * 32, "../../etc/passwd", "%2e%2e%2fjobs", "x" * 3000, "%00", "%0aINFO%20forged",
           "\u0661" * 32, "A" * 32, " ", "{job_id}"]
WAITS = ["-1", "nan", "inf", "1e309", "61", "abc", " ", "0x10", "60.0000001", "1_0", "5"]
FORMATS = ["pdf", "", "x" * 1000, "JSON", "markdown\x00", "../json"]
IDEMPOTENCY_KEYS = ["", "a" * 300, "%C3%A9", "k\x00", "../k", "key with space", "ok-key-1"]


def job_route_abuse(rng: random.Random, docs: dict[str, bytes]) -> Case:
    """The job routes' own inputs: ids, the long-poll's wait, the result format, Idempotency-Key, methods."""
    job_id = rng.choice(JOB_IDS)
    choice = rng.randrange(6)
    if choice == 0:
        return Case(f"jobs/status-{job_id[:12]!r}", method="GET", path=f"/v1/jobs/{job_id}")
    if choice == 1:
        wait = rng.choice(WAITS)
        return Case(f"jobs/wait-{wait!r}", method="GET", path=f"/v1/jobs/{'0' * 32}", params={"wait": wait})
    if choice == 2:
        form = rng.choice(FORMATS)
        return Case(f"jobs/result-format-{form[:12]!r}", method="GET", path=f"/v1/jobs/{job_id}/result",
                    params={"format": form})
    if choice == 3:
        return Case(f"jobs/delete-{job_id[:12]!r}", method="DELETE", path=f"/v1/jobs/{job_id}")
    if choice == 4:
        key = rng.choice(IDEMPOTENCY_KEYS)
        return Case(f"jobs/idempotency-{key[:12]!r}", docs["png"], "image/png", path="/v1/jobs",
                    headers={"idempotency-key": key} if "\x00" not in key else {"idempotency-key": "k%00"})
    method = rng.choice(["PUT", "PATCH", "GET"])
    return Case(f"jobs/method-{method}", docs["png"], "image/png", method=method, path="/v1/jobs")


def fuzz_cases(seed: int, count: int, host: str = "127.0.0.1", jobs: bool = False,
               chat_model: Optional[str] = None) -> Iterator[Case]:
    """With `jobs`, a third of the cases go to the job routes: mutated documents submitted as jobs, and
    abuse of the routes' own inputs. With `chat_model` (the served model's id), a quarter of the rest go
    to /v1/chat/completions (load/fuzz_doors.py)."""
    from load.fuzz_doors import chat_abuse

    rng = random.Random(seed)
    docs = base_documents()
    kinds = sorted(MUTATIONS)
    for number in range(count):
        roll = rng.random()
        if chat_model and rng.random() < 1 / 4:
            case = chat_abuse(rng, docs, chat_model)
        elif jobs and rng.random() < 1 / 3:
            if rng.random() < 0.5:
                case = job_route_abuse(rng, docs)
            else:
                kind = rng.choice(kinds)
                label, body = rng.choice(MUTATIONS[kind])(rng, docs[kind])
                kept = {"keep_document": "true"} if chat_model and rng.random() < 0.3 else {}
                case = Case(f"jobs-submit/{kind}/{label}", body, DECLARED[kind], multipart=rng.random() < 0.5,
                            path="/v1/jobs", params=kept)
        elif roll < 0.15:
            case = request_abuse(rng, docs, host)
        elif roll < 0.22:
            kind = rng.choice(kinds)
            spec = rng.choice(PAGE_ABUSE)
            case = Case(f"{kind}/pages-{spec[:16]!r}", docs[kind], DECLARED[kind], multipart=rng.random() < 0.5,
                        params={"pages": spec})
        else:
            kind = rng.choice(kinds)
            label, body = rng.choice(MUTATIONS[kind])(rng, docs[kind])
            declared = DECLARED[kind] if rng.random() < 0.8 else rng.choice(list(DECLARED.values()))
            case = Case(f"{kind}/{label}", body, declared, multipart=rng.random() < 0.5)
        case.name = f"{case.name}#{number}"
        yield case


# --- sending ------------------------------------------------------------------------------------------

def _outcome(name: str, started: float, status: Optional[int], body: bytes, from_proxy: bool = False) -> Outcome:
    code, json_error = None, False
    try:
        import json

        error = json.loads(body)["error"]
        json_error = {"code", "message", "retryable"} <= set(error)
        code = error.get("code")
    except Exception:
        pass
    return Outcome(name, status, json_error, code, time.monotonic() - started, from_proxy)


def send_case(url: str, case: Case, client: httpx.Client, timeout_s: float = 60) -> Outcome:
    started = time.monotonic()
    if case.raw is not None:
        return _send_raw(url, case, started, timeout_s)
    headers = {"content-type": case.content_type} if case.content_type and not case.multipart else {}
    headers.update(case.headers)
    target = f"{url}{case.path}"
    try:
        if case.multipart:
            response = client.request(case.method, target, params=case.params, headers=case.headers,
                                      files={"file": ("upload", case.body, case.content_type or "")}, timeout=timeout_s)
        elif case.body or case.method in ("POST", "PUT", "PATCH"):
            response = client.request(case.method, target, params=case.params, content=case.body, headers=headers,
                                      timeout=timeout_s)
        else:
            response = client.request(case.method, target, params=case.params, headers=case.headers,
                                      timeout=timeout_s)
    except httpx.HTTPError:
        return Outcome(case.name, None, False, None, time.monotonic() - started)
    outcome = _outcome(case.name, started, response.status_code, response.content)
    if case.path == "/v1/jobs" and case.method == "POST" and response.status_code in (200, 202):
        outcome.job_id = response.json()["id"]
    return outcome


def _send_raw(url: str, case: Case, started: float, timeout_s: float) -> Outcome:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
            if case.slow_chunks:
                step = max(1, len(case.raw) // case.slow_chunks)
                for i in range(0, len(case.raw), step):
                    sock.sendall(case.raw[i : i + step])
                    time.sleep(0.05)
            else:
                sock.sendall(case.raw)
            answer = read_response(sock)
    except OSError:
        answer = b""
    if not answer:
        return Outcome(case.name, None, False, None, time.monotonic() - started)
    head, _, body = answer.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return Outcome(case.name, None, False, None, time.monotonic() - started)
    # uvicorn answers malformed HTTP itself, in plain text, before any application code runs.
    from_proxy = b"content-type: text/plain" in head.lower() and b"x-request-id" not in head.lower()
    return _outcome(case.name, started, status, body, from_proxy)


def is_bad(outcome: Outcome, case: Case) -> Optional[str]:
    """Why an outcome breaks the contract, or None: no 5xx, no dropped complete request, JSON errors."""
    if outcome.status is None:
        return "dropped" if case.complete else None
    if outcome.status >= 500:
        return f"{outcome.status}"
    if outcome.status >= 400 and not outcome.json_error and not outcome.from_proxy:
        return "non-json-error"
    return None
