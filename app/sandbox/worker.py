"""The decoder process: `python -m app.sandbox.worker MEMORY_MB LIMITS_JSON BUDGET_JSON [PAGE_FD]`.

It caps its own address space before it reads a byte of input, then serves one
document at a time from stdin, one page per `next`:

  parent -> worker   open (blob: the document) | next | close | count (blob: the document)
                     | searchable (blob: the page results' JSON, then the document)
  worker -> parent   ready | opened | page (blob: raw pixels) | end | counted | rendered (blob: a PDF) | error

A page travels as its raw 8-bit pixels (mode L or RGB, row by row, at engine size): no
encoding here and no decoding in the OCR replica (load/cpu_cost.py measured the choices).
Given PAGE_FD (the parent's SharedPageBuffer), the pixels are left there and the page frame
names their length (`shared_bytes`) instead of carrying them.

Everything it computes is pure `app.sandbox.documents`; what runs here can only hurt this process.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import Optional

# One thread for every numeric library: a decoder is one page at a time, and thread
# pools reserve address space that would count against the cap.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"


def cap_resources(memory_mb: int) -> None:
    """Before a byte of input is read: memory, CPU time, no files written, no core, no new privileges."""
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from app.sandbox.process import CPU_LIMIT_S

    resource.setrlimit(resource.RLIMIT_CPU, (CPU_LIMIT_S, CPU_LIMIT_S + 10))
    # Pages leave through the pipe or an mmap of the parent's memfd, neither of which counts:
    # a decoder has no file to write, so any write to one fails (EFBIG; Python ignores SIGXFSZ).
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash on a hostile file leaves no core dump
    sys.dont_write_bytecode = True
    no_new_privileges()


def no_new_privileges() -> None:
    """PR_SET_NO_NEW_PRIVS: no setuid binary or file capability can raise what an exploited decoder may do."""
    try:
        import ctypes

        if ctypes.CDLL("libc.so.6", use_errno=True).prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    except (OSError, AttributeError):
        if sys.platform.startswith("linux"):
            raise  # on Linux this must hold; elsewhere there is no such flag


def die_with_parent() -> None:
    """Linux: the kernel kills this process when the replica that started it dies, even mid-render."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # elsewhere a worker still ends at the EOF of its stdin
    if os.getppid() == 1:
        sys.exit(0)  # the parent died before the prctl took effect


def error_header(exc: BaseException) -> dict:
    from app.errors import OCRServiceError

    if isinstance(exc, OCRServiceError):
        return {"type": "error", "class": type(exc).__name__, "code": exc.code, "message": exc.message}
    if isinstance(exc, MemoryError):
        return {"type": "error", "class": "MemoryError", "code": "document_too_complex", "message": ""}
    return {"type": "error", "class": "UnprocessableDocument", "code": "unprocessable_document",
            "message": f"The document could not be decoded ({type(exc).__name__})."}


class Session:
    """One open document and the page iterator over it."""

    def __init__(self, limits, budget: dict, shared=None):
        self._limits = limits
        self._budget = budget
        self._shared = shared  # SharedPageBuffer, or None: pixels go in the frame
        self._pages = None

    def open(self, header: dict, blob: bytes) -> dict:
        from app.sandbox.documents import iter_pages
        from app.page_size import InputBudget

        self.close()
        target = InputBudget(self._budget["max_side"], self._budget["max_pixels"])
        limits = self._limits
        if header.get("max_pages"):  # a job's chunk: its pages were counted under jobs.max_pages
            limits = limits.model_copy(update={"max_pages": int(header["max_pages"])})
        self._pages = iter_pages(blob, header.get("content_type"), header.get("pages"), limits, target,
                                 header.get("pdf_text") or "ocr")
        return {"type": "opened"}

    def next(self) -> tuple[dict, bytes]:
        if self._pages is None:
            return {"type": "end"}, b""
        start = time.perf_counter()
        page = next(self._pages, None)
        if page is None:
            self.close()
            return {"type": "end"}, b""
        decoded = time.perf_counter()
        (width, height), mode, pixels = self._engine_sized(page)
        source_width, source_height = page.source
        header = {
            "type": "page", "page_number": page.page_number, "width": width, "height": height,
            "mode": mode, "source_width": source_width, "source_height": source_height,
            "scale": width / source_width, "dpi": page.dpi,
            "decode_ms": round((decoded - start) * 1000, 1),
            "resize_encode_ms": round((time.perf_counter() - decoded) * 1000, 1),
        }
        if page.text_layer is not None:  # the PDF's own text: its lines, and whether the page is read from them
            header["text_layer"] = {"use": page.text_layer.use, "note": page.text_layer.note,
                                    "lines": [line.as_json() for line in page.text_layer.lines] if page.text_layer.use else []}
        shared_bytes = self._shared.write(pixels) if self._shared else None
        if shared_bytes is not None:
            header["shared_bytes"] = shared_bytes
            return header, b""
        return header, pixels

    def _engine_sized(self, page) -> tuple[tuple[int, int], str, bytes | memoryview]:
        """The page within the engine's budget, as raw rows: a rendered PDF page's pixels as
        they are (PDFium rendered them at that size), any other image resized by Pillow."""
        import numpy as np

        from app.page_size import InputBudget, fit_to_budget

        max_side, max_pixels = self._budget["max_side"], self._budget["max_pixels"]
        if isinstance(page.content, np.ndarray) and InputBudget(max_side, max_pixels).scale(*page.size) >= 1.0:
            return page.size, "RGB", memoryview(np.ascontiguousarray(page.content)).cast("B")
        image, _ = fit_to_budget(page.image, max_side, max_pixels)
        return image.size, image.mode, image.tobytes()

    def count(self, header: dict, blob: bytes) -> dict:
        """The page numbers a selection names, for a job; nothing is rendered."""
        from app.sandbox.documents import select_pages

        self.close()
        selected = select_pages(blob, header.get("content_type"), header.get("pages"), int(header["max_pages"]))
        return {"type": "counted", "pages": selected}

    def searchable(self, header: dict, blob: bytes) -> tuple[dict, bytes]:
        """The document as a searchable PDF, its text layer from the page results in the header."""
        from app.sandbox.searchable import write_searchable_pdf

        self.close()
        split = int(header["pages_bytes"])  # the blob: the page results' JSON, then the document
        pages = json.loads(bytes(blob[:split]))
        return {"type": "rendered"}, write_searchable_pdf(bytes(blob[split:]), header.get("content_type"), pages,
                                                        self._limits)

    def close(self) -> None:
        if self._pages is not None:
            self._pages.close()
            self._pages = None


def serve_forever(stdin, stdout, session: Session, confinement: Optional[dict] = None) -> None:
    from app.sandbox.protocol import ProtocolError, frame_head, read_frame

    def send(header: dict, blob: bytes = b"") -> None:
        stdout.write(frame_head(header, len(blob)))
        stdout.write(blob)
        stdout.flush()

    send({"type": "ready", "pid": os.getpid(), "confinement": confinement or {}})
    while True:
        try:
            header, blob = read_frame(stdin)
        except ProtocolError:
            return  # the parent went away: nothing left to do
        kind = header["type"]
        if kind == "close":
            session.close()
            continue
        try:
            if kind == "open":
                send(session.open(header, blob))
            elif kind == "count":
                send(session.count(header, blob))
            elif kind == "searchable":
                send(*session.searchable(header, blob))
            elif kind == "next":
                send(*session.next())
            else:
                send({"type": "error", "class": "BadRequest", "code": "bad_request", "message": f"unknown {kind}"})
        except BaseException as exc:  # noqa: BLE001 - every failure is reported, then the document is dropped
            session.close()
            send(error_header(exc))
            if isinstance(exc, MemoryError):
                return  # the heap may be in pieces: exit and let the parent start a fresh worker


def enter_sandbox(memory_mb: int) -> dict:
    """Everything a decoder gives up before it reads a byte of input (tests/sandbox_probe.py runs hostile
    code after exactly this): rlimits, the parent-death signal, then app/sandbox/confine.py's layers."""
    cap_resources(memory_mb)
    die_with_parent()
    from app.sandbox.confine import confine

    return confine()


def main(argv: list[str]) -> int:
    memory_mb, limits_json, budget_json = int(argv[1]), argv[2], argv[3]
    # The protocol owns fd 1; anything a library prints goes to stderr (the replica's log) instead.
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    from app.config import DecodeLimits
    from app.sandbox.protocol import SharedPageBuffer

    shared = SharedPageBuffer.attach(int(argv[4])) if len(argv) > 4 else None
    session = Session(DecodeLimits.model_validate(json.loads(limits_json)), json.loads(budget_json), shared)
    confinement = enter_sandbox(memory_mb)
    serve_forever(sys.stdin.buffer, protocol_out, session, confinement)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
