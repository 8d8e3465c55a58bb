"""A whole document through the graph, for the HTTP routes: the Preprocessor's pages streamed,
each page sent on (OCR, then postprocess: app/pipeline/page_pipeline.py) as soon as it comes.

`read` gathers the pages (/v1/ocr, a chat completion); `read_in_order` hands each page on in page
order as soon as it and those before it are read (a streamed chat completion). Either way the
first page that fails for good fails the document at once, and leaving early (a failure, the
client gone) cancels the pages in flight and the rest of the document still rasterising.
Jobs read their chunks in app/jobs/runner.py, under their own leases.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Optional

from ray.serve.handle import DeploymentHandle

from app.pipeline.page_pipeline import Stages, read_page
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
        tasks: list[asyncio.Task] = []
        streamed = False
        try:
            async for page in stream:
                tasks.append(asyncio.ensure_future(self._page_result(page, upload)))
                if any(task.done() and task.exception() is not None for task in tasks if not task.cancelled()):
                    break  # a page failed for good: stop rasterising the rest
            else:
                streamed = True
            if tasks:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = [task for task in tasks if task.done() and not task.cancelled() and task.exception()]
            if failed:
                raise failed[0].exception()
            return sorted((task.result() for task in tasks), key=lambda page: page["index"])
        finally:
            if not streamed:
                stream.cancel()
            for task in tasks:
                task.cancel()

    async def read_in_order(self, request_id: str, upload,
                            generation: Optional[Generation] = None) -> AsyncIterator[dict]:
        """Each page's result in page order, as soon as it and the pages before it are read."""
        stream = self._pages(request_id, upload, generation)
        tasks: list[asyncio.Task] = []
        ready: asyncio.Queue = asyncio.Queue()  # page tasks in page order; then None, or the stream's error

        async def feed():
            try:
                async for page in stream:
                    tasks.append(asyncio.ensure_future(self._page_result(page, upload)))
                    ready.put_nowait(tasks[-1])
            except Exception as exc:  # the Preprocessor refused the document, or failed
                ready.put_nowait(exc)
                return
            ready.put_nowait(None)

        feeder = asyncio.ensure_future(feed())
        try:
            while (item := await ready.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield await item
        finally:
            feeder.cancel()
            stream.cancel()
            for task in tasks:
                task.cancel()

    async def _page_result(self, page: PagePayload, upload) -> dict:
        if not upload.page_images:
            return await read_page(self._stages, page, self._retries)
        picture = await page_preview(page)  # before the page goes on: the result holds no pixels
        result = await read_page(self._stages, page, self._retries)
        return {**result, "image": picture}
