"""The interface every OCR engine implements, and the facts the pipeline needs about it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import numpy as np

from app.page_size import InputBudget  # noqa: F401 (the engines' budget: one type with the decoders')
from app.schemas import EngineResult


@dataclass
class EngineInfo:
    name: str
    version: str
    device: str
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class EngineRuntime:
    """Where an engine runs, beside its own options: what the OCR replica hands every engine."""

    model_dir: Optional[str] = None  # a local model directory (vlm, vllm; ppocr: its own ONNX files)
    device: str = "auto"
    threads: int = 1  # CPU threads the engine may use
    gpu_share: float = 1.0  # this replica's fraction of its GPU (its num_gpus): the memory it may take
    concurrent_batches: int = 1  # batches the replica runs at once (the vlm warm-up probes as many)


@dataclass(frozen=True)
class EngineSpec:
    """Which engine an OCR replica builds, with the engine's own options (app/engines/registry.py makes it)."""

    name: str  # a registered name, or package.module:Class
    options: Any = None  # the engine's options (its `options_key` section of the settings, or engine_options)
    model_dir: Optional[str] = None
    device: str = "auto"


class OCREngine:
    """What every engine is: built as `Engine(options, runtime)` (app/engines/registry.py) from a subclass of
    this class, which holds the defaults of the optional features, so that the OCR replica asks an engine
    for each of them directly, never with getattr. `options` is the engine's own section of the settings
    (`options_key`: tesseract, vlm, vllm), or `engine_options` for an engine that lives elsewhere; `runtime`
    is an `EngineRuntime`. No engine sees the service's whole settings.

    An engine that schedules its own batches sets `schedules_own_batches = True` and also
    implements `async infer_page(page) -> EngineResult`: the OCR replica then hands it each
    page as it comes, without `@serve.batch`, and `batch_limits` is not asked.

    An engine that honours a request's generation knobs (`Generation`, app/schemas.py: the
    OpenAI API's max_tokens...) sets `takes_generation = True`; it is then called as
    `infer(pages, generation=[...])`, or `infer_page(page, generation)`. One that reads a
    request's script hint (`lang`) sets `takes_lang = True` and is called as `infer(pages, langs=[...])`.
    """

    info: EngineInfo
    options_key: ClassVar[Optional[str]] = None  # the settings section of its options; None: engine_options
    schedules_own_batches: bool = False
    takes_generation: bool = False
    takes_lang: bool = False
    page_capacity: Optional[int] = None  # pages one replica holds at once, where the engine batches itself
    last_peak_memory_mib: Optional[float] = None  # the last batch's peak GPU memory, where it is measured

    def __init__(self, options: Any, runtime: EngineRuntime):
        raise NotImplementedError

    @classmethod
    def budget(cls, options: Any, model_dir: Optional[str]) -> InputBudget:
        """The largest page the engine takes, known without loading it (the Preprocessor sizes pages by it)."""
        raise NotImplementedError

    def load(self) -> None:
        """Load weights from local disk only. Raise with a clear message if they are missing."""

    def warmup(self) -> None:
        """Run a synthetic page so the first real request pays no lazy-initialisation cost."""

    def infer(self, pages: list[np.ndarray]) -> list[EngineResult]:
        """OCR a batch of RGB (H, W, 3) uint8 pages; one result per page, in input order."""
        raise NotImplementedError

    def batch_limits(self) -> Optional[tuple[int, int]]:
        """(pages, pixels) the device can hold in one batch, as measured at warm-up; None: no limit."""
        return None

    def check_health(self) -> None:
        """Raise if the engine or its device can no longer serve."""

    def queue_stats(self) -> Optional[dict]:
        """{"running", "waiting"} pages inside an engine that schedules itself; None: it keeps no queue."""
        return None

    def shutdown(self) -> None:
        """Stop what the engine started beyond this process (vLLM's engine core); called once, at the end."""
