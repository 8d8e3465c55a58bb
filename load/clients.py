"""The benchmarks' one HTTP client harness: closed-loop clients that post uploads to the service.

A closed loop: each client sends its next request when its last one is answered, so the offered
load follows the service (floods at a fixed arrival rate are load/stepload.py's). Every answer is
kept, 503s and transport failures included, so that a benchmark counts them beside its percentiles.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import httpx


@dataclass(frozen=True)
class Upload:
    data: bytes
    content_type: str
    name: str = "page"
    params: Optional[dict] = None
    multipart: bool = True  # False: the bytes are the body, with their content type


@dataclass
class Answer:
    status: int  # 0: no HTTP answer (the connection failed or timed out)
    seconds: float
    body: Optional[dict]  # the JSON of a 200
    error: str = ""  # the start of any other answer, or the transport error
    code: Optional[str] = None  # an error answer's error.code ("non-json" where it has none)

    @property
    def ok(self) -> bool:
        return self.status == 200


def post(client: httpx.Client, upload: Upload, path: str = "/v1/ocr") -> Answer:
    started = time.perf_counter()
    try:
        if upload.multipart:
            response = client.post(path, params=upload.params,
                                   files={"file": (upload.name, upload.data, upload.content_type)})
        else:
            response = client.post(path, params=upload.params, content=upload.data,
                                   headers={"content-type": upload.content_type})
    except httpx.HTTPError as exc:
        return Answer(0, time.perf_counter() - started, None, f"{type(exc).__name__}: {exc}"[:300])
    seconds = time.perf_counter() - started
    if response.status_code == 200:
        return Answer(200, seconds, response.json())
    try:
        code = str(response.json()["error"]["code"])
    except Exception:  # noqa: BLE001 - a proxy's plain-text 503, a broken body: counted as such
        code = "non-json"
    return Answer(response.status_code, seconds, None, response.text[:300], code)


def closed_loop(url: str, uploads: list[Upload], concurrency: int, path: str = "/v1/ocr",
                timeout_s: float = 600) -> tuple[list[Answer], float]:
    """Each upload once, `concurrency` clients at a time: the answers in upload order, and the wall seconds."""
    limits = httpx.Limits(max_connections=concurrency)
    with httpx.Client(base_url=url, timeout=timeout_s, limits=limits) as client, \
            ThreadPoolExecutor(concurrency) as pool:
        started = time.perf_counter()
        answers = list(pool.map(lambda upload: post(client, upload, path), uploads))
        return answers, time.perf_counter() - started


def closed_loop_for(url: str, upload: Upload, clients: int, seconds: float, path: str = "/v1/ocr",
                    timeout_s: float = 60) -> tuple[list[Answer], float]:
    """`clients` clients each sending `upload` again and again for `seconds`: every answer, and the wall seconds."""
    deadline = time.perf_counter() + seconds

    def client_loop(_: int) -> list[Answer]:
        with httpx.Client(base_url=url, timeout=timeout_s) as client:
            answers = []
            while time.perf_counter() < deadline:
                answers.append(post(client, upload, path))
            return answers

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = [answer for loop in pool.map(client_loop, range(clients)) for answer in loop]
    return answers, time.perf_counter() - started


def tally(answers: list[Answer]) -> dict:
    """ok, 503 (told to come back) and failed (anything else, transport failures included)."""
    ok = sum(answer.status == 200 for answer in answers)
    refused = sum(answer.status == 503 for answer in answers)
    return {"ok": ok, "503": refused, "failed": len(answers) - ok - refused}
