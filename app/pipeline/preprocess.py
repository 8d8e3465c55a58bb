"""The CPU preprocessing deployment: uploaded bytes in, engine-sized pages (raw pixels) out.

All decoding happens in the replica's decoder sandbox (app/sandbox): worker processes
with a memory cap and a per-page time limit, so a hostile file costs one worker,
never this replica. It streams: each page is yielded as soon as it is rendered,
so the ingress sends page 1 to the OCR replicas while page 2 is still rasterising.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, Callable, Optional, TypeVar

import numpy as np

from ray import serve

from app.ops import metrics
from app.config import PreprocessConfig
from app.engines.base import InputBudget
from app.orientation.upright import LEFT_AS_UPLOADED, Orientation, Orienter
from app.sandbox import DecodeSandbox, RenderedPage, SandboxRetired
from app.schemas import PageOptions, PagePayload
from app.ops.replica import dumpable, harden_process

T = TypeVar("T")


def record_stages(page: RenderedPage) -> None:
    """A PDF page is rasterised (`render`); an image is decoded (`decode`). Both are `decode` in timings_ms."""
    metrics.stage("render" if page.dpi else "decode", page.decode_ms / 1000)
    metrics.stage("resize_encode", page.resize_encode_ms / 1000)


def to_payload(page: RenderedPage, image: np.ndarray, turned: Orientation, index: int, request_id: str,
               options: PageOptions = PageOptions()) -> PagePayload:
    """`image` is the page as turned upright; the source size stays the upload's (boxes are mapped back)."""
    return PagePayload(
        request_id=request_id,
        index=index,
        page_number=page.page_number,
        image=image,
        width=image.shape[1],
        height=image.shape[0],
        source_width=page.source_width,
        source_height=page.source_height,
        scale=page.scale,
        dpi=page.dpi,
        rotation=turned.rotation,
        rotation_confidence=turned.confidence,
        rotation_note=turned.note,
        timings_ms={"decode": page.decode_ms, "resize_encode": page.resize_encode_ms, "orientation": turned.ms},
        text_layer=page.text_layer,
        text_source="pdf_text" if page.text_layer is not None else "ocr",
        text_note=page.text_note,
        options=options,
    )


@serve.deployment  # its options: app/serve/builder.py (defaults) and serve_config.yaml (the fleet)
class Preprocessor:
    """Bound the engine's input budget only; its limits, orientation mode and decoder count are its
    user_config (PreprocessConfig), so `serve deploy` can change them without touching other stages."""

    def __init__(self, budget: InputBudget, config: Optional[dict] = None):
        harden_process()  # first: nothing below may leave a secret readable through /proc
        self._budget = budget
        self._config: Optional[PreprocessConfig] = None
        self._sandbox: Optional[DecodeSandbox] = None
        self._orienter: Optional[Orienter] = None
        self.reconfigure(config or {})

    def reconfigure(self, user_config: dict) -> None:
        config = PreprocessConfig.model_validate(user_config or {})
        if self._config is None or (config.limits, config.decode_workers) != (
                self._config.limits, self._config.decode_workers):
            # Documents already decoding finish in the old sandbox; new ones go to the new one.
            retired, self._sandbox = self._sandbox, DecodeSandbox(
                config.limits, self._budget.max_side, self._budget.max_pixels, config.decode_workers)
            if retired is not None:
                retired.retire()
        if self._orienter is None:
            self._orienter = Orienter(config.orientation, config.orientation_min_share)
        else:
            self._orienter.set_default_mode(config.orientation, config.orientation_min_share)
        self._config = config

    async def prepare(
        self, request_id: str, data: bytes, content_type: Optional[str], pages: Optional[str],
        options: Optional[PageOptions] = None, max_pages: Optional[int] = None,
    ) -> AsyncIterator[PagePayload]:
        """Yield one payload per page, in document order, each turned upright as `options.orientation` says
        (None: the config's mode) and carrying the request's `options` on. Bad input raises a 4xx error
        before any page. `max_pages` replaces limits.max_pages (a job's chunk: its pages were counted under
        jobs.max_pages). A PDF page read from its own text layer (`options.pdf_text`; None: the config's) is
        not turned: its text says where it is."""
        options = options or PageOptions()
        index = 0
        layer_mode = options.pdf_text or self._config.pdf_text
        while True:
            try:
                async for page in self._sandbox.pages(data, content_type, pages, label=f"request {request_id}",
                                                      max_pages=max_pages, pdf_text=layer_mode):
                    record_stages(page)
                    keep = "off" if page.text_layer is not None else options.orientation
                    image, turned = await self._upright(page.image, keep)
                    yield to_payload(page, image, turned, index, request_id, options)
                    index += 1
                return
            except SandboxRetired:  # reconfigured before this document got a decoder: the new one takes it
                continue

    async def _upright(self, image: np.ndarray, orientation: Optional[str]) -> tuple[np.ndarray, Orientation]:
        if self._orienter.is_off(orientation):  # no thread hop for nothing
            turned = LEFT_AS_UPLOADED
        else:  # the finder's models and the turn are CPU work: off the event loop
            image, turned = await asyncio.to_thread(self._orienter.upright, image, orientation)
            metrics.stage("orientation", turned.ms / 1000)
        metrics.inc("ocr_page_rotations_total", rotation=str(turned.rotation))
        return image, turned

    async def select_pages(self, request_id: str, data: bytes, content_type: Optional[str], pages: Optional[str],
                           max_pages: int) -> list[int]:
        """For a job: the page numbers it will process. Bad input raises the same 4xx errors as `prepare`."""
        return await self._in_sandbox(lambda sandbox: sandbox.count(data, content_type, pages, max_pages,
                                                                    label=f"job {request_id}"))

    async def searchable_pdf(self, request_id: str, data: bytes, content_type: Optional[str], pages: list) -> bytes:
        """The document's own pages with an invisible text layer from `pages` (app/formats/searchable_pdf.py),
        written in the decoder sandbox, which is where the client's file may be opened."""
        return await self._in_sandbox(lambda sandbox: sandbox.searchable_pdf(data, content_type, pages,
                                                                             label=f"request {request_id}"))

    async def _in_sandbox(self, use: Callable[[DecodeSandbox], Awaitable[T]]) -> T:
        """`use(sandbox)` in the sandbox in force; a call that a reconfigure() retired before it got a decoder
        goes to the new one (as a document's pages do in `prepare`)."""
        while True:
            try:
                return await use(self._sandbox)
            except SandboxRetired:
                continue

    def config(self) -> dict:
        """The user_config in force (tests and operators, through a handle)."""
        return self._config.model_dump()

    async def sandbox(self) -> dict:
        """What guards the secrets here: this replica's dumpable flag (False: /proc/<pid>/environ and its
        memory are closed to other processes of its user), and what its decoders gave up."""
        decoders = await self._sandbox.confinement_report() if self._sandbox else None
        return {"replica_dumpable": dumpable(), "decoders": decoders}

    def __del__(self):  # Serve calls this when the replica stops: no decoder outlives it
        sandbox = getattr(self, "_sandbox", None)
        if sandbox is not None:
            sandbox.close()
