"""The queue-length policy on tables of contexts: no cluster needed."""

from __future__ import annotations

import pytest
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from app.autoscaling import queue_policy

CONFIG = AutoscalingConfig(min_replicas=1, max_replicas=16, target_ongoing_requests=8,
                           upscale_delay_s=5, downscale_delay_s=60)


def context(target: int, load: float, now: float, state: dict | None = None, running: int | None = None,
            floor: int = 1, ceiling: int = 16) -> AutoscalingContext:
    return AutoscalingContext(
        deployment_id=None, deployment_name="OCRModel", app_name="ocr",
        current_num_replicas=target if running is None else running, target_num_replicas=target,
        running_replicas=[], total_num_requests=load, total_queued_requests=0.0,
        aggregated_metrics={}, raw_metrics={}, capacity_adjusted_min_replicas=floor,
        capacity_adjusted_max_replicas=ceiling, policy_state=state or {},
        last_scale_up_time=None, last_scale_down_time=None, current_time=now, config=CONFIG,
    )


def run(steps: list[tuple[float, float]], start: int = 1) -> list[int]:
    """Feed (time, load) steps through the policy; return the target after each."""
    target, state, targets = start, {}, []
    for now, load in steps:
        target, state = queue_policy(context(target, load, now, state))
        targets.append(target)
    return targets


def test_step_up_waits_for_the_upscale_delay_then_at_most_doubles():
    # 64 pages want 8 replicas of 8; from 1 the steps are 2, 4, 8, each after 5 s of demand.
    targets = run([(0, 64), (3, 64), (5, 64), (10, 64), (15, 64), (20, 64)])
    assert targets == [1, 1, 2, 4, 8, 8]


def test_step_down_waits_for_the_downscale_delay_and_steps_by_a_quarter():
    targets = run([(0, 0), (30, 0), (60, 0), (120, 0), (180, 0)], start=8)
    assert targets == [8, 8, 6, 5, 4]


@pytest.mark.parametrize("load", [0.0, 0.5])
def test_zero_load_reaches_the_floor_and_stays(load):
    targets = run([(t * 60.0, load) for t in range(12)], start=4)
    assert targets[-1] == 1 and targets == sorted(targets, reverse=True)


def test_flapping_load_at_a_boundary_does_not_flap_replicas():
    # 4 replicas x 8 = 32; load alternates 30/33 every 2 s: one scale-up would need 5 s
    # of sustained demand, one scale-down needs load <= 0.8 x 24.
    steps = [(t * 2.0, 33.0 if t % 2 else 30.0) for t in range(40)]
    assert set(run(steps, start=4)) == {4}


def test_a_replica_that_died_is_not_a_reason_to_scale_down():
    desired, _ = queue_policy(context(target=4, load=30, now=0, running=3))
    assert desired == 4


def test_floor_and_ceiling_are_respected():
    assert queue_policy(context(target=2, load=10_000, now=100, state={"direction": "up", "since": 0}, ceiling=3))[0] == 3
    assert queue_policy(context(target=1, load=0, now=1000, floor=2))[0] == 2
