"""The doors of issue 37 under a hostile tenant, measured: what each attack costs the others.

    .venv/bin/python load/doors_check.py            # starts the service here (PP-OCR, a SQLite job store)
    .venv/bin/python load/doors_check.py --render load/results/doors_check.json

Rounds interleave the four arms, each round all four:
- chat_body: a 0.4 MB chat body of 200,000 integers in `messages`; its answer's status, time and size,
  and the slowest `/healthz` on the same service while it was parsed (a prober every 20 ms);
- logit_bias: a good page with 100,000 logit_bias entries: the status;
- pdf_calls: forty concurrent `result?format=pdf` on one kept 20-page job (a new job each round, so
  that no PDF is kept from before), and a good `/v1/ocr` sent among them: its status and time, the
  forty's statuses, and how many different PDFs came back;
- callbacks: the real CallbackSender (app/jobs/callbacks.py) in this process, one receiver answering a
  byte a second, another at once, its callback due 0.5 s into the slow one's: how late the fast one was
  delivered, against the attempt's deadline (timeout_s 2 s).
Writes load/results/doors_check.json (commit, settings, every round) and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from load.common import add_report_options, commit, machine, measure_or_render, summary  # noqa: E402

ROUNDS = 5
CALLBACK_TIMEOUT_S = 2.0


def chat_body(http: httpx.Client) -> dict:
    body = b'{"model": "x", "messages": [' + b",".join([b"0"] * 200_000) + b"]}"
    health, stop = [], threading.Event()

    def probe() -> None:
        while not stop.is_set():
            started = time.monotonic()
            http.get("/healthz")
            health.append(time.monotonic() - started)
            time.sleep(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    time.sleep(0.1)
    started = time.monotonic()
    answer = http.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    took = time.monotonic() - started
    time.sleep(0.2)
    stop.set()
    prober.join()
    return {"body_bytes": len(body), "status": answer.status_code, "code": answer.json()["error"]["code"],
            "seconds": round(took, 3), "error_bytes": len(answer.content),
            "healthz_max_ms": round(max(health) * 1000, 1), "healthz_probes": len(health)}


def logit_bias(http: httpx.Client, page: str, model: str) -> dict:
    chat = {"model": model, "logit_bias": {str(i): 1.0 for i in range(100_000)},
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": page}}]}]}
    started = time.monotonic()
    answer = http.post("/v1/chat/completions", json=chat)
    return {"status": answer.status_code, "code": answer.json()["error"]["code"],
            "seconds": round(time.monotonic() - started, 3)}


def kept_job(http: httpx.Client) -> str:
    from app.testkit.documents import numbered_pdf
    from app.testkit.jobs import wait_finished

    kept = http.post("/v1/jobs", params={"keep_document": "true"},
                     files={"file": ("kept.pdf", numbered_pdf(20, "Kept"), "application/pdf")}).json()
    wait_finished(http, kept["id"], timeout_s=600)
    return kept["result_url"]


def pdf_calls(url: str, http: httpx.Client, png: bytes) -> dict:
    result_url = kept_job(http)

    def one() -> httpx.Response:
        with httpx.Client(base_url=url, timeout=300) as own:
            return own.get(result_url, params={"format": "pdf"})

    with concurrent.futures.ThreadPoolExecutor(40) as pool:
        calls = [pool.submit(one) for _ in range(40)]
        time.sleep(0.3)
        started = time.monotonic()
        good = http.post("/v1/ocr", params={"orientation": "off"}, files={"file": ("i.png", png, "image/png")})
        took = time.monotonic() - started
        answers = [call.result() for call in calls]
    http.delete(result_url.rsplit("/", 1)[0])
    return {"ocr_status": good.status_code, "ocr_seconds": round(took, 3),
            "pdf_statuses": dict(Counter(str(a.status_code) for a in answers)),
            "distinct_pdfs": len({a.content for a in answers if a.status_code == 200})}


def callbacks() -> dict:
    from tests.test_callback_delivery import ListStore, Receiver, finished_job, secret_file  # the test's parts
    from app.jobs.callbacks import CallbackSender
    from app.settings.jobs import Callbacks

    async def scenario(key_dir: Path) -> dict:
        slow = Receiver(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 100, byte_every_s=1.0)
        fast = Receiver()
        slow_port, fast_port = await slow.start(), await fast.start()
        settings = Callbacks(allowed_hosts=[f"127.0.0.1:{slow_port}", f"127.0.0.1:{fast_port}"],
                             timeout_s=CALLBACK_TIMEOUT_S, secret_file=secret_file(key_dir, "key", b"k" * 32),
                             max_attempts=1)
        store = ListStore()
        sender = CallbackSender(settings, store)
        store.due.append(finished_job("slow", f"http://127.0.0.1:{slow_port}/hook"))
        runner = asyncio.get_running_loop().create_task(sender.run(poll_s=0.1))
        await asyncio.sleep(0.5)
        store.due.append(finished_job("fast", f"http://127.0.0.1:{fast_port}/hook"))
        due = time.monotonic()
        while len(store.recorded) < 2 and time.monotonic() - due < 30:
            await asyncio.sleep(0.02)
        runner.cancel()
        await sender.close()
        slow.close(), fast.close()
        (fast_state, fast_at), (slow_state, slow_at) = store.recorded["fast"], store.recorded["slow"]
        return {"fast_delay_s": round(fast_at - due, 3), "fast": fast_state["status"],
                "slow": slow_state["status"], "slow_error": slow_state["last_error"],
                "slow_ended_after_due_s": round(slow_at - due, 3)}

    with tempfile.TemporaryDirectory() as key_dir:
        return asyncio.run(scenario(Path(key_dir)))


def measure() -> dict:
    import base64

    from app.synthetic import png_bytes, render_text_page
    from app.testkit.service import local_service

    args = {"structure": {"mode": "off"},
            "jobs": {"store": f"sqlite:///{tempfile.mkdtemp(prefix='doors-')}/jobs.sqlite3"}}
    png = png_bytes(render_text_page(["INVOICE 4711", "Total 57.80 EUR"]))
    rounds = []
    with local_service(args) as url, httpx.Client(base_url=url, timeout=300) as http:
        model = http.get("/v1/models").json()["data"][0]["id"]
        page = f"data:image/png;base64,{base64.b64encode(png).decode()}"
        for arm in ("chat_body", "logit_bias", "pdf_calls", "callbacks"):  # warm every arm once, unrecorded
            run_arm(arm, url, http, png, page, model)
        for number in range(ROUNDS):
            rounds.append({arm: run_arm(arm, url, http, png, page, model)
                           for arm in ("chat_body", "logit_bias", "pdf_calls", "callbacks")})
            print(rounds[-1], flush=True)
    return {"commit": commit(), "machine": machine(), "rounds": rounds,
            "settings": {"engine": "ppocr", "rounds": ROUNDS, "callback_timeout_s": CALLBACK_TIMEOUT_S,
                         "kept_job_pages": 20, "pdf_calls": 40}}


def run_arm(arm: str, url: str, http: httpx.Client, png: bytes, page: str, model: str) -> dict:
    if arm == "chat_body":
        return chat_body(http)
    if arm == "logit_bias":
        return logit_bias(http, page, model)
    if arm == "pdf_calls":
        return pdf_calls(url, http, png)
    return callbacks()


def passed(report: dict) -> bool:
    return all(r["chat_body"]["status"] // 100 == 4 and r["chat_body"]["seconds"] < 1
               and r["chat_body"]["error_bytes"] < 2048 and r["chat_body"]["healthz_max_ms"] < 200
               and r["logit_bias"]["status"] == 400 and r["pdf_calls"]["ocr_status"] == 200
               and r["callbacks"]["fast"] == "delivered"
               and r["callbacks"]["fast_delay_s"] < report["settings"]["callback_timeout_s"]
               for r in report["rounds"])


def render(report: dict) -> str:
    rounds = report["rounds"]

    def cell(arm: str, key: str, scale: float = 1.0, digits: int = 1) -> str:
        stats = summary([r[arm][key] * scale for r in rounds])
        return f"{stats['median']:.{digits}f} ({stats['min']:.{digits}f}-{stats['max']:.{digits}f})"

    statuses = Counter()
    for r in rounds:
        statuses.update(r["pdf_calls"]["pdf_statuses"])
    lines = ["| attack | what the others saw, median (min-max) of the rounds | the attack's answer |", "|---|---|---|",
             f"| 0.4 MB chat body of 200,000 integers | slowest `/healthz` meanwhile {cell('chat_body', 'healthz_max_ms')} ms"
             f" | {sorted({r['chat_body']['status'] for r in rounds})} `{rounds[0]['chat_body']['code']}` in "
             f"{cell('chat_body', 'seconds', 1000, 0)} ms, {max(r['chat_body']['error_bytes'] for r in rounds)} "
             "bytes at most |",
             f"| 100,000 `logit_bias` entries | - | {sorted({r['logit_bias']['status'] for r in rounds})} "
             f"`{rounds[0]['logit_bias']['code']}` in {cell('logit_bias', 'seconds', 1000, 0)} ms |",
             f"| 40 concurrent `result?format=pdf` on one kept 20-page job | a good `/v1/ocr`: "
             f"{sorted({r['pdf_calls']['ocr_status'] for r in rounds})} in {cell('pdf_calls', 'ocr_seconds', 1000, 0)}"
             f" ms | {dict(sorted(statuses.items()))} over {len(rounds)} rounds; different PDFs per round: "
             f"{sorted({r['pdf_calls']['distinct_pdfs'] for r in rounds})} |",
             f"| a callback receiver answering a byte a second | another job's callback delivered "
             f"{cell('callbacks', 'fast_delay_s', 1000, 0)} ms after it was due (deadline "
             f"{report['settings']['callback_timeout_s']:g} s) | `{rounds[0]['callbacks']['slow']}`, "
             f"`{rounds[0]['callbacks']['slow_error']}`, ended {cell('callbacks', 'slow_ended_after_due_s', 1, 2)} s "
             "after the other was due |"]
    lines += ["", f"{len(rounds)} interleaved rounds after one warm-up each, commit {report['commit']}, "
                  f"{report['machine']['cpus']} CPUs, PP-OCR; every bound of issue 37 held: "
                  f"{'yes' if passed(report) else 'NO'}."]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_report_options(parser, "doors_check.json")
    options = parser.parse_args()
    return measure_or_render(options, measure, render, passed)


if __name__ == "__main__":
    sys.exit(main())
