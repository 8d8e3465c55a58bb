"""The parent side of the sandbox: a pool of decoder processes owned by one Preprocessor replica.

Blocking pipe I/O runs in the pool's own threads (one per worker), never in the
event loop and never in the shared default executor, so documents waiting on a slow
render cannot starve the replica's other work.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import AsyncIterator, Optional

from app.config import DecodeLimits
from app.errors import (
    BadRequest,
    DocumentTooComplex,
    PayloadTooLarge,
    ServiceUnavailable,
    UnprocessableDocument,
    UnsupportedMediaType,
)
from app.sandbox.process import CPU_LIMIT_S, CPU_RETIRE_SHARE, DecoderDied, DecoderProcess, DecoderTimeout
from app.sandbox.protocol import ProtocolError, RenderedPage, page_from_frame

logger = logging.getLogger("ray.serve")

# The only error classes a worker may name; anything else reads as an undecodable document.
_WORKER_ERRORS = {cls.__name__: cls for cls in
                  (BadRequest, PayloadTooLarge, UnsupportedMediaType, UnprocessableDocument, DocumentTooComplex)}
class SandboxRetired(ServiceUnavailable):
    """A document reached a sandbox that reconfigure() retired before it got a worker: the owner
    hands it to the new sandbox (never raised once a page has been served)."""


class DecodeSandbox:
    """`workers` decoder processes; each document holds one from `open` to its last page."""

    def __init__(self, limits: DecodeLimits, max_side: int, max_pixels: int, workers: int):
        self._limits = limits
        self._max_side, self._max_pixels = max_side, max_pixels
        decode_limits = limits.model_dump(include=set(DecodeLimits.model_fields))
        self._command = [
            sys.executable, "-m", "app.sandbox.worker", str(limits.decode_memory_mb),
            json.dumps(decode_limits), json.dumps({"max_side": max_side, "max_pixels": max_pixels}),
        ]
        self._retired = False
        self._lent = 0  # workers out with a document or a count
        self._slots = asyncio.Semaphore(workers)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="decoder")
        self._max_blob = max_pixels * 3 + (1 << 20)  # an RGB page within budget, or a document's count
        self._idle = [self._start() for _ in range(workers)]
        self.stats = {"documents": 0, "pages": 0, "timeouts": 0, "memory": 0, "crashes": 0, "replaced": 0}
        self.confinement: Optional[dict] = None  # what the last ready worker gave up (app/sandbox/confine.py)

    async def pages(self, data: bytes, content_type: Optional[str], pages: Optional[str],
                    label: str = "", max_pages: Optional[int] = None,
                    pdf_text: str = "ocr") -> AsyncIterator[RenderedPage]:
        """The document's pages in order. A broken limit raises DocumentTooComplex and replaces the worker.
        `max_pages` replaces limits.max_pages for this document (a job's chunk, counted beforehand);
        `pdf_text` says when a PDF page's own text layer is read (app/sandbox/pdf_text.py)."""
        async with self._slots:
            worker = self._take()
            self.stats["documents"] += 1
            try:
                opening = {"type": "open", "content_type": content_type, "pages": pages, "max_pages": max_pages,
                           "pdf_text": pdf_text}
                await self._exchange(worker, opening, data, step="opening the document", label=label)
                worker.document_open = True
                for served in itertools.count(1):
                    step = f"rendering page {served} of those requested"
                    header, blob = await self._exchange(worker, {"type": "next"}, b"", step=step, label=label)
                    if header["type"] == "end":
                        worker.document_open = False
                        return
                    self.stats["pages"] += 1
                    yield self._checked_page(worker, header, blob, label)
            finally:
                self._give_back(worker)

    async def count(self, data: bytes, content_type: Optional[str], pages: Optional[str], max_pages: int,
                    label: str = "") -> list[int]:
        """The 1-based page numbers of a selection, counted in a worker under the same limits as rendering."""
        async with self._slots:
            worker = self._take()
            try:
                header, _ = await self._exchange(
                    worker, {"type": "count", "content_type": content_type, "pages": pages, "max_pages": max_pages},
                    data, step="counting the pages", label=label)
                return [int(number) for number in header["pages"]]
            finally:
                self._give_back(worker)

    async def searchable_pdf(self, data: bytes, content_type: Optional[str], pages: list, label: str = "") -> bytes:
        """The document's own pages with an invisible text layer from `pages` (the JSON page results),
        written in a worker: it opens the client's file again. Up to limits.page_render_timeout_s for
        every 10 pages; the PDF may be four times the document and one decoded image at most."""
        results = json.dumps(pages, separators=(",", ":")).encode()
        timeout_s = self._limits.page_render_timeout_s * max(1.0, len(pages) / 10)
        async with self._slots:
            worker = self._take()
            try:
                header = {"type": "searchable", "content_type": content_type, "pages_bytes": len(results)}
                _, pdf = await self._exchange(worker, header, results + data, step="writing the searchable PDF",
                                              label=label, timeout_s=timeout_s,
                                              max_answer_bytes=4 * len(data) + 3 * self._limits.max_image_pixels
                                              + (64 << 20))
                return bytes(pdf)
            finally:
                self._give_back(worker)

    def _take(self) -> DecoderProcess:
        if self._retired:
            raise SandboxRetired("The decoder was being reconfigured; retry.", code="decoder_unavailable")
        worker = self._idle_or_new()
        self._lent += 1
        return worker

    def _idle_or_new(self) -> DecoderProcess:
        while self._idle:
            worker = self._idle.pop()
            if worker.alive():
                return worker
            self._replace(worker, "found dead while idle")
        return self._start()

    def _start(self) -> DecoderProcess:
        return DecoderProcess(self._command, self._max_blob)

    def _give_back(self, worker: DecoderProcess) -> None:
        """A worker whose last exchange finished is clean; one left mid-exchange (cancelled) is not."""
        self._lent -= 1
        self._note_confinement(worker.confinement)
        if self._retired:  # reconfigured meanwhile: the new sandbox has its own workers
            worker.kill()
            if not self._lent:
                self._executor.shutdown(wait=False)
            return
        if worker.busy or not worker.alive():
            worker.kill()
            self.stats["replaced"] += 1
            self._idle.append(self._start())
            return
        if worker.document_open:
            try:
                worker.send({"type": "close"})  # the client went away mid-document
            except DecoderDied:
                self._replace(worker, "died on close")
                return
            worker.document_open = False
        if worker.cpu_seconds() > CPU_RETIRE_SHARE * CPU_LIMIT_S:  # before RLIMIT_CPU ends it mid-document
            self._replace(worker, f"used {worker.cpu_seconds():.0f} of its {CPU_LIMIT_S} CPU seconds")
            self._idle.append(self._start())
            return
        self._idle.append(worker)

    def _note_confinement(self, confinement: Optional[dict]) -> None:
        if confinement is None or confinement == self.confinement:
            return
        self.confinement = confinement
        missing = [layer for layer, on in (("Landlock", confinement.get("landlock_abi")),
                                           ("seccomp", confinement.get("seccomp"))) if not on]
        if missing:
            logger.warning("decoders run without %s (this kernel or image lacks it): a decoder exploit reaches "
                           "further; see docs/architecture.md, the decoder sandbox", " and ".join(missing))

    def _replace(self, worker: DecoderProcess, why: str) -> None:
        worker.kill()
        self.stats["replaced"] += 1
        logger.warning("decoder pid %s replaced: %s", worker.pid, why)

    async def _exchange(self, worker: DecoderProcess, header: dict, blob: bytes, step: str,
                        label: str, timeout_s: Optional[float] = None,
                        max_answer_bytes: Optional[int] = None) -> tuple[dict, bytes]:
        loop = asyncio.get_running_loop()
        timeout_s = timeout_s or self._limits.page_render_timeout_s
        try:
            answer, answer_blob = await loop.run_in_executor(self._executor, worker.exchange, header, blob, timeout_s,
                                                             max_answer_bytes)
        except DecoderTimeout:
            self.stats["timeouts"] += 1
            worker.kill()
            logger.warning("decoder pid %s killed: %s of %s passed %.0f s", worker.pid, step, label, timeout_s)
            raise DocumentTooComplex(
                f"The document is too complex: {step} took longer than "
                f"limits.page_render_timeout_s={timeout_s:g} s."
            ) from None
        except DecoderDied as died:
            raise self._death(worker, died, step, label) from None
        except ProtocolError as exc:
            worker.kill()
            logger.error("decoder pid %s broke the protocol on %s: %s", worker.pid, label, exc)
            raise ServiceUnavailable("The document decoder failed; retry.", code="decoder_unavailable") from None
        if answer["type"] == "error":
            raise self._worker_error(worker, answer)
        return answer, answer_blob

    def _death(self, worker: DecoderProcess, died: DecoderDied, step: str, label: str) -> Exception:
        worker.kill()
        self.stats["crashes"] += 1
        code = died.returncode
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit {code}"
        logger.warning("decoder pid %s died (%s) on %s of %s", worker.pid, how, step, label)
        return DocumentTooComplex(
            f"The document is too complex: the decoder stopped ({how}) while {step}; it needs more than "
            f"limits.decode_memory_mb={self._limits.decode_memory_mb} MiB or crashes the decoder."
        )

    def _worker_error(self, worker: DecoderProcess, answer: dict) -> Exception:
        worker.document_open = False
        if answer.get("class") == "MemoryError":
            self.stats["memory"] += 1
            worker.kill()  # it exits by itself after a MemoryError; make sure
            return DocumentTooComplex(
                "The document is too complex: decoding it needs more than "
                f"limits.decode_memory_mb={self._limits.decode_memory_mb} MiB."
            )
        cls = _WORKER_ERRORS.get(str(answer.get("class")), UnprocessableDocument)
        return cls(str(answer.get("message") or "The document could not be decoded.")[:500],
                   code=str(answer.get("code") or cls.code)[:64])

    def _checked_page(self, worker: DecoderProcess, header: dict, blob: bytes, label: str) -> RenderedPage:
        try:
            return page_from_frame(header, blob, self._max_side, self._max_pixels)
        except (ProtocolError, KeyError, TypeError, ValueError) as exc:
            worker.kill()
            logger.error("decoder pid %s sent a bad page for %s: %s", worker.pid, label, exc)
            raise ServiceUnavailable("The document decoder failed; retry.", code="decoder_unavailable") from None

    async def confinement_report(self) -> Optional[dict]:
        """What the decoders gave up: known once one has answered; else asked of an idle one now (it
        says so in its first frame, which is read here if no document has read it yet)."""
        if self.confinement is None and not self._retired:
            async with self._slots:  # a worker as a document takes one
                worker = self._take()
                try:
                    await asyncio.get_running_loop().run_in_executor(self._executor, worker.wait_ready)
                except (DecoderDied, DecoderTimeout, ProtocolError):
                    worker.busy = True  # replaced on its way back
                self._give_back(worker)
        return self.confinement

    def worker_pids(self) -> list[int]:
        return [w.pid for w in self._idle if w.alive()]

    def retire(self) -> None:
        """Take no more documents; the documents in flight finish on their workers, which then exit.
        (A Preprocessor's reconfigure() hands new documents to a new sandbox meanwhile.)"""
        self._retired = True
        for worker in self._idle:
            worker.kill()
        self._idle.clear()
        if not self._lent:
            self._executor.shutdown(wait=False)

    def close(self) -> None:
        self._retired = True
        for worker in self._idle:
            worker.kill()
        self._idle.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)
