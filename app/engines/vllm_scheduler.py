"""vLLM's scheduler as the OCR replica sees it: its running and waiting requests and the share of
its KV cache in use, from vLLM's own stat-logger hook (`AsyncLLM(stat_loggers=...)`), recorded at
every engine step.

Why vLLM's figures and not the replica's own count of pages in flight: a page the replica has
handed over may still wait inside vLLM, not only beyond `max_num_seqs` but whenever the KV cache
is full. `waiting` is then the engine's real queue, and `running` what the replica truly decodes
at once: the autoscaler's capacity (app/scaling/autoscaling.py), the `ocr_engine_pages` gauge,
/v1/info's engine queue.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class SchedulerState:
    running: int = 0
    waiting: int = 0
    kv_cache_usage: float = 0.0
    steps: int = 0  # engine steps recorded so far (0: vLLM has not reported yet)


class SchedulerView:
    """The latest state vLLM's scheduler reported; written on the engine's loop, read anywhere."""

    def __init__(self):
        self._lock = threading.Lock()
        self._state = SchedulerState()

    def snapshot(self) -> SchedulerState:
        with self._lock:
            return SchedulerState(**vars(self._state))

    def record(self, running: int, waiting: int, kv_cache_usage: float) -> None:
        with self._lock:
            self._state = SchedulerState(running, waiting, kv_cache_usage, self._state.steps + 1)

    def logger_factory(self):
        """What `AsyncLLM.from_engine_args(stat_loggers=[...])` takes: a StatLoggerBase class."""
        from vllm.v1.metrics.loggers import StatLoggerBase

        view = self

        class ReplicaStatLogger(StatLoggerBase):
            def __init__(self, vllm_config, engine_index: int = 0):
                pass

            def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0):
                if scheduler_stats is not None:
                    view.record(scheduler_stats.num_running_reqs, scheduler_stats.num_waiting_reqs,
                                scheduler_stats.kv_cache_usage)

            def log_engine_initialized(self):
                pass

        return ReplicaStatLogger
