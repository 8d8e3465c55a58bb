"""The Preprocessor's limits are its user_config: reconfigure() applies them to the next document,
lets the documents in flight finish under the old ones, and leaves no decoder process behind.
(test_cluster_deploy.py shows the same change made by `serve deploy`, restarting no replica.)"""

from __future__ import annotations

import asyncio
import os

import pytest

from app.engines.base import InputBudget
from app.pipeline.preprocess import Preprocessor
from app.testkit.documents import numbered_pdf

BUDGET = InputBudget(max_side=1000, max_pixels=1_000_000)


def config(max_pages: int, workers: int = 1, orientation: str = "off") -> dict:
    return {"limits": {"max_pages": max_pages, "pdf_dpi": 72}, "orientation": orientation, "decode_workers": workers}


async def pages_of(pre, pdf: bytes, **kwargs) -> list[int]:
    return [page.page_number async for page in pre.prepare("t", pdf, "application/pdf", None, **kwargs)]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead too
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_reconfigure_applies_new_limits_to_new_documents_and_lets_documents_in_flight_finish():
    pdf2, pdf3 = numbered_pdf(2, dpi=72), numbered_pdf(3, dpi=72)

    async def scenario():
        pre = Preprocessor.func_or_class(BUDGET, config(max_pages=1))
        try:
            with pytest.raises(Exception) as refused:
                await pages_of(pre, pdf2)
            assert getattr(refused.value, "code", None) == "too_many_pages"

            first_pids = pre._sandbox.worker_pids()
            pre.reconfigure(config(max_pages=5, workers=2))
            assert pre.config()["limits"]["max_pages"] == 5
            assert await pages_of(pre, pdf3) == [1, 2, 3]
            assert first_pids and not any(alive(pid) for pid in first_pids)

            # A document mid-way when the limits shrink finishes under the limits it started with.
            in_flight = pre.prepare("t", pdf3, "application/pdf", None)
            first = await in_flight.__anext__()
            old = pre._sandbox
            pre.reconfigure(config(max_pages=2))
            rest = [page.page_number async for page in in_flight]
            assert [first.page_number, *rest] == [1, 2, 3]
            assert old._lent == 0 and not old.worker_pids()
            with pytest.raises(Exception) as refused:
                await pages_of(pre, pdf3)
            assert getattr(refused.value, "code", None) == "too_many_pages"

            # A job's chunk was counted under jobs.max_pages: its own page count replaces max_pages.
            assert await pages_of(pre, pdf3, max_pages=3) == [1, 2, 3]

            unchanged = pre._sandbox
            pre.reconfigure(config(max_pages=2, orientation="auto"))  # mode only: the decoders stay
            assert pre._sandbox is unchanged and pre._orienter.default_mode == "auto"
        finally:
            pre._sandbox.close()

    asyncio.run(scenario())
