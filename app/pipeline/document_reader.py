"""A whole document through the graph, for the HTTP routes: the Preprocessor's pages streamed,
each page sent on (OCR, then postprocess: app/pipeline/page_pipeline.py) as soon as it comes.

`read` gathers the pages (/v1/ocr, a chat completion); `read_in_order` hands each page on in page
order as soon as it and those before it are read (a streamed chat completion). Either way the
first page that fails for good fails the document at once, and leaving early (a failure, the
client gone) cancels the pages in flight and the rest of the document still rasterising.
The fan-out and cancel of the pages is app/pipeline/page_tasks.py's, which jobs use too (app/jobs/runner.py,
their turns under their own leases).
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Optional

from ray.serve.handle import DeploymentHandle

from app.pipeline.page_pipeline import Stages, read_page
from app.pipeline.page_tasks import PageTasks
from app.pipeline.page_preview import page_preview
from app.schemas import Generation, PagePayload


class DocumentReader:
    def __init__(self, preprocessor: DeploymentHandle, stages: Stages, page_retries: int):
        self._pre = preprocessor.options(stream=True)
        self._stages, self._retries = stages, page_retries

    def _pages(self, request_id: str, upload, generation: Optional[Generation]):
        """The Preprocessor's stream of the document's pages, each carrying the request's options on."""
        return self._pre.prepare.remote(request_id, upload.data, upload.content_type, upload.pages,
                                        upload.page_options(generation))

    async def read(self, request_id: str, upload, generation: Optional[Generation] = None) -> list[dict]:
        """Every page's result, in page order."""
        stream = self._pages(request_id, upload, generation)
        streamed = False
        with PageTasks() as pages:
            try:
                async for page in stream:
                    await pages.start(self._page_result(page, upload))
                    if pages.failure() is not None:
                        break  # a page failed for good: stop rasterising the rest
                else:
                    streamed = True
                return sorted(await pages.results(), key=lambda page: page["index"])
            finally:
                if not streamed:
                    stream.cancel()

    async def read_in_order(self, request_id: str, upload,
                            generation: Optional[Generation] = None) -> AsyncIterator[dict]:
        """Each page's result in page order, as soon as it and the pages before it are read."""
        stream = self._pages(request_id, upload, generation)
        ready: asyncio.Queue = asyncio.Queue()  # page tasks in page order; then None, or the stream's error

        async def feed(pages: PageTasks):
            try:
                async for page in stream:
                    ready.put_nowait(await pages.start(self._page_result(page, upload)))
            except Exception as exc:  # the Preprocessor refused the document, or failed
                ready.put_nowait(exc)
                return
            ready.put_nowait(None)

        with PageTasks() as pages:
            feeder = asyncio.ensure_future(feed(pages))
            try:
                while (item := await ready.get()) is not None:
                    if isinstance(item, BaseException):
                        raise item
                    yield await item
            finally:
                feeder.cancel()
                stream.cancel()

    async def _page_result(self, page: PagePayload, upload) -> dict:
        if not upload.page_images:
            return await read_page(self._stages, page, self._retries)
        picture = await page_preview(page)  # before the page goes on: the result holds no pixels
        result = await read_page(self._stages, page, self._retries)
        return {**result, "image": picture}
