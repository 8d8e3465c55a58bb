"""Replicas sized from the pages in flight: custom Ray Serve autoscaling policies (pure).

Both count the same load, `ctx.total_num_requests`: pages queued at the handles and running
in the replicas (one OCR request is one page). They differ in how many pages one replica may
hold before another is asked for:
- `ServiceRatePolicy` (policy: service_rate, the default): as many as it clears within
  `target_queue_wait_s`, from the seconds per page the replicas measure of themselves
  (app/pipeline/service_rate.py, reported as `seconds_per_page`). A slow engine (PP-OCR on a CPU,
  seconds a page) gets replicas after a few pages; a fast one (a GPU batch) only when it
  would really fall behind. Until a replica has measured itself it falls back on:
- `queue_policy` (policy: queue_capacity): one replica's batch capacity, what the replicas
  report as `batch_capacity` (their batch as the warm-up clamped it to the device, x
  max_concurrent_batches; vllm.max_num_seqs for the `vllm` engine), else the deployment's
  `target_ongoing_requests`. It knows nothing of speed: 16 pages a replica whether a page
  takes 10 ms or 3 s. An engine that batches by itself also reports what its scheduler holds
  (`engine_running`, `engine_waiting`): where pages wait inside it while it runs fewer than its
  batch capacity (vLLM's KV cache is full), what it runs is the capacity.
Then, for both:
- hysteresis: scale down only when the load fits in fewer replicas with `DOWN_MARGIN` to
  spare, so a load hovering at a boundary holds the count instead of flapping;
- a step limit: at most double (at least +1) up, at most a quarter (at least -1) down per decision;
- a floor and ceiling: the capacity-adjusted min and max replicas.
Decisions start from the target, not the running count, so a replica that died is replaced
rather than read as a reason to scale down. Ray Serve applies `upscale_delay_s` and
`downscale_delay_s` to what these return (its decision counters live in `policy_state`,
which is passed through untouched), so a trend must last that long before it acts.
"""

from __future__ import annotations

import logging
import math
import statistics
from typing import Any, Optional

from app.pipeline.service_rate import METRIC as SECONDS_PER_PAGE_METRIC

logger = logging.getLogger("ray.serve")

CAPACITY_METRIC = "batch_capacity"
ENGINE_RUNNING_METRIC, ENGINE_WAITING_METRIC = "engine_running", "engine_waiting"  # vllm's scheduler
DOWN_MARGIN = 0.8  # scale down only if the load would fill the smaller fleet to at most 80%


def queue_policy(ctx) -> tuple[int, dict[str, Any]]:
    """policy: queue_capacity."""
    capacity = _capacity(ctx.config, _reported(ctx, CAPACITY_METRIC, min))
    bound = _engine_bound(ctx)
    if bound is not None and bound < capacity:
        return _decide(ctx, bound, f"engine runs {bound:g} with pages waiting")
    return _decide(ctx, capacity, "capacity")


class ServiceRatePolicy:
    """policy: service_rate. Ray Serve builds it once with `policy_kwargs` and calls it each tick."""

    def __init__(self, target_queue_wait_s: float = 10.0):
        if not target_queue_wait_s > 0:
            raise ValueError("target_queue_wait_s must be positive")
        self.target_queue_wait_s = float(target_queue_wait_s)

    def __call__(self, ctx) -> tuple[int, dict[str, Any]]:
        seconds_per_page = _reported(ctx, SECONDS_PER_PAGE_METRIC, statistics.median)
        if not seconds_per_page:
            return queue_policy(ctx)  # nobody has measured a batch yet
        # At least one page each: a replica always takes the page in front of it.
        per_replica = max(1.0, self.target_queue_wait_s / seconds_per_page)
        return _decide(ctx, per_replica, f"service rate {seconds_per_page:.3f} s/page")


def _decide(ctx, per_replica: float, why: str) -> tuple[int, dict[str, Any]]:
    """The replicas that hold `load` at `per_replica` pages each, with hysteresis and step limits."""
    current = max(ctx.target_num_replicas, 0)
    load = max(float(ctx.total_num_requests or 0.0), 0.0)
    wanted = math.ceil(load / per_replica)
    floor, ceiling = ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas

    if wanted > current:
        desired = min(wanted, current + max(1, current))
    elif current > floor and load <= DOWN_MARGIN * (current - 1) * per_replica:
        desired = max(wanted, current - max(1, current // 4))
    else:
        desired = current
    desired = max(floor, min(ceiling, desired))
    if desired != current:
        logger.debug("autoscaling %s: wants %d -> %d (%.1f pages in flight, %.1f per replica by %s)",
                     ctx.deployment_name, current, desired, load, per_replica, why)
    return desired, dict(ctx.policy_state or {})


def _capacity(config, reported: float | None = None) -> float:
    """One replica's capacity: what the replicas measured (a batch clamped to the device at
    warm-up), else the configured target (a full batch x max_concurrent_batches)."""
    if reported:
        return reported
    target = getattr(config, "target_ongoing_requests", None) if config is not None else None
    return float(target) if target and target > 0 else 1.0


def _engine_bound(ctx) -> Optional[float]:
    """The pages an engine runs at once where it holds others waiting (median over such replicas);
    None where no replica's engine has pages waiting."""
    try:
        metrics = ctx.aggregated_metrics or {}
        running = metrics.get(ENGINE_RUNNING_METRIC) or {}
        waiting = metrics.get(ENGINE_WAITING_METRIC) or {}
        bound = [float(running[replica]) for replica, pages in waiting.items()
                 if pages and pages > 0 and (running.get(replica) or 0) >= 1]
    except Exception:  # a policy must never raise: fall back
        return None
    return float(statistics.median(bound)) if bound else None


def _reported(ctx, metric: str, combine) -> Optional[float]:
    """The replicas' positive reports of `metric` (OCRModel.record_autoscaling_stats), combined."""
    try:
        values = [float(v) for v in ((ctx.aggregated_metrics or {}).get(metric) or {}).values()
                  if v and v > 0 and math.isfinite(v)]
    except Exception:  # a policy must never raise: fall back
        return None
    return float(combine(values)) if values else None
