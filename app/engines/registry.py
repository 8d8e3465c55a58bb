"""Which engines exist and how one is built: the only place that picks one.

Every engine is a subclass of `OCREngine` (base.py: the optional features' defaults) with one constructor
signature, `(options, runtime)`, and a classmethod `budget(options, model_dir)` that the CPU Preprocessor
reads without loading it. `settings.engine` names one of `ENGINES`, or gives an import path
`package.module:Class` for an engine that lives elsewhere (its own options under `engine_options`):
adding an engine is one module plus its settings. This module turns the settings into an `EngineSpec`
(the engine's name, its own options, the model directory and device); nothing below it sees `Settings`.

An engine that schedules its own batches (`schedules_own_batches = True`, as vLLM's
continuous batching does) is handed each page as it comes through `await infer_page(page)`;
the others get batches gathered by `@serve.batch` through `infer(pages)`.
"""

from __future__ import annotations

import importlib

from typing import Union

from app.config import Settings
from app.engines.base import EngineRuntime, EngineSpec, InputBudget, OCREngine

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


def engine_spec(settings: Settings) -> EngineSpec:
    """The engine the settings name, with its own options and nothing else of the settings."""
    cls = checked_class(settings.engine)
    options = settings.engine_options if cls.options_key is None else getattr(settings, cls.options_key)
    return EngineSpec(settings.engine, options, settings.model_dir, settings.device)


def input_budget(spec: Union[EngineSpec, Settings]) -> InputBudget:
    """Known without loading the model, so the CPU preprocessor can size pages for it."""
    spec = engine_spec(spec) if isinstance(spec, Settings) else spec
    return checked_class(spec.name).budget(spec.options, spec.model_dir)


def build_engine(spec: Union[EngineSpec, Settings], threads: int, gpu_share: float = 1.0,
                 concurrent_batches: int = 1) -> OCREngine:
    """gpu_share: this replica's fraction of its GPU (its num_gpus), the memory it may take."""
    if isinstance(spec, Settings):  # tools and tests: the whole settings, read here only
        concurrent_batches = spec.batching.max_concurrent_batches
        spec = engine_spec(spec)
    runtime = EngineRuntime(model_dir=spec.model_dir, device=spec.device, threads=threads, gpu_share=gpu_share,
                            concurrent_batches=concurrent_batches)
    return checked_class(spec.name)(spec.options, runtime)


def checked_class(name: str) -> type:
    cls = engine_class(name)
    if not (isinstance(cls, type) and issubclass(cls, OCREngine)):
        raise TypeError(f"engine {name!r} must subclass app.engines.base.OCREngine, which holds the "
                        "defaults of the optional features")
    return cls


def schedules_own_batches(engine) -> bool:
    return engine.schedules_own_batches
