"""OCR engines behind one protocol (base.py); registry.py is the only place that picks one."""

from __future__ import annotations

from app.engines.base import EngineInfo, EngineRuntime, EngineSpec, InputBudget, OCREngine
from app.engines.registry import build_engine, check_engine, engine_spec, input_budget, schedules_own_batches

__all__ = ["EngineInfo", "EngineRuntime", "EngineSpec", "InputBudget", "OCREngine", "build_engine", "check_engine",
           "engine_spec", "input_budget", "schedules_own_batches"]
