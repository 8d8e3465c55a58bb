"""OCR engines behind one protocol. `build_engine` is the only place that picks one."""

from __future__ import annotations

from app.config import Settings
from app.engines.base import EngineInfo, InputBudget, OCREngine

__all__ = ["EngineInfo", "InputBudget", "OCREngine", "build_engine", "input_budget"]


def _engine_class(name: str):
    if name == "ppocr":
        from app.engines.ppocr import PPOCREngine

        return PPOCREngine
    if name == "vlm":
        from app.engines.vlm import VLMEngine

        return VLMEngine
    if name == "null":
        from app.engines.null import NullEngine

        return NullEngine
    raise ValueError(f"unknown engine '{name}'")


def input_budget(settings: Settings) -> InputBudget:
    """Known without loading the model, so the CPU preprocessor can size pages for it."""
    if settings.engine == "vlm":  # per family and setting, not per class
        from app.engines.vlm import settings_budget

        return settings_budget(settings)
    return _engine_class(settings.engine).input_budget


def build_engine(settings: Settings, threads: int, gpu_share: float = 1.0) -> OCREngine:
    """gpu_share: this replica's fraction of its GPU (its num_gpus), the memory it may take."""
    engine_class = _engine_class(settings.engine)
    if settings.engine == "vlm":
        return engine_class(settings, threads=threads, gpu_share=gpu_share)
    if settings.engine == "null":
        return engine_class(threads=threads)
    return engine_class(settings, threads=threads)
