"""`python -m app.client FILE_OR_DIR... --out DIR` (also `ocr-client`): OCR many documents through jobs.

Each file is submitted as a job (POST /v1/jobs) with an Idempotency-Key made from its bytes
and page selection, so a client restarted mid-run picks its jobs up again instead of sending
them twice, and a file whose output is already complete is skipped. One progress bar counts
pages done over the pages of every submitted job, from each job's event stream (polled where the
service has none). 503 and 429 are retried after their Retry-After; a service that is restarting
is waited for. Each input gives `<stem>.json` and a file per --format (`<stem>.md` by default;
`.pdf`, a searchable PDF; `.hocr`; `.alto.xml`), each written whole, then renamed; a table sums
up, and the exit status is 1 if any file failed. The key comes from --api-key, --api-key-file or $OCR_API_KEY (the file or the
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

from tqdm import tqdm

from app.client_transport import Client, EventsUnavailable, check_transport, terminal_safe
from app.client_transport import error_text as _error_text

__all__ = ["Client", "Progress", "check_transport", "is_complete", "main", "process_file", "source_of"]

SUFFIXES = {".pdf", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp"}
CONTENT_TYPES = {".pdf": "application/pdf", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
                 ".tif": "image/tiff", ".tiff": "image/tiff", ".bmp": "image/bmp", ".gif": "image/gif",
                 ".webp": "image/webp"}
FINISHED = ("succeeded", "partial", "failed", "canceled")
SUFFIX_OF = {"markdown": ".md", "pdf": ".pdf", "hocr": ".hocr", "alto": ".alto.xml"}  # --format's outputs


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


def is_complete(out: Path, stem: str, source: dict, formats: tuple = ("markdown",)) -> bool:
    """The JSON is written last, so its presence (whole, parseable, of the same source) beside every asked
    format means the file is done."""
    try:
        body = json.loads((out / f"{stem}.json").read_text())
    except (OSError, ValueError):
        return False
    return (all((out / f"{stem}{SUFFIX_OF[form]}").exists() for form in formats)
            and body.get("status") in ("succeeded", "partial") and body.get("source") == source)


def write_atomically(path: Path, data: Union[str, bytes]) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    if isinstance(data, bytes):
        temporary.write_bytes(data)
    else:
        temporary.write_text(data)
    os.replace(temporary, path)


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
                 progress: Progress, formats: tuple = ("markdown",), source: Optional[dict] = None,
                 options: Optional[dict] = None) -> Outcome:
    """`source`: source_of(path, pages) where the caller has it already (the file is not hashed twice).
    `options`: the request's fields (structure, pdf_text, lang, orientation) where set."""
    started = time.monotonic()
    data = path.read_bytes()
    source = source or {"sha256": hashlib.sha256(data).hexdigest(), "pages": pages or None}
    keep = "pdf" in formats  # the searchable PDF needs the document kept past the job's end
    options = {name: value for name, value in (options or {}).items() if value}
    key_material = f"{source['sha256']}\0{pages or ''}" + ("\0pdf" if keep else "")  # the same job on a rerun
    key_material += "".join(f"\0{name}={value}" for name, value in sorted(options.items()))
    key = "ocrc-" + hashlib.sha256(key_material.encode()).hexdigest()[:48]
    params = {"pages": pages} if pages else {}
    params.update(options)
    if keep:
        params["keep_document"] = "true"
    files = {"file": (path.name, data, CONTENT_TYPES.get(path.suffix.lower(), "application/octet-stream"))}
    response = client.request("POST", "/v1/jobs", files=files, params=params, headers={"Idempotency-Key": key})
    if response.status_code not in (200, 202):
        return Outcome(path, stem, "error", detail=_error_text(response), seconds=time.monotonic() - started)
    job = response.json()
    total = job["pages"]["total"]
    progress.add_total(total)
    try:
        job = follow(client, job, progress)
    except JobLost as lost:
        return Outcome(path, stem, "error", total, detail=str(lost), seconds=time.monotonic() - started)
    outputs = {}
    for form in ("json", *formats):
        answer = client.request("GET", job["result_url"], params={"format": form})
        if answer.status_code != 200:
            return Outcome(path, stem, "error", total, detail=_error_text(answer), seconds=time.monotonic() - started)
        outputs[form] = answer.content
    for form in formats:
        write_atomically(out / f"{stem}{SUFFIX_OF[form]}", outputs[form])
    body = json.loads(outputs["json"])
    body["source"] = source
    write_atomically(out / f"{stem}.json", json.dumps(body))  # last: its presence marks the file complete
    error = terminal_safe((job.get("error") or {}).get("message", ""))
    return Outcome(path, stem, job["status"], total, job["pages"]["failed"], time.monotonic() - started, error)


class JobLost(Exception):
    """The job's status could not be read to its end."""


def follow(client: Client, job: dict, progress: Progress) -> dict:
    """The job's status once it ends; the bar advances with its page events, or with polls where the service
    has no event stream to give."""
    shown = 0

    def show(counts: dict) -> None:
        nonlocal shown
        reached = counts["done"] + counts["failed"]
        progress.advance(reached - shown)
        shown = max(shown, reached)

    show(job["pages"])
    if job["status"] not in FINISHED:
        try:
            for event, data in client.events(job["status_url"] + "/events"):
                if event == "page":
                    show(data)
                elif event == "end" and data.get("status") in FINISHED:
                    job = data
        except EventsUnavailable:
            pass  # polled below
    while job["status"] not in FINISHED:
        time.sleep(client.poll_s)
        response = client.request("GET", job["status_url"])
        if response.status_code != 200:
            raise JobLost(_error_text(response))
        job = response.json()
        show(job["pages"])
    show(job["pages"])
    return job


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


def output_formats(asked: Optional[list]) -> tuple:
    formats = tuple(dict.fromkeys(f.strip() for value in asked or ["markdown"] for f in value.split(",") if f.strip()))
    unknown = [f for f in formats if f not in SUFFIX_OF]
    if unknown or not formats:
        raise SystemExit(f"error: --format {','.join(unknown)}: one of {', '.join(SUFFIX_OF)} (the JSON is always "
                         "written)")
    return formats


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="ocr-client", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="FILE_OR_DIR")
    parser.add_argument("--out", required=True, help="directory for <stem>.json and one file per --format")
    parser.add_argument("--format", action="append", metavar="FORMAT",
                        help="markdown (<stem>.md, the default), pdf (<stem>.pdf, searchable), hocr (<stem>.hocr), "
                        "alto (<stem>.alto.xml); several: repeat it or separate by commas")
    parser.add_argument("--url", default=os.environ.get("OCR_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--api-key", help="sent as a Bearer token (prefer --api-key-file or $OCR_API_KEY)")
    parser.add_argument("--api-key-file", help="file holding the API key")
    parser.add_argument("--concurrency", type=int, default=4, help="files in flight at once")
    parser.add_argument("--pages", help="page selection for every file, e.g. 1-3,7")
    parser.add_argument("--structure", choices=("auto", "off"),
                        help="layout regions and tables (auto), or lines only (off); default: the service's")
    parser.add_argument("--pdf-text", choices=("auto", "ocr", "layer"),
                        help="a PDF page's own text layer: read where usable (auto), never (ocr), wherever present (layer)")
    parser.add_argument("--lang", choices=("auto", "deu-frak", "latin"), help="script hint (docs/api.md)")
    parser.add_argument("--orientation", help="auto, off, or an angle: 0, 90, 180, 270 (docs/api.md)")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between status polls")
    parser.add_argument("--give-up-after", type=float, default=600.0,
                        help="seconds one call keeps retrying a service that is down or answering 503")
    parser.add_argument("--ca-bundle", help="PEM file of the CA(s) that signed the service's certificate (https)")
    parser.add_argument("--insecure", action="store_true",
                        help="allow sending the API key over plain http to a machine other than this one")
    parser.add_argument("--no-progress", action="store_true")
    options = parser.parse_args(argv)
    formats = output_formats(options.format)
    api_key = api_key_from(options)
    check_transport(options.url, api_key, options.insecure)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    paths = find_inputs(options.inputs)
    stems = output_stems(paths)
    sources = {path: source_of(path, options.pages) for path in paths}
    outcomes = {path: Outcome(path, stems[path], "skipped") for path in paths
                if is_complete(out, stems[path], sources[path], formats)}
    todo = [path for path in paths if path not in outcomes]
    print(f"{len(paths)} file(s): {len(outcomes)} already done, {len(todo)} to OCR", file=sys.stderr)
    verify = ssl.create_default_context(cafile=options.ca_bundle) if options.ca_bundle else True
    client = Client(options.url, api_key, give_up_after_s=options.give_up_after, poll_s=options.poll, verify=verify)
    progress = Progress(disable=options.no_progress)
    try:
        with ThreadPoolExecutor(max_workers=max(1, options.concurrency)) as pool:
            fields = {"structure": options.structure, "pdf_text": options.pdf_text, "lang": options.lang,
                      "orientation": options.orientation}
            futures = {path: pool.submit(process_file, client, path, stems[path], out, options.pages, progress,
                                         formats, sources[path], fields)
                       for path in todo}
            for path, future in futures.items():
                try:
                    outcomes[path] = future.result()
                except Exception as exc:  # one file's failure never stops the others
                    outcomes[path] = Outcome(path, stems[path], "error",
                                             detail=terminal_safe(f"{type(exc).__name__}: {exc}"))
    finally:
        progress.close()
        client.close()
    ordered = [outcomes[path] for path in paths]
    print(summary_table(ordered))
    return 1 if any(o.status in ("failed", "error", "canceled") for o in ordered) else 0


if __name__ == "__main__":
    sys.exit(main())
