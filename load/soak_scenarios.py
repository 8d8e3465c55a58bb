"""The soak suite's scenarios, each a function of a running service: `make soak` runs them long,
`tests/test_hardening.py` runs them short against the test session's service.

Each returns a plain dict of figures (JSON-ready). Every loop is bounded in count and time,
and only 127.0.0.1 is ever a target.
"""

from __future__ import annotations

import collections
import os
import signal
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional
from urllib.parse import urlsplit

import httpx

from app.synthetic import png_bytes, render_text_page
from load.clients import Upload, post
from load.common import percentile
from load.fuzz import fuzz_cases, is_bad, send_case

GOOD_TEXT = "soak 4711"


def good_png(text: str = "Soak 4711 total 9.99") -> bytes:
    return png_bytes(render_text_page([text], width=420, font_size=30, margin=16))


def good_pdf(pages: int = 2) -> bytes:
    import io

    images = [render_text_page([f"Soak 4711 page {i + 1}"], width=420, font_size=30, margin=16) for i in range(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", save_all=True, append_images=images[1:], resolution=72)
    return buffer.getvalue()


# --- Ray-side observations (the scenario runs in a process connected to the cluster) -------------

def _actor_table() -> list[dict]:
    # From the GCS directly: the state API (ray.util.state) needs the dashboard, which the
    # test session and the soak leave off.
    from ray._private import state

    return list(state.actors().values())


def serve_actors() -> dict[str, dict]:
    """ALIVE Serve replica actors: actor id -> {deployment, pid, restarts}."""
    actors = {}
    for actor in _actor_table():
        name = actor.get("ActorClassName") or ""
        if actor.get("State") == "ALIVE" and name.startswith("ServeReplica:"):
            parts = name.split(":")  # ServeReplica:<application>:<deployment>
            actors[actor["ActorID"]] = {"deployment": parts[-1], "app": parts[1] if len(parts) > 2 else None,
                                        "pid": actor["Pid"], "restarts": actor.get("NumRestarts", 0)}
    return actors


def dead_actor_count() -> int:
    return sum(1 for actor in _actor_table() if actor.get("State") == "DEAD")


def running_replicas(app_name: str = "ocr") -> dict[str, int]:
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return {}
    return {name: int(d.replica_states.get("RUNNING", 0)) for name, d in app.deployments.items()}


def rss_mb(pid: int, field_name: str = "VmRSS") -> Optional[float]:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


# --- steady client load ---------------------------------------------------------------------------

@dataclass
class Result:
    finished: float  # monotonic
    latency: float
    status: int  # 0: no answer
    code: Optional[str]
    correct: bool


@dataclass
class ClientLoad:
    """`clients` threads sending good requests back to back until stopped; every 200 is checked."""

    url: str
    clients: int
    bodies: list[tuple[bytes, str]] = field(default_factory=lambda: [(good_png(), "image/png")])
    timeout_s: float = 120
    expect_text: Optional[str] = GOOD_TEXT  # None: any 200 counts (engines that read nonsense, like tiny VLMs)
    results: list[Result] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(self.clients)]
        self._lock = threading.Lock()

    def __enter__(self) -> "ClientLoad":
        self.started = time.monotonic()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout_s + 5)

    def _loop(self, index: int) -> None:
        with httpx.Client(timeout=self.timeout_s) as client:
            turn = index
            while not self._stop.is_set():
                body, content_type = self.bodies[turn % len(self.bodies)]
                turn += 1
                self.results.append(self._send(client, body, content_type))

    def _send(self, client: httpx.Client, body: bytes, content_type: str) -> Result:
        answer = post(client, Upload(body, content_type, multipart=False), f"{self.url}/v1/ocr")
        correct = answer.ok and (self.expect_text is None
                                 or self.expect_text in " ".join(answer.body["text"].split()).lower())
        return Result(time.monotonic(), answer.seconds, answer.status, answer.code, correct)

    def summary(self, start: Optional[float] = None, end: Optional[float] = None) -> dict:
        window = [r for r in self.results if (start is None or r.finished >= start) and (end is None or r.finished <= end)]
        failed = [r for r in window if not (r.status == 200 and r.correct)]
        finishes = sorted(r.finished for r in window)
        gaps = [b - a for a, b in zip(finishes, finishes[1:])]
        latencies = sorted(r.latency for r in window)
        return {
            "requests": len(window),
            "failed": len(failed),
            "failed_codes": dict(collections.Counter(f"{r.status}:{r.code}" for r in failed)),
            "longest_gap_s": round(max(gaps), 2) if gaps else None,
            "p50_s": round(statistics.median(latencies), 3) if latencies else None,
            "p95_s": round(percentile(latencies, 0.95), 3) if latencies else None,
        }


# --- scenarios ----------------------------------------------------------------------------------

def fuzz(url: str, seed: int, count: int, check_every: int = 25, jobs: bool = False,
         job_deadline_s: float = 180, doors: bool = False) -> dict:
    """Hostile requests one after another; the service must stay up with every replica RUNNING.
    With `jobs`, a third go to /v1/jobs, and every job accepted must end (nothing accepted is lost).
    With `doors`, a quarter go to /v1/chat/completions, and each accepted job's result is asked for in
    every format and its event stream read (load/fuzz_doors.py): no 5xx there either."""
    expected = running_replicas()
    outcomes, bad, replica_dips = [], [], []
    model = httpx.get(f"{url}/v1/models", timeout=30).json()["data"][0]["id"] if doors else None
    cases = list(fuzz_cases(seed, count, host=urlsplit(url).netloc, jobs=jobs, chat_model=model))
    started = time.monotonic()
    with httpx.Client() as client:
        for number, case in enumerate(cases):
            outcome = send_case(url, case, client)
            outcomes.append(outcome)
            why = is_bad(outcome, case)
            if why:
                bad.append({"case": case.name, "why": why, "status": outcome.status, "code": outcome.code})
            if number % check_every == check_every - 1:
                now = running_replicas()
                if now != expected:
                    replica_dips.append({"after": case.name, "replicas": now})
    accepted = [o.job_id for o in outcomes if o.job_id]
    doors_seen: collections.Counter = collections.Counter()
    unfinished = follow_jobs(url, accepted, job_deadline_s, doors_seen if doors else None) if accepted else []
    bad += [{"case": what, "why": status, "status": int(status)} for (what, status) in doors_seen
            if status.isdigit() and int(status) >= 500]
    alive = httpx.get(f"{url}/readyz", timeout=10).status_code == 200
    job_outcomes = [o for o, c in zip(outcomes, cases) if c.path.startswith("/v1/jobs")]
    return {
        "seed": seed,
        "requests": len(outcomes),
        "job_route_requests": len(job_outcomes),
        "job_route_by_status": dict(sorted(collections.Counter(str(o.status) for o in job_outcomes).items())),
        "jobs_accepted": len(set(accepted)),
        "jobs_unfinished": unfinished,
        "chat_requests": sum(c.path == "/v1/chat/completions" for c in cases),
        "chat_by_status": dict(sorted(collections.Counter(str(o.status) for o, c in zip(outcomes, cases)
                                                          if c.path == "/v1/chat/completions").items())),
        "results_and_streams_by_status": {f"{what} {status}": n for (what, status), n in sorted(doors_seen.items())},
        "seconds": round(time.monotonic() - started, 1),
        "by_status": dict(sorted(collections.Counter(str(o.status) for o in outcomes).items())),
        "by_code": dict(collections.Counter(o.code for o in outcomes if o.code).most_common()),
        "answered_by_http_server": sum(o.from_proxy for o in outcomes),
        "bad": bad,
        "replica_dips": replica_dips,
        "alive_after": alive,
        "slowest": sorted(((round(o.seconds, 2), o.name) for o in outcomes), reverse=True)[:5],
    }


def follow_jobs(url: str, job_ids: list[str], deadline_s: float,
                doors: Optional[collections.Counter] = None) -> list[dict]:
    """Each accepted job until it ends (then it is deleted); those that never end or vanish, with their state.
    With `doors`, each ended job's result in every format and its event stream, counted there by status."""
    deadline = time.monotonic() + deadline_s
    left, lost = list(dict.fromkeys(job_ids)), []
    with httpx.Client(base_url=url, timeout=70) as client:
        for job_id in left:
            status = {}
            while time.monotonic() < deadline:
                answer = client.get(f"/v1/jobs/{job_id}", params={"wait": 10})
                status = answer.json() if answer.status_code == 200 else {"http": answer.status_code}
                if status.get("status") not in ("queued", "running"):
                    break
            if status.get("status") not in ("succeeded", "partial", "failed"):
                lost.append({"id": job_id, "last": status})
            elif doors is not None:
                read_every_door(client, job_id, doors)
            client.delete(f"/v1/jobs/{job_id}")
    return lost


def read_every_door(client: httpx.Client, job_id: str, seen: collections.Counter) -> None:
    from load.fuzz_doors import RESULT_FORMATS

    for form in RESULT_FORMATS:
        answer = client.get(f"/v1/jobs/{job_id}/result", params={"format": form})
        seen[(f"result?format={form}", str(answer.status_code))] += 1
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as events:
        for _ in events.iter_lines():
            pass
        seen[("events", str(events.status_code))] += 1


def bombs(url: str, cases: dict[str, bytes], clients: int = 2, settle_s: float = 3.0) -> dict:
    """Each bomb sent while `clients` clients send normal pages; nothing may die or be harmed."""
    actors_before, dead_before = serve_actors(), dead_actor_count()
    hwm_before = {aid: rss_mb(a["pid"], "VmHWM") for aid, a in actors_before.items()}
    sent = {}
    with ClientLoad(url, clients) as load:
        time.sleep(settle_s)
        window_start = time.monotonic()
        with httpx.Client(timeout=300) as client:
            for name, body in cases.items():
                started = time.monotonic()
                response = client.post(f"{url}/v1/ocr", content=body, headers={"content-type": "application/octet-stream"})
                error = response.json().get("error", {}) if response.headers.get("content-type", "").startswith(
                    "application/json") else {}
                sent[name] = {"status": response.status_code, "code": error.get("code"),
                              "message": error.get("message"), "seconds": round(time.monotonic() - started, 2)}
        time.sleep(settle_s)
        window_end = time.monotonic()
    actors_after = serve_actors()
    peak = {}
    for aid, actor in actors_after.items():
        label = f"{actor['deployment']}:{actor['pid']}"
        peak[label] = {"peak_rss_mb": rss_mb(actor["pid"], "VmHWM"), "before_mb": hwm_before.get(aid)}
    return {
        "bombs": sent,
        "clients": load.summary(window_start, window_end),
        "peak_rss_per_replica": peak,
        "actors_replaced": sorted(set(actors_before) ^ set(actors_after)),
        "dead_actors_added": dead_actor_count() - dead_before,
    }


def stalled_uploads(url: str, stalled: int, read_timeout_s: float, path: str = "/v1/ocr",
                    announced: int = 100_000) -> dict:
    """`stalled` clients POST to `path` announcing `announced` bytes, send 16 then stall; a good
    /v1/ocr must still get 200."""
    parts = urlsplit(url)
    sockets = []
    head = (f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: image/png\r\n"
            f"Content-Length: {announced}\r\n\r\n").encode() + b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
    try:
        for _ in range(stalled):
            sock = socket.create_connection((parts.hostname, parts.port), timeout=read_timeout_s + 30)
            sock.sendall(head)
            sockets.append(sock)
        time.sleep(1.0)
        started = time.monotonic()
        good = httpx.post(f"{url}/v1/ocr", content=good_png(), headers={"content-type": "image/png"}, timeout=120)
        good_seconds = time.monotonic() - started
        good_correct = good.status_code == 200 and GOOD_TEXT in " ".join(good.json()["text"].split()).lower()
        answers = collections.Counter()
        codes = collections.Counter()
        for sock in sockets:
            data = b""
            try:
                while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "none"
            answers[status] += 1
            if b'"code":"' in data:
                codes[data.split(b'"code":"')[1].split(b'"')[0].decode()] += 1
    finally:
        for sock in sockets:
            sock.close()
    return {
        "stalled": stalled,
        "good_status": good.status_code,
        "good_correct": good_correct,
        "good_seconds": round(good_seconds, 2),
        "stalled_answers": dict(answers),
        "stalled_codes": dict(codes),
    }


def kill_ocr_replica(url: str, clients: int = 4, before_s: float = 5, after_s: float = 60,
                     back_within_s: float = 60) -> dict:
    """kill -9 of one OCR replica process under load; failures after it, and time until the count is back."""
    expected = running_replicas().get("OCRModel", 0)
    with ClientLoad(url, clients) as load:
        time.sleep(before_s)
        # One of this application's replicas: another application's OCRModel may share the cluster.
        victim = next(a for a in serve_actors().values() if a["deployment"] == "OCRModel" and a["app"] in ("ocr", None))
        killed_at = time.monotonic()
        os.kill(victim["pid"], signal.SIGKILL)
        back_s = dipped_s = None
        dipped = False
        while time.monotonic() - killed_at < max(after_s, back_within_s):
            count = running_replicas().get("OCRModel", 0)
            if not dipped and count < expected:
                dipped, dipped_s = True, time.monotonic() - killed_at
            if back_s is None and dipped and count >= expected:
                back_s = time.monotonic() - killed_at
            if back_s is not None and time.monotonic() - killed_at >= after_s:
                break
            time.sleep(0.25)
        end = time.monotonic()
    return {
        "clients": clients,
        "victim_pid": victim["pid"],
        "replicas_expected": expected,
        "count_dipped": dipped,
        # Noticing the death is the service's part; the rest is one replica's cold start (a worker
        # process, the imports, the models and the warm-up), which a loaded machine stretches.
        "seconds_until_noticed": None if dipped_s is None else round(dipped_s, 1),
        "seconds_until_back": None if back_s is None else round(back_s, 1),
        "after_kill": load.summary(killed_at, end + load.timeout_s),
        "before_kill": load.summary(None, killed_at),
    }


def actor_replicas() -> dict[str, str]:
    """Replica identity -> deployment, from the GCS (for a process connected to the cluster)."""
    return {aid: actor["deployment"] for aid, actor in serve_actors().items()}


def rolling_update(url: str, updates: list[tuple[str, Callable[[], None]]], clients: int = 2,
                   settle_s: float = 3.0, replicas: Callable[[], dict[str, str]] = actor_replicas,
                   expect_text: Optional[str] = GOOD_TEXT) -> dict:
    """Each update (a callable that deploys and returns once it is in force) under load.

    `replicas()` names the running replicas, so each step reports which deployments it restarted.
    """
    steps = []
    with ClientLoad(url, clients, expect_text=expect_text) as load:
        time.sleep(settle_s)
        for name, apply in updates:
            before = replicas()
            started = time.monotonic()
            apply()
            after = replicas()
            steps.append({
                "update": name,
                "seconds": round(time.monotonic() - started, 1),
                "restarted": sorted({deployment for rid, deployment in before.items() if rid not in after}),
            })
            time.sleep(settle_s)
    return {"clients": clients, "updates": steps, "load": load.summary()}


RSS_GROWTH_LIMIT_PCT = 5  # the soak's criterion, and make test's short version's (tests/test_hardening.py)


def rss_growth(url: str, requests: int, baseline_at: int, clients: int = 4) -> dict:
    """RSS of every replica process at request `baseline_at` and at the end, PDFs among the requests."""
    bodies = [(good_png(), "image/png"), (good_pdf(2), "application/pdf"), (good_png("soak 4711 line"), "image/png")]
    load = ClientLoad(url, clients, bodies=bodies)
    baseline: dict[str, Optional[float]] = {}
    actors = serve_actors()
    started = time.monotonic()
    with load:
        while len(load.results) < requests and time.monotonic() - started < 3600:
            if not baseline and len(load.results) >= baseline_at:
                baseline = {aid: rss_mb(a["pid"]) for aid, a in actors.items()}
            time.sleep(0.2)
    final = {aid: rss_mb(a["pid"]) for aid, a in serve_actors().items()}
    per_replica = {}
    for aid, actor in actors.items():
        first, last = baseline.get(aid), final.get(aid)
        growth = None if not first or last is None else round(100 * (last - first) / first, 2)
        per_replica[f"{actor['deployment']}:{actor['pid']}"] = {"rss_at_baseline_mb": first, "rss_end_mb": last,
                                                              "growth_pct": growth}
    return {
        "requests": len(load.results),
        "baseline_at": baseline_at,
        "seconds": round(time.monotonic() - started, 1),
        "load": load.summary(),
        "per_replica": per_replica,
        "replicas_replaced": sorted(set(actors) ^ set(final)),
    }


def long_polls(url: str, holders: int, job_id: str, good_body: bytes, wait_s: float = 60, retries: int = 5) -> dict:
    """`holders` long-polls (?wait=) on one running job at once, then a good /v1/ocr: it must still get 200.

    A poll answered 503 is retried up to `retries` times; `poll_answers` counts the last answers, `retried_503`
    the 503s seen on the way.
    """
    import asyncio

    retried = [0]

    async def scenario():
        limits = httpx.Limits(max_connections=holders + 10, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=url, timeout=wait_s + 60, limits=limits) as http:
            async def poll():
                # As a client should: a retryable 503 (the proxy's queue was full for an instant) is asked again.
                for _ in range(retries):
                    answer = await http.get(f"/v1/jobs/{job_id}", params={"wait": wait_s})
                    if answer.status_code != 503:
                        break
                    retried[0] += 1
                    await asyncio.sleep(1.0)
                return answer

            polls = [asyncio.ensure_future(poll()) for _ in range(holders)]
            await asyncio.sleep(2.0)
            started = time.monotonic()
            good = await http.post("/v1/ocr", content=good_body, headers={"content-type": "image/png"})
            good_s = time.monotonic() - started
            answers = await asyncio.gather(*polls, return_exceptions=True)
            return good, good_s, answers

    good, good_s, answers = asyncio.run(scenario())
    statuses = collections.Counter(str(a.status_code) if isinstance(a, httpx.Response) else type(a).__name__
                                   for a in answers)
    return {"holders": holders, "good_status": good.status_code, "good_seconds": round(good_s, 2),
            "good_correct": good.status_code == 200 and GOOD_TEXT in " ".join(good.json()["text"].split()).lower(),
            "poll_answers": dict(statuses), "retried_503": retried[0]}


def jobs_lifecycle(url: str, document: bytes, expect: str, clients: int = 2, seconds: float = 60,
                   ocr_clients: int = 2) -> dict:
    """`clients` loops of submit -> long-poll -> result -> delete -> 404, beside /v1/ocr load; every step checked."""
    cycles, failures = collections.Counter(), []
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def cycle(client: httpx.Client) -> Optional[str]:
        accepted = client.post("/v1/jobs", files={"file": ("doc.pdf", document, "application/pdf")})
        if accepted.status_code != 202:
            return f"submit {accepted.status_code}"
        job = accepted.json()
        deadline = time.monotonic() + 120
        while job["status"] in ("queued", "running"):
            if time.monotonic() > deadline:
                return f"not finished: {job['status']}"
            answer = client.get(job["status_url"], params={"wait": 10})
            if answer.status_code != 200:
                return f"status {answer.status_code}"
            job = answer.json()
        result = client.get(job["result_url"])
        if job["status"] != "succeeded" or result.status_code != 200 or expect not in result.json()["text"]:
            return f"result {job['status']} {result.status_code}"
        if client.delete(job["status_url"]).status_code != 204:
            return "delete"
        if client.get(job["status_url"]).status_code != 404:
            return "still there after delete"
        return None

    def loop() -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            while time.monotonic() < stop:
                why = cycle(client)
                with lock:
                    cycles["failed" if why else "ok"] += 1
                    if why:
                        failures.append(why)

    with ClientLoad(url, ocr_clients) as load:
        threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(seconds + 300)
    return {"job_clients": clients, "seconds": seconds, "cycles": dict(cycles), "failures": failures[:10],
            "ocr_load": load.summary()}
