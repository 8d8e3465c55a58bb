"""One page through the stages after the Preprocessor, for synchronous requests and jobs alike:
OCR and the page's structure side by side, then postprocess, under the one retry rule (app/pipeline/retry.py).

The OCR and structure responses go to the Postprocessor unawaited (DeploymentResponses), so the page's
image never comes back through the caller, and the StructureModel reads the page while the engine
does. A page read from its PDF text layer skips OCR: its lines travel with it. A cancelled page
(another page failed for good, the client left) cancels every call.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional

from ray.serve.handle import DeploymentHandle

from app.pipeline.retry import retry_page
from app.schemas import EngineResult, PageOCR, PagePayload


@dataclass(frozen=True)
class Stages:
    """The deployments a page goes through after the Preprocessor."""

    ocr: DeploymentHandle
    post: DeploymentHandle
    structure: Optional[DeploymentHandle] = None  # None: no StructureModel in this graph
    structure_mode: str = "auto"  # the settings' default for a page whose request set none

    def wants_structure(self, page: PagePayload) -> bool:
        return self.structure is not None and (page.options.structure or self.structure_mode) != "off"


async def read_page(stages: Stages, page: PagePayload, retries: int,
                    on_retry: Callable[[], None] = lambda: None) -> dict:
    """The page's postprocessed result; raises the last error once the retries are spent."""
    return await retry_page(lambda: _through_stages(stages, page), retries,
                            f"request {page.request_id} page {page.page_number}", on_retry=on_retry)


async def _through_stages(stages: Stages, page: PagePayload) -> dict:
    calls = []
    if page.text_layer is not None:  # the PDF's own text: nothing to recognise
        lines = page.text_layer
        read = PageOCR(dataclasses.replace(page, image=None, text_layer=None), EngineResult(lines=lines), 0, 0)
    else:
        read = stages.ocr.infer.remote(page)
        calls.append(read)
    structure = None
    if stages.wants_structure(page):
        structure = stages.structure.analyse.remote(page)
        calls.append(structure)
    response = stages.post.process.remote(read, structure)  # both go on unawaited
    try:
        return await response
    except asyncio.CancelledError:
        for call in calls + [response]:
            call.cancel()
        raise


class EngineIdentity:
    """The engine's name and version, as results report them: asked of an OCR replica once, then kept."""

    def __init__(self, ocr: DeploymentHandle):
        self._ocr = ocr
        self._value: Optional[dict] = None
        self.token_cap: Optional[int] = None  # a generating engine's most tokens per page; None: it writes none

    async def get(self) -> dict:
        if self._value is None:
            info = await self._ocr.info.remote()
            details = info.get("details") or {}
            self.token_cap = details.get("max_tokens") or details.get("max_new_tokens")
            self._value = {"name": info["name"], "version": info["version"]}
        return self._value
