"""OCR engines behind one protocol. `build_engine` is the only place that picks one."""

from __future__ import annotations

from app.config import Settings
from app.engines.base import EngineInfo, InputBudget, OCREngine

__all__ = ["EngineInfo", "InputBudget", "OCREngine", "build_engine", "input_budget"]


def _engine_class(name: str):
    if name == "ppocr":
        from app.engines.ppocr import PPOCREngine

        return PPOCREngine
    raise ValueError(f"unknown engine '{name}'")


def input_budget(settings: Settings) -> InputBudget:
    """Known without loading the model, so the CPU preprocessor can size pages for it."""
    return _engine_class(settings.engine).input_budget


def build_engine(settings: Settings, threads: int) -> OCREngine:
    return _engine_class(settings.engine)(settings, threads=threads)
