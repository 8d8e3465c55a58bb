"""The queue-length policy on tables of contexts: no cluster needed."""

from __future__ import annotations

import pytest
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from app.autoscaling import queue_policy

CONFIG = AutoscalingConfig(min_replicas=1, max_replicas=16, target_ongoing_requests=8,
                           upscale_delay_s=5, downscale_delay_s=60)


def context(target: int, load: float, now: float, state: dict | None = None, running: int | None = None,
            floor: int = 1, ceiling: int = 16, metrics: dict | None = None) -> AutoscalingContext:
    return AutoscalingContext(
        deployment_id=None, deployment_name="OCRModel", app_name="ocr",
        current_num_replicas=target if running is None else running, target_num_replicas=target,
        running_replicas=[], total_num_requests=load, total_queued_requests=0.0,
        aggregated_metrics=metrics or {}, raw_metrics={}, capacity_adjusted_min_replicas=floor,
        capacity_adjusted_max_replicas=ceiling, policy_state=state or {},
        last_scale_up_time=None, last_scale_down_time=None, current_time=now, config=CONFIG,
    )


def run(loads: list[float], start: int = 1) -> list[int]:
    """Feed loads through the policy, applying each decision at once (Ray adds the delays)."""
    target, state, targets = start, {}, []
    for now, load in enumerate(loads):
        target, state = queue_policy(context(target, load, float(now), state))
        targets.append(target)
    return targets


def test_step_up_at_most_doubles_per_decision():
    # 64 pages want 8 replicas of 8 pages each.
    assert run([64] * 5) == [2, 4, 8, 8, 8]
    assert run([20], start=4) == [4]  # 3 replicas' worth: no change
    assert run([33], start=4) == [5]  # one page over: +1


def test_step_down_by_a_quarter_per_decision():
    assert run([0] * 9, start=8) == [6, 5, 4, 3, 2, 1, 1, 1, 1]


@pytest.mark.parametrize("load", [0.0, 0.5])
def test_zero_load_reaches_the_floor_and_stays(load):
    targets = run([load] * 12, start=4)
    assert targets[-1] == 1 and targets == sorted(targets, reverse=True)


def test_flapping_load_at_a_boundary_does_not_flap_replicas():
    # Around 4 replicas x 8 = 32: one step up at 33, then 30 or 33 both hold 5, because
    # scaling back down needs the load to fit 4 replicas with 20% to spare (<= 25.6).
    targets = run([33.0 if t % 2 else 30.0 for t in range(40)], start=4)
    assert targets[:2] == [4, 5] and set(targets[1:]) == {5}


def test_policy_state_from_ray_is_passed_through():
    state = {"__decision_counters": 3, "__decision_timestamp": 12.5}
    _, returned = queue_policy(context(target=2, load=50, now=0, state=state))
    assert returned == state


def test_a_replica_that_died_is_not_a_reason_to_scale_down():
    desired, _ = queue_policy(context(target=4, load=30, now=0, running=3))
    assert desired == 4


def test_floor_and_ceiling_are_respected():
    assert queue_policy(context(target=2, load=10_000, now=100, ceiling=3))[0] == 3
    assert queue_policy(context(target=1, load=0, now=1000, floor=2))[0] == 2


def test_the_target_follows_the_capacity_the_replicas_measured():
    assert queue_policy(context(target=2, load=16, now=0.0))[0] == 2  # configured: 8 pages per replica
    clamped = {"batch_capacity": {"r1": 4.0, "r2": 2.0}}  # what the replicas measured at warm-up
    assert queue_policy(context(target=2, load=16, now=0.0, metrics=clamped))[0] == 4  # 16/2 = 8, doubling from 2
    unusable = {"batch_capacity": {"r1": 0.0}}  # nothing usable: the configured target
    assert queue_policy(context(target=2, load=16, now=0.0, metrics=unusable))[0] == 2
