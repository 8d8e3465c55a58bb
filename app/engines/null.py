"""The `null` engine: reads nothing, at once. For measuring the pipeline around the engine
(load/overhead.py) and never for serving: every page it returns is empty and says so."""

from __future__ import annotations

from typing import Optional

import numpy as np

from app.engines.base import EngineInfo, EngineRuntime, InputBudget, OCREngine
from app.schemas import EngineResult

NOTE = "engine null: the pipeline was measured, no text was read"


class NullEngine(OCREngine):
    # The bundled engine's budget, so that the CPU stages do the same work as for ppocr.
    input_budget = InputBudget(max_side=2000, max_pixels=2000 * 2000)

    @classmethod
    def budget(cls, options, model_dir: Optional[str]) -> InputBudget:
        return cls.input_budget

    def __init__(self, options, runtime: EngineRuntime):
        self.info = EngineInfo(name="null", version="0", device="cpu", details={"threads": runtime.threads})

    def load(self) -> None:
        pass

    def warmup(self) -> None:
        pass

    def infer(self, pages: list[np.ndarray]) -> list[EngineResult]:
        if any(page.ndim != 3 or page.shape[2] != 3 or page.dtype != np.uint8 for page in pages):
            raise ValueError("the null engine takes RGB uint8 pages, like every engine")
        return [EngineResult(notes=[NOTE]) for _ in pages]

    def batch_limits(self) -> Optional[tuple[int, int]]:
        return None

    def check_health(self) -> None:
        pass
