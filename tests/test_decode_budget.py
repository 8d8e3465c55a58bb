"""A job's decode budget (issue 37.6): failed pages are charged the decoder time they took, and the
account is the store's, so a runner taking the job over goes on from it. The real TurnRenderer and
DecodeBudget over a real SQLite store; the Preprocessor's stream is a stand-in that fails as a page
that times out in the sandbox does."""

from __future__ import annotations

import asyncio

from app.errors import UnprocessableDocument
from app.jobs.model import Job
from app.jobs.rendering import TurnRenderer
from app.settings.jobs import Jobs
from app.jobs.stores import open_store
from app.jobs.turns import DecodeBudget, DecodeCharge, PageFailure
from app.schemas import PagePayload


class SlowFailingPreprocessor:
    """Pages render at once, except `bad`, which fails after `fail_after_s` (a decoder timeout)."""

    def __init__(self, bad: int, fail_after_s: float):
        self.bad, self.fail_after_s = bad, fail_after_s
        self.prepare = self

    def options(self, stream: bool):
        return self

    def remote(self, request_id, document, content_type, pages, orientation, max_pages=None, pdf_text=None):
        first, _, last = pages.partition("-")  # the renderer asks for "1-3" or "2"
        return self._stream(range(int(first), int(last or first) + 1))

    async def _stream(self, numbers):
        for number in numbers:
            if number == self.bad:
                await asyncio.sleep(self.fail_after_s)
                raise UnprocessableDocument("page took too long", code="page_render_timeout")
            yield PagePayload(request_id="r", index=number - 1, page_number=number, image=None, width=1, height=1,
                              source_width=1, source_height=1, scale=1.0, timings_ms={"decode": 10.0})


def test_a_page_that_fails_is_charged_its_time_and_a_new_runner_sees_the_spent_budget(tmp_path):
    settings = Jobs(store=f"sqlite:///{tmp_path}/jobs.sqlite3", quotas={"max_decode_s": 5})
    store = open_store(settings)
    job, _ = store.create(Job(id="a" * 32, pages=[1, 2, 3]), b"doc")
    renderer = TurnRenderer(SlowFailingPreprocessor(bad=2, fail_after_s=0.4), page_retries=0, on_retry=lambda: None)

    async def turn():
        budget = DecodeBudget(settings, store)
        items = []
        async for item in renderer.pages(job, None, [1, 2, 3]):
            items.append(await budget.charge(job, item))
        return items

    items = asyncio.run(turn())
    failures = [item for item in items if isinstance(item, PageFailure)]
    charges = [item for item in items if isinstance(item, DecodeCharge)]
    assert [f.page_number for f in failures] == [2] and failures[0].error["code"] == "page_render_timeout"
    assert charges and charges[0].ms >= 380  # the stream's wait on the failing page
    assert failures[0].cost_ms >= 380  # and the page's own try, alone
    spent = store.charge_decode(job.id, 0.0)
    assert spent >= 10 + 380 + 380 + 10
    # Another runner, its client's quota 0.5 s: the 0.8 s the failures took were charged, and are read there.
    stricter = settings.model_copy(update={"quotas": settings.quotas.model_copy(update={"max_decode_s": 0.5})})
    assert asyncio.run(DecodeBudget(stricter, open_store(settings)).exhausted(job))
