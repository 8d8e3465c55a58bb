"""`python -m app.client FILE_OR_DIR... --out DIR` (also `ocr-client`): OCR many documents through jobs.

Each file is submitted as a job (POST /v1/jobs) with an Idempotency-Key made from its bytes
and page selection, so a client restarted mid-run picks its jobs up again instead of sending
them twice, and a file whose output is already complete is skipped. One progress bar counts
pages done over the pages of every submitted job. 503 and 429 are retried after their
Retry-After; a service that is restarting is waited for. Each input gives `<stem>.md` and
`<stem>.json` (written whole, then renamed); a table sums up, and the exit status is 1 if any
file failed. The key comes from --api-key, --api-key-file or $OCR_API_KEY (the file or the
environment keep it out of `ps`).

A file counts as done when `<stem>.json` names the same content (its sha256 and page
selection), not merely the same name. The key is never sent in clear to another machine: an
http:// URL that is not loopback is refused unless --insecure; https verifies the server
against --ca-bundle (or the system's CAs). Job URLs from the server are followed only on the
--url's own origin, and server text is printed with control characters removed.
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import os
import ssl
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union
from urllib.parse import urlsplit

import httpx
from tqdm import tqdm

SUFFIXES = {".pdf", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp"}
CONTENT_TYPES = {".pdf": "application/pdf", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                 ".tif": "image/tiff", ".tiff": "image/tiff", ".bmp": "image/bmp", ".gif": "image/gif",
                 ".webp": "image/webp"}
FINISHED = ("succeeded", "partial", "failed", "canceled")


@dataclass
class Outcome:
    path: Path
    stem: str
    status: str  # a job status, "skipped", or "error"
    pages: int = 0
    failed_pages: int = 0
    seconds: float = 0.0
    detail: str = ""


def find_inputs(arguments: list[str]) -> list[Path]:
    found: list[Path] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"error: {argument}: no such file or directory")
    return found


def output_stems(paths: list[Path]) -> dict[Path, str]:
    """<stem> per input; two inputs with one stem (a/x.pdf, b/x.pdf) get a short hash of their path."""
    counts: dict[str, int] = {}
    for path in paths:
        counts[path.stem] = counts.get(path.stem, 0) + 1
    return {path: path.stem if counts[path.stem] == 1 else
            f"{path.stem}-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]}" for path in paths}


def source_of(path: Path, pages: Optional[str]) -> dict:
    """What the output of one input was made from: it is done only for this very content and selection."""
    return {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "pages": pages or None}


def is_complete(out: Path, stem: str, source: dict) -> bool:
    """The JSON is written last, so its presence (whole, parseable, of the same source) means the file is done."""
    try:
        body = json.loads((out / f"{stem}.json").read_text())
    except (OSError, ValueError):
        return False
    return ((out / f"{stem}.md").exists() and body.get("status") in ("succeeded", "partial")
            and body.get("source") == source)


def printable(text: str) -> str:
    """Server text for a terminal: no escape sequences or other control characters (tabs and newlines kept)."""
    return "".join(ch for ch in str(text) if ch in "\t\n" or (ch >= " " and not 0x7f <= ord(ch) <= 0x9f))


def check_transport(url: str, api_key: Optional[str], insecure: bool) -> None:
    """Refuse to send a key in clear over the network: http:// is for loopback only, unless --insecure."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise SystemExit(f"error: --url {url}: http:// or https:// only")
    if api_key and parts.scheme == "http" and not _is_loopback(parts.hostname or "") and not insecure:
        raise SystemExit(f"error: --url {url} would send the API key in clear to another machine. Use https:// "
                         "(with --ca-bundle for the fleet's own CA), or --insecure if the network is trusted.")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def write_atomically(path: Path, data: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(data)
    os.replace(temporary, path)


class Client:
    def __init__(self, url: str, api_key: Optional[str], timeout_s: float = 120.0, give_up_after_s: float = 600.0,
                 poll_s: float = 1.0, verify: Union[ssl.SSLContext, bool] = True):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s, verify=verify,
                                  follow_redirects=False)
        self._origin = urlsplit(url)[:2]
        self._give_up_after_s = give_up_after_s
        self.poll_s = poll_s

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        """One call; 503/429 wait their Retry-After, a service that is down or restarting is waited for.
        `path` may come from the server (a job's status_url): only a path on this origin is followed."""
        target = urlsplit(path)
        if (target.scheme or target.netloc) and target[:2] != self._origin or not target.path.startswith("/"):
            raise ValueError(f"the server pointed at {printable(path)[:200]!r}, off the --url's origin: not followed")
        started, attempt = time.monotonic(), 0
        while True:
            failure: Optional[httpx.TransportError] = None
            try:
                response = self._http.request(method, path, **kwargs)
                if response.status_code not in (429, 503):
                    return response
                delay = _retry_after(response)
            except httpx.TransportError as exc:
                if _certificate_refused(exc):
                    raise  # waiting does not make a wrong certificate right
                failure, delay = exc, min(2.0 ** attempt, 10.0)
            if time.monotonic() - started + delay > self._give_up_after_s:
                if failure is not None:  # the last attempt reached no service: say so, not a stale answer
                    raise failure
                return response
            attempt += 1
            time.sleep(delay)

    def close(self) -> None:
        self._http.close()


def _certificate_refused(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _retry_after(response: httpx.Response) -> float:
    try:
        return min(max(float(response.headers.get("retry-after", "2")), 0.5), 60.0)
    except ValueError:
        return 2.0


def _error_text(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return printable(f"{response.status_code} {error['code']}: {error['message']}")
    except (ValueError, KeyError, TypeError):
        return printable(f"{response.status_code}: {response.text[:200]}")


class Progress:
    """One bar for all files: its total grows as jobs are submitted and their page counts known."""

    def __init__(self, disable: bool):
        self._bar = tqdm(total=0, unit="page", desc="pages", disable=disable, dynamic_ncols=True)
        self._lock = threading.Lock()

    def add_total(self, pages: int) -> None:
        with self._lock:
            self._bar.total += pages
            self._bar.refresh()

    def advance(self, pages: int) -> None:
        if pages > 0:
            with self._lock:
                self._bar.update(pages)

    def close(self) -> None:
        self._bar.close()


def process_file(client: Client, path: Path, stem: str, out: Path, pages: Optional[str],
                 progress: Progress) -> Outcome:
    started = time.monotonic()
    data = path.read_bytes()
    source = {"sha256": hashlib.sha256(data).hexdigest(), "pages": pages or None}
    key = "ocrc-" + hashlib.sha256(data + b"\0" + (pages or "").encode()).hexdigest()[:48]
    params = {"pages": pages} if pages else {}
    files = {"file": (path.name, data, CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream"))}
    response = client.request("POST", "/v1/jobs", files=files, params=params, headers={"Idempotency-Key": key})
    if response.status_code not in (200, 202):
        return Outcome(path, stem, "error", detail=_error_text(response), seconds=time.monotonic() - started)
    job = response.json()
    total = job["pages"]["total"]
    progress.add_total(total)
    shown = 0
    while True:
        counted = job["pages"]["done"] + job["pages"]["failed"]
        progress.advance(counted - shown)
        shown = max(shown, counted)
        if job["status"] in FINISHED:
            break
        time.sleep(client.poll_s)
        response = client.request("GET", job["status_url"])
        if response.status_code != 200:
            return Outcome(path, stem, "error", total, detail=_error_text(response), seconds=time.monotonic() - started)
        job = response.json()
    result = client.request("GET", job["result_url"])
    markdown = client.request("GET", job["result_url"], params={"format": "markdown"})
    if result.status_code != 200 or markdown.status_code != 200:
        return Outcome(path, stem, "error", total, detail=_error_text(result if result.status_code != 200 else markdown),
                       seconds=time.monotonic() - started)
    body = result.json()
    body["source"] = source
    write_atomically(out / f"{stem}.md", markdown.text)
    write_atomically(out / f"{stem}.json", json.dumps(body))  # last: its presence marks the file complete
    error = printable((job.get("error") or {}).get("message", ""))
    return Outcome(path, stem, job["status"], total, job["pages"]["failed"], time.monotonic() - started, error)


def summary_table(outcomes: list[Outcome]) -> str:
    rows = [("file", "status", "pages", "failed", "seconds", "detail")]
    rows += [(str(o.path), o.status, str(o.pages), str(o.failed_pages), f"{o.seconds:.1f}", o.detail[:80])
             for o in outcomes]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def api_key_from(options) -> Optional[str]:
    if options.api_key:
        return options.api_key
    if options.api_key_file:
        return Path(options.api_key_file).read_text().strip()
    return os.environ.get("OCR_API_KEY") or None


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ocr-client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="FILE_OR_DIR")
    parser.add_argument("--out", required=True, help="directory for <stem>.md and <stem>.json")
    parser.add_argument("--url", default=os.environ.get("OCR_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", help="sent as a Bearer token (prefer --api-key-file or $OCR_API_KEY)")
    parser.add_argument("--api-key-file", help="file holding the API key")
    parser.add_argument("--concurrency", type=int, default=4, help="files in flight at once")
    parser.add_argument("--pages", help="page selection for every file, e.g. 1-3,7")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between status polls")
    parser.add_argument("--give-up-after", type=float, default=600.0,
                        help="seconds one call keeps retrying a service that is down or answering 503")
    parser.add_argument("--ca-bundle", help="PEM file of the CA(s) that signed the service's certificate (https)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow sending the API key over plain http to a machine other than this one")
    parser.add_argument("--no-progress", action="store_true")
    options = parser.parse_args(argv)
    api_key = api_key_from(options)
    check_transport(options.url, api_key, options.insecure)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = find_inputs(options.inputs)
    stems = output_stems(paths)
    outcomes = {path: Outcome(path, stems[path], "skipped") for path in paths
                if is_complete(out, stems[path], source_of(path, options.pages))}
    todo = [path for path in paths if path not in outcomes]
    print(f"{len(paths)} file(s): {len(outcomes)} already done, {len(todo)} to OCR", file=sys.stderr)
    verify = ssl.create_default_context(cafile=options.ca_bundle) if options.ca_bundle else True
    client = Client(options.url, api_key, give_up_after_s=options.give_up_after, poll_s=options.poll, verify=verify)
    progress = Progress(disable=options.no_progress)
    try:
        with ThreadPoolExecutor(max_workers=max(1, options.concurrency)) as pool:
            futures = {path: pool.submit(process_file, client, path, stems[path], out, options.pages, progress)
                       for path in todo}
            for path, future in futures.items():
                try:
                    outcomes[path] = future.result()
                except Exception as exc:  # one file's failure never stops the others
                    outcomes[path] = Outcome(path, stems[path], "error",
                                             detail=printable(f"{type(exc).__name__}: {exc}"))
    finally:
        progress.close()
        client.close()
    ordered = [outcomes[path] for path in paths]
    print(summary_table(ordered))
    return 1 if any(o.status in ("failed", "error", "canceled") for o in ordered) else 0


if __name__ == "__main__":
    sys.exit(main())
