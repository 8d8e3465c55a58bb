"""Replicas sized from queue length: a custom Ray Serve autoscaling policy (a pure function).

desired = ceil(pages queued + running / one replica's batch capacity), where the capacity is
what the replicas report as `batch_capacity` (their batch after the warm-up clamped it to the
device, x max_concurrent_batches), else the deployment's `target_ongoing_requests`. Then:
- hysteresis: scale down only when the load fits in fewer replicas with `DOWN_MARGIN` to
  spare, so a load hovering at a boundary holds the count instead of flapping;
- a step limit: at most double (at least +1) up, at most a quarter (at least -1) down per decision;
- a floor and ceiling: the capacity-adjusted min and max replicas.
Decisions start from the target, not the running count, so a replica that died is replaced
rather than read as a reason to scale down. Ray Serve applies `upscale_delay_s` and
`downscale_delay_s` to what this returns (its decision counters live in `policy_state`,
which is passed through untouched), so a trend must last that long before it acts.
"""

from __future__ import annotations

import logging
import math
from typing import Any

logger = logging.getLogger("ray.serve")

CAPACITY_METRIC = "batch_capacity"
DOWN_MARGIN = 0.8  # scale down only if the load would fill the smaller fleet to at most 80%


def queue_policy(ctx) -> tuple[int, dict[str, Any]]:
    current = max(ctx.target_num_replicas, 0)
    capacity = _capacity(ctx.config, _reported_capacity(ctx))
    load = max(float(ctx.total_num_requests or 0.0), 0.0)
    wanted = math.ceil(load / capacity)
    floor, ceiling = ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas

    if wanted > current:
        desired = min(wanted, current + max(1, current))
    elif current > floor and load <= DOWN_MARGIN * (current - 1) * capacity:
        desired = max(wanted, current - max(1, current // 4))
    else:
        desired = current
    desired = max(floor, min(ceiling, desired))
    if desired != current:
        logger.debug("queue_policy %s: wants %d -> %d (%.1f pages in flight, %.0f per replica)",
                     ctx.deployment_name, current, desired, load, capacity)
    return desired, dict(ctx.policy_state or {})


def _capacity(config, reported: float | None = None) -> float:
    """One replica's capacity: what the replicas measured (a batch clamped to the device at
    warm-up), else the configured target (a full batch x max_concurrent_batches)."""
    if reported:
        return reported
    target = getattr(config, "target_ongoing_requests", None) if config is not None else None
    return float(target) if target and target > 0 else 1.0


def _reported_capacity(ctx) -> float | None:
    """The smallest `batch_capacity` the OCR replicas report (OCRModel.record_autoscaling_stats)."""
    try:
        values = [v for v in ((ctx.aggregated_metrics or {}).get(CAPACITY_METRIC) or {}).values() if v and v > 0]
    except Exception:  # a policy must never raise: fall back to the configured target
        return None
    return float(min(values)) if values else None
