"""Replicas sized from queue length: a custom Ray Serve autoscaling policy (a pure function).

desired = ceil(pages queued + running / one replica's batch capacity), where the capacity is
the deployment's `target_ongoing_requests` (a full batch x max_concurrent_batches). Then:
- hysteresis: scale up as soon as the load has asked for more for `upscale_delay_s`; scale
  down only when the load fits in fewer replicas with `DOWN_MARGIN` to spare, and has for
  `downscale_delay_s`, so a load hovering at a boundary does not flap;
- a step limit: at most double (at least +1) up, at most a quarter (at least -1) down per decision;
- a floor and ceiling: the capacity-adjusted min and max replicas.
Decisions start from the target, not the running count, so a replica that died is replaced
rather than read as a reason to scale down.
"""

from __future__ import annotations

import math
from typing import Any

DOWN_MARGIN = 0.8  # scale down only if the load would fill the smaller fleet to at most 80%


def queue_policy(ctx) -> tuple[int, dict[str, Any]]:
    state = dict(ctx.policy_state or {})
    current = max(ctx.target_num_replicas, 0)
    capacity = _capacity(ctx.config)
    load = max(float(ctx.total_num_requests or 0.0), 0.0)
    now = ctx.current_time or 0.0
    wanted = math.ceil(load / capacity)
    floor, ceiling = ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas

    if wanted > current:
        direction, delay = "up", _delay(ctx.config, "upscale_delay_s", 0.0)
    elif current > floor and load <= DOWN_MARGIN * (current - 1) * capacity:
        direction, delay = "down", _delay(ctx.config, "downscale_delay_s", 600.0)
    else:
        direction, delay = None, 0.0

    if direction != state.get("direction"):
        state.update(direction=direction, since=now)  # a new trend restarts its clock
    if direction is None or now - state.get("since", now) < delay:
        return _clamp(current, floor, ceiling), state

    if direction == "up":
        desired = min(wanted, current + max(1, current))
    else:
        desired = max(wanted, current - max(1, current // 4))
    state["since"] = now  # the next step in the same direction waits a full delay again
    return _clamp(desired, floor, ceiling), state


def _capacity(config) -> float:
    target = getattr(config, "target_ongoing_requests", None) if config is not None else None
    return float(target) if target and target > 0 else 1.0


def _delay(config, name: str, default: float) -> float:
    value = getattr(config, name, None) if config is not None else None
    return float(value) if value is not None else default


def _clamp(value: int, floor: int, ceiling: int) -> int:
    return max(floor, min(ceiling, value))
