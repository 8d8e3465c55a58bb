"""Which engines exist and how one is built: the only place that picks one.

Every engine is a subclass of `OCREngine` (base.py: the optional features' defaults) with one constructor
signature, `(settings, threads, gpu_share)`,
and a classmethod `budget(settings)` that the CPU Preprocessor reads without loading it.
`settings.engine` names one of `ENGINES`, or gives an import path `package.module:Class`
for an engine that lives elsewhere (its own options under `engine_options`): adding an
engine is one module plus its settings.

An engine that schedules its own batches (`schedules_own_batches = True`, as vLLM's
continuous batching does) is handed each page as it comes through `await infer_page(page)`;
the others get batches gathered by `@serve.batch` through `infer(pages)`.
"""

from __future__ import annotations

import importlib

from app.config import Settings
from app.engines.base import InputBudget, OCREngine

ENGINES = {
    "tesseract": "app.engines.tesseract:TesseractEngine",
    "ppocr": "app.engines.ppocr:PPOCREngine",
    "vlm": "app.engines.vlm:VLMEngine",
    "vllm": "app.engines.vllm_engine:VLLMEngine",
    "null": "app.engines.null:NullEngine",
}


def engine_class(name: str) -> type:
    path = ENGINES.get(name, name)
    module, _, attribute = path.partition(":")
    if not module or not attribute:
        raise ValueError(f"unknown engine '{name}': one of {sorted(ENGINES)}, or package.module:Class")
    return getattr(importlib.import_module(module), attribute)


# The engines that read from a model directory (the others bring their models in their wheels).
NEEDS_MODEL_DIR = ("vlm", "vllm")


def check_engine(settings: Settings) -> None:
    """The settings name an engine that exists, with what it needs: refused before anything is deployed."""
    module, _, attribute = settings.engine.partition(":")
    if settings.engine not in ENGINES and not (module and attribute):
        raise ValueError(f"engine must be one of {sorted(ENGINES)} or package.module:Class, not {settings.engine!r}")
    if settings.engine in NEEDS_MODEL_DIR and not settings.model_dir:
        raise ValueError(f"engine '{settings.engine}' needs model_dir: a local directory holding the model")


def input_budget(settings: Settings) -> InputBudget:
    """Known without loading the model, so the CPU preprocessor can size pages for it."""
    return engine_class(settings.engine).budget(settings)


def build_engine(settings: Settings, threads: int, gpu_share: float = 1.0) -> OCREngine:
    """gpu_share: this replica's fraction of its GPU (its num_gpus), the memory it may take."""
    cls = engine_class(settings.engine)
    if not (isinstance(cls, type) and issubclass(cls, OCREngine)):
        raise TypeError(f"engine {settings.engine!r} must subclass app.engines.base.OCREngine, which holds the "
                        "defaults of the optional features")
    return cls(settings, threads=threads, gpu_share=gpu_share)


def schedules_own_batches(engine) -> bool:
    return engine.schedules_own_batches
