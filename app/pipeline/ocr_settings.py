"""What an OCR replica is given: its engine and how it batches and warms up, nothing of the other stages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from app.config import BatchConfig, Settings
from app.engines import EngineSpec, engine_spec


@dataclass(frozen=True)
class OCRReplicaSettings:
    engine: EngineSpec  # the engine's name, its own options, the model directory and device
    batching: BatchConfig  # the initial user_config; `serve deploy` changes it live
    engine_threads: Optional[int] = None  # None: the replica's CPU share, rounded up
    warmup: bool = True
    max_replicas: Optional[int] = None  # the autoscaling ceiling, for the OCRReplicasAtMax alert's gauge
    debug_keep_engine_inputs: int = 0

    @classmethod
    def of(cls, settings: Settings) -> "OCRReplicaSettings":
        return cls(engine=engine_spec(settings), batching=settings.batching, engine_threads=settings.engine_threads,
                   warmup=settings.warmup,
                   max_replicas=settings.ocr_autoscaling.max_replicas if settings.ocr_autoscaling else None,
                   debug_keep_engine_inputs=settings.debug_keep_engine_inputs)
