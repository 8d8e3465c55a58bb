"""The autoscaling policies on tables of contexts, and the service rate they read: no cluster needed."""

from __future__ import annotations

import pytest
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from app.scaling.autoscaling import ServiceRatePolicy, queue_policy
from app.pipeline.service_rate import ServiceRate

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


# --- service_rate: replicas from measured seconds per page ---------------------------------------

def rate(seconds_per_page: float, *more: float) -> dict:
    return {"seconds_per_page": {f"r{i}": value for i, value in enumerate((seconds_per_page, *more))}}


def test_a_slow_engine_gets_replicas_after_a_few_pages_not_a_full_batch_capacity():
    """PP-OCR on a CPU at 2.5 s a page clears 4 pages in 10 s: 12 pages in flight want 3 replicas,
    where queue_capacity (8 pages each) holds 2 for the same load."""
    policy = ServiceRatePolicy(target_queue_wait_s=10)
    assert policy(context(target=1, load=12, now=0, metrics=rate(2.5)))[0] == 2  # doubling from 1
    assert policy(context(target=2, load=12, now=1, metrics=rate(2.5)))[0] == 3
    assert queue_policy(context(target=2, load=12, now=1, metrics=rate(2.5)))[0] == 2


def test_a_fast_engine_holds_its_replicas_under_a_load_a_batch_capacity_would_scale_for():
    """A GPU at 20 ms a page clears 500 pages in 10 s: 200 in flight need 1 replica, not 25."""
    policy = ServiceRatePolicy(target_queue_wait_s=10)
    assert policy(context(target=1, load=200, now=0, metrics=rate(0.02)))[0] == 1
    assert queue_policy(context(target=1, load=200, now=0))[0] == 2


def test_the_median_replica_speaks_and_reports_that_are_not_rates_are_ignored():
    policy = ServiceRatePolicy(target_queue_wait_s=10)
    # 1, 2 and 100 s/page: the median, 2 s, gives 5 pages per replica; 20 pages want 4.
    assert policy(context(target=4, load=20, now=0, metrics=rate(1.0, 2.0, 100.0)))[0] == 4
    assert policy(context(target=2, load=20, now=0, metrics=rate(1.0, 2.0, 100.0)))[0] == 4
    junk = {"seconds_per_page": {"r0": 0.0, "r1": float("nan"), "r2": -1.0}}
    assert policy(context(target=2, load=16, now=0, metrics=junk)) == queue_policy(
        context(target=2, load=16, now=0, metrics=junk))  # nothing measured: capacity


def test_service_rate_scales_down_with_the_same_hysteresis():
    policy = ServiceRatePolicy(target_queue_wait_s=10)
    # 2 s/page: 5 pages per replica. From 4 down to 3 needs the load to fill 3 to at most
    # 80%: 0.8 x 3 x 5 = 12 pages. 14 hold 4 replicas (ceil(14 / 5) = 3 would flap).
    assert policy(context(target=4, load=14, now=0, metrics=rate(2.0)))[0] == 4
    assert policy(context(target=4, load=12, now=0, metrics=rate(2.0)))[0] == 3
    with pytest.raises(ValueError):
        ServiceRatePolicy(target_queue_wait_s=0)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_service_rate_counts_busy_time_once_when_batches_overlap_and_never_idle_time():
    clock = Clock()
    rate_ = ServiceRate(alpha=1.0, clock=clock)  # alpha 1: the last sample alone
    assert rate_.seconds_per_page is None
    rate_.batch_started()
    clock.now += 2.0
    rate_.batch_finished(4)
    assert rate_.seconds_per_page == pytest.approx(0.5)
    clock.now += 1000.0  # idle: not a slow page
    rate_.batch_started()
    clock.now += 1.0
    rate_.batch_started()  # a second batch overlaps the first
    assert rate_.running == 2
    clock.now += 1.0
    rate_.batch_finished(4)  # 2 s busy since it started, 4 pages
    assert rate_.seconds_per_page == pytest.approx(0.5)
    clock.now += 1.0
    rate_.batch_finished(4)  # 1 more busy second, not the 2 s this batch lasted
    assert rate_.seconds_per_page == pytest.approx(0.25) and rate_.running == 0


def test_service_rate_moves_towards_a_new_speed_and_weighs_pages():
    clock = Clock()
    rate_ = ServiceRate(alpha=0.5, clock=clock)
    for _ in range(3):  # 1 s per page
        rate_.batch_started()
        clock.now += 8.0
        rate_.batch_finished(8)
    assert rate_.seconds_per_page == pytest.approx(1.0)
    rate_.batch_started()
    clock.now += 1.0
    rate_.batch_finished(1)  # one page at 1 s: a small batch at the same speed changes nothing
    assert rate_.seconds_per_page == pytest.approx(1.0)
    for _ in range(12):  # the engine got 4x faster
        rate_.batch_started()
        clock.now += 2.0
        rate_.batch_finished(8)
    assert rate_.seconds_per_page == pytest.approx(0.25, rel=0.01)


def test_an_engine_with_pages_waiting_inside_it_is_as_big_as_what_it_runs():
    """vLLM with a full KV cache runs 3 of its 8 sequence slots and queues the rest: 12 pages need
    4 replicas at 3, not 2 at the batch capacity of 8."""
    full_cache = {"batch_capacity": {"r1": 8.0}, "engine_running": {"r1": 3.0}, "engine_waiting": {"r1": 5.0}}
    assert queue_policy(context(1, 12, 0.0, metrics=full_cache))[0] == 2  # at most double per decision
    assert queue_policy(context(2, 12, 0.0, metrics=full_cache))[0] == 4
    room = {"batch_capacity": {"r1": 8.0}, "engine_running": {"r1": 3.0}, "engine_waiting": {"r1": 0.0}}
    assert queue_policy(context(2, 12, 0.0, metrics=room))[0] == 2  # nothing waits: the batch capacity holds
