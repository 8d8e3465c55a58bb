"""A toy engine of one's own, added as a user would: this one module plus `engine:` in the config.

It schedules its own batches (as vLLM does): the OCR replica hands it each page as it comes.
It answers each page with its size and its options' label, after `delay_s`, and counts how many
pages it held at once. With `die_when` set, a replica that finds that file removes it and dies at
once, as a replica killed mid-page does (tests/test_page_pipeline.py).
"""

from __future__ import annotations

import asyncio
import os
from typing import Optional

import numpy as np
from pydantic import BaseModel, ConfigDict

from app.engines.base import EngineInfo, EngineRuntime, InputBudget, OCREngine
from app.schemas import EngineResult


class ToyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str = "toy"
    delay_s: float = 0.2
    max_side: int = 640
    die_when: Optional[str] = None


class ToyEngine(OCREngine):
    schedules_own_batches = True

    @classmethod
    def budget(cls, options: dict, model_dir: Optional[str]) -> InputBudget:
        side = ToyOptions.model_validate(options).max_side
        return InputBudget(max_side=side, max_pixels=side * side)

    def __init__(self, options: dict, runtime: EngineRuntime):
        self.options = ToyOptions.model_validate(options)
        self.info = EngineInfo(name="toy", version=self.options.label, device="cpu",
                               details={"threads": runtime.threads})
        self.in_flight = self.most_in_flight = 0

    def load(self) -> None:
        pass

    def warmup(self) -> None:
        pass

    def infer(self, pages: list[np.ndarray]) -> list[EngineResult]:
        raise AssertionError("an engine that schedules its own batches is never handed a batch")

    async def infer_page(self, page: np.ndarray) -> EngineResult:
        if self.options.die_when:
            try:
                os.unlink(self.options.die_when)  # only one replica can take the file away
            except FileNotFoundError:
                pass
            else:
                os._exit(1)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.options.delay_s)
        finally:
            self.in_flight -= 1
        return EngineResult(markdown=f"{self.options.label} {page.shape[1]}x{page.shape[0]}")

    def batch_limits(self) -> Optional[tuple[int, int]]:
        return None

    def check_health(self) -> None:
        pass


class BatchToyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    poison_width: int = 13  # a batch holding a page this wide makes the engine raise
    batch_limit: Optional[tuple[int, int]] = None  # (pages, pixels) the warm-up would have measured


class BatchToyEngine(OCREngine):
    """A batch engine (gathered by @serve.batch) that breaks on one kind of page, as a real one may."""

    @classmethod
    def budget(cls, options: dict, model_dir: Optional[str]) -> InputBudget:
        return InputBudget(max_side=2000, max_pixels=2000 * 2000)

    def __init__(self, options: dict, runtime: EngineRuntime):
        self.options = BatchToyOptions.model_validate(options)
        self.info = EngineInfo(name="batch-toy", version="1", device="cpu")
        self.calls: list[int] = []

    def load(self) -> None:
        pass

    def warmup(self) -> None:
        pass

    def infer(self, pages: list[np.ndarray]) -> list[EngineResult]:
        self.calls.append(len(pages))
        if any(page.shape[1] == self.options.poison_width for page in pages):
            raise RuntimeError("the engine broke on this batch")
        return [EngineResult(markdown=f"{page.shape[1]}x{page.shape[0]}") for page in pages]

    def batch_limits(self) -> Optional[tuple[int, int]]:
        return self.options.batch_limit

    def check_health(self) -> None:
        pass
