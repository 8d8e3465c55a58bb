"""Small pieces: the batch cost, the error taxonomy, settings and the fleet config file."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import yaml
from ray.exceptions import RayTaskError
from ray.serve.exceptions import BackPressureError
from ray.serve.schema import ServeDeploySchema

from app.serve.builder import GPUCapacityError, check_gpu_capacity, wait_for_gpu_capacity
from app.config import Settings
from app.errors import BadRequest, PayloadTooLarge, ServiceUnavailable, to_error, unwrap
from app.pipeline.batching import batch_cost

ROOT = Path(__file__).resolve().parent.parent


class Page:
    def __init__(self, pixels):
        self.pixels = pixels


def test_batch_cost_counts_pages_and_pixels():
    assert batch_cost([Page(10)] * 3, max_batch_size=8, max_batch_pixels=1000) == 3
    assert batch_cost([Page(500)] * 2, 8, 1000) == 8  # the pixel budget is full
    assert batch_cost([Page(600)] * 2, 8, 1000) > 8  # over the budget: does not fit
    assert batch_cost([Page(10**9)], 8, 1000) == 8  # one huge page alone always fits


def test_batch_cost_never_raises():
    assert batch_cost([object(), None], 8, 1000) == 2
    assert batch_cost([], 8, 1000) == 0


def test_errors_keep_code_through_pickle_and_ray_task_error():
    error = PayloadTooLarge("too big", code="too_many_pages")
    clone = pickle.loads(pickle.dumps(error))
    assert (type(clone), clone.code, clone.message) == (PayloadTooLarge, "too_many_pages", "too big")
    wrapped = RayTaskError("infer", "traceback", error)
    twice = RayTaskError("process", "traceback", wrapped)
    assert unwrap(twice) is error
    assert to_error(twice).status == 413


def test_error_mapping_of_ray_and_unknown_errors():
    overloaded = to_error(BackPressureError(num_queued_requests=10, max_queued_requests=10))
    assert (overloaded.status, overloaded.retryable, overloaded.code) == (503, True, "overloaded")
    assert overloaded.retry_after_s
    unknown = to_error(ZeroDivisionError("x"))
    assert unknown.status == 500 and not unknown.retryable
    assert to_error(BadRequest("b")).body() == {"error": {"code": "bad_request", "message": "b", "retryable": False}}
    unavailable = ServiceUnavailable("s")
    assert (unavailable.status, unavailable.retryable, unavailable.retry_after_s) == (503, True, 5)
    assert unavailable.body() == {"error": {"code": "unavailable", "message": "s", "retryable": True}}


def test_settings_reject_unknown_keys_and_bad_values():
    with pytest.raises(ValueError):
        Settings.model_validate({"engin": "ppocr"})
    with pytest.raises(ValueError):
        Settings.model_validate({"limits": {"max_pages": 0}})
    with pytest.raises(ValueError):
        Settings.model_validate({"device": "cuda", "ocr_num_gpus": 0})


def test_ocr_scaling_options_derive_target_from_batch_capacity():
    from app.serve.builder import ocr_scaling_options

    fixed = ocr_scaling_options(Settings(ocr_replicas=3))
    assert fixed == {"num_replicas": 3, "max_ongoing_requests": 16}
    scaled = ocr_scaling_options(Settings(
        ocr_autoscaling={"min_replicas": 2, "max_replicas": 6},
        batching={"max_batch_size": 4, "max_concurrent_batches": 2},
    ))
    config = scaled["autoscaling_config"]
    assert (config["target_ongoing_requests"], scaled["max_ongoing_requests"]) == (8, 16)
    assert config["policy"] == {"policy_function": "app.scaling.autoscaling:ServiceRatePolicy",
                                "policy_kwargs": {"target_queue_wait_s": 10.0}}
    assert "num_replicas" not in scaled
    capacity = ocr_scaling_options(Settings(ocr_autoscaling={"policy": "queue"}))  # the old name
    assert capacity["autoscaling_config"]["policy"] == {"policy_function": "app.scaling.autoscaling:queue_policy"}
    own = ocr_scaling_options(Settings(ocr_autoscaling={"policy": "serve_default"}))
    assert "policy" not in own["autoscaling_config"]


def test_gpu_request_without_gpus_fails_with_a_clear_message():
    check_gpu_capacity(Settings(ocr_num_gpus=0), cluster_gpus=0)
    check_gpu_capacity(Settings(ocr_num_gpus=0.25, ocr_replicas=4), cluster_gpus=1)
    with pytest.raises(GPUCapacityError, match="has 0"):
        check_gpu_capacity(Settings(ocr_num_gpus=0.25), cluster_gpus=0)
    with pytest.raises(GPUCapacityError, match="= 1.25 GPU"):
        check_gpu_capacity(Settings(ocr_num_gpus=0.25, ocr_replicas=5), cluster_gpus=1)
    autoscaled = Settings(ocr_num_gpus=0.5, ocr_autoscaling={"min_replicas": 2, "max_replicas": 100})
    check_gpu_capacity(autoscaled, cluster_gpus=1)  # the minimum must fit; growth may wait for GPUs
    with pytest.raises(GPUCapacityError):
        check_gpu_capacity(autoscaled, cluster_gpus=0.5)


def test_serve_config_is_a_valid_deploy_schema_with_valid_args():
    config = yaml.safe_load((ROOT / "serve_config.yaml").read_text())
    schema = ServeDeploySchema.model_validate(config)
    [app] = schema.applications
    assert app.import_path == "app.serve.builder:build_app"
    settings = Settings.model_validate(app.args)
    assert (settings.engine, settings.ocr_num_gpus) == ("vlm", 0.25)
    assert settings.model_dir.startswith("/models/")
    for deployment in app.deployments:
        options = deployment.ray_actor_options if isinstance(deployment.ray_actor_options, dict) else {}
        assert "num_gpus" not in options, "GPUs are set through args.ocr_num_gpus, which the builder checks"
    env = app.runtime_env.get("env_vars", {})
    assert env.get("HF_HUB_OFFLINE") == "1" and env.get("TRANSFORMERS_OFFLINE") == "1"
    assert env.get("PYTORCH_CUDA_ALLOC_CONF") == "expandable_segments:True"
    ocr_drain = next(d for d in app.deployments if d.name == "OCRModel").graceful_shutdown_timeout_s
    assert ocr_drain >= 2 * settings.vlm.max_new_tokens * 0.05, "a replica told to stop must finish its batches"
    ocr = next(d for d in app.deployments if d.name == "OCRModel")
    assert ocr.user_config == settings.batching.model_dump()
    for deployment in app.deployments:
        if deployment.name != "OCRModel":
            assert deployment.autoscaling_config, f"{deployment.name} has no autoscaling_config"
    assert settings.ocr_autoscaling.policy == "service_rate" and settings.ocr_autoscaling.max_replicas == 960
    assert "pip" not in app.runtime_env and "working_dir" not in app.runtime_env


def _run(coro):
    import asyncio

    return asyncio.run(coro)


def test_a_page_is_sent_again_once_when_its_replica_died():
    from ray.exceptions import ActorDiedError

    from app.pipeline.retry import retry_page

    calls = []

    async def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RayTaskError("process", "tb", ActorDiedError())
        return "page"

    assert _run(retry_page(flaky, retries=1, what="t", base_s=0)) == "page"
    assert len(calls) == 2


def test_a_second_loss_is_a_retryable_503_and_other_errors_are_not_retried():
    from ray.exceptions import ActorDiedError

    from app.pipeline.retry import retry_page

    calls = []

    async def always_lost():
        calls.append(1)
        raise ActorDiedError()

    with pytest.raises(ActorDiedError) as caught:
        _run(retry_page(always_lost, retries=1, what="t", base_s=0))
    assert len(calls) == 2
    error = to_error(caught.value)
    assert (error.status, error.code, error.retryable) == (503, "stage_unavailable", True)

    calls.clear()

    async def bad_page():
        calls.append(1)
        raise BadRequest("the page itself is bad")

    with pytest.raises(BadRequest):
        _run(retry_page(bad_page, retries=1, what="t", base_s=0))
    assert len(calls) == 1


def test_ray_failures_map_to_retryable_503s_never_500():
    from ray.exceptions import ActorUnavailableError, OutOfMemoryError, TaskCancelledError
    from ray.serve.exceptions import RayServeException

    cases = {
        "stage_unavailable": [ActorUnavailableError("gone", None),
                              RayServeException("Actor died: the upstream replica is dead")],
        "stage_out_of_memory": [OutOfMemoryError("killed by the memory monitor")],
        "cancelled": [TaskCancelledError()],
    }
    for code, exceptions in cases.items():
        for exc in exceptions:
            error = to_error(exc)
            assert (error.status, error.code, error.retryable) == (503, code, True), exc


def test_the_gpu_check_waits_for_workers_that_join_late():
    joined = iter([0, 0, 0.5, 1.0])  # the cluster's GPUs as workers join, one poll after another
    seen = []

    def cluster_gpus():
        seen.append(next(joined, 1.0))
        return seen[-1]

    wait_for_gpu_capacity(Settings(ocr_num_gpus=0.25, ocr_replicas=4, gpu_wait_timeout_s=30), cluster_gpus, poll_s=0.01)
    assert 1.0 in seen  # it returned only once the fourth quarter-GPU replica fitted
    with pytest.raises(GPUCapacityError, match="has 0.5 after waiting 0 s .*0.5 GPU\\(s\\) missing"):
        wait_for_gpu_capacity(Settings(ocr_num_gpus=0.25, ocr_replicas=4, gpu_wait_timeout_s=0.2),
                              lambda: 0.5, poll_s=0.05)


def test_local_runner_refuses_a_network_host_without_api_keys(capsys):
    from app.__main__ import main

    assert main(["--host", "0.0.0.0"]) == 2  # before any Ray is started
    assert "without API keys" in capsys.readouterr().err


def test_the_null_engine_reads_nothing_says_so_and_takes_only_what_real_engines_take():
    import numpy as np

    from app.engines import build_engine, input_budget
    from app.engines.null import NOTE

    settings = Settings(engine="null")
    engine = build_engine(settings, threads=1)
    engine.load()
    results = engine.infer([np.zeros((4, 5, 3), np.uint8), np.full((2, 2, 3), 255, np.uint8)])
    assert [(r.lines, r.markdown, r.notes) for r in results] == [([], None, [NOTE])] * 2
    assert engine.info.name == "null" and input_budget(settings).max_side == 2000
    with pytest.raises(ValueError):
        engine.infer([np.zeros((4, 5), np.uint8)])  # grey: the OCR replica must have made it RGB


def test_a_deadline_in_serves_words_is_not_a_lost_replica():
    """Replica loss is read from Serve's message where it raises no typed cause: whole words only."""
    from ray.serve.exceptions import RayServeException

    from app.errors import is_replica_loss

    assert is_replica_loss(RayServeException("the replica handling this request is dead"))
    assert not is_replica_loss(RayServeException("request deadline exceeded after 30 s"))
    assert not is_replica_loss(RayServeException("the deadletter queue is full"))


def test_the_client_says_the_service_is_unreachable_when_no_attempt_reached_it():
    """Every attempt a transport error: the last one is raised, not a missing answer."""
    import httpx

    from app.client import Client
    from app.testkit.ports import free_port

    client = Client(f"http://127.0.0.1:{free_port()}", api_key=None, timeout_s=1, give_up_after_s=1.5)
    try:
        with pytest.raises(httpx.ConnectError):
            client.request("GET", "/healthz")
    finally:
        client.close()


def test_the_one_retry_rule_sends_a_page_again_after_any_retryable_error_and_never_after_others():
    """Requests and jobs share it (app/pipeline/page_pipeline.py): an overloaded stage is retried like a lost
    replica; an engine failure (500) and a bad page (4xx) are not."""
    from ray.serve.exceptions import BackPressureError

    from app.errors import EngineFailure
    from app.pipeline.retry import retry_page

    for retryable in (BackPressureError(num_queued_requests=1, max_queued_requests=1),
                      ServiceUnavailable("out of memory", code="gpu_out_of_memory")):
        calls = []

        async def once_busy():
            calls.append(1)
            if len(calls) == 1:
                raise retryable
            return "page"

        assert _run(retry_page(once_busy, retries=2, what="t", base_s=0)) == "page" and len(calls) == 2
    for final in (EngineFailure("the engine broke"), BadRequest("bad page")):
        calls = []

        async def broken():
            calls.append(1)
            raise final

        with pytest.raises(type(final)):
            _run(retry_page(broken, retries=3, what="t", base_s=0))
        assert len(calls) == 1


def test_every_benchmark_takes_its_percentiles_one_way():
    """Nearest rank: the smallest value with at least a share q of the values at or below it."""
    from load.common import percentile

    values = [float(v) for v in range(20, 0, -1)]  # unsorted on purpose
    assert (percentile(values, 0.5), percentile(values, 0.95), percentile(values, 1.0)) == (10.0, 19.0, 20.0)
    assert percentile([7.0], 0.99) == 7.0 and percentile([], 0.5) is None


def test_the_ray_token_is_made_private_or_tightened(tmp_path):
    import os

    from app.ops.secrets import private_ray_token

    made = private_ray_token(tmp_path)
    assert made.stat().st_mode & 0o777 == 0o600 and len(made.read_text()) == 64
    other = tmp_path / "other"
    (other / ".ray").mkdir(parents=True)
    (other / ".ray" / "auth_token").write_text("kept")
    os.chmod(other / ".ray" / "auth_token", 0o644)
    tightened = private_ray_token(other)
    assert tightened.stat().st_mode & 0o777 == 0o600 and tightened.read_text() == "kept"


def test_the_ingress_has_request_slots_for_every_long_lived_kind_and_refuses_to_start_without_them():
    """Issue 37.8: 64 event streams + 32 long-polls + 16 uploads were limits on 96 request slots."""
    import pytest

    from app.config import Settings
    from app.http.ingress import check_request_slots
    from app.http.ingress_settings import IngressSettings
    from app.serve.builder import ingress_options

    settings = Settings()
    jobs = settings.jobs
    slots = ingress_options(settings)["max_ongoing_requests"]
    assert slots == settings.max_inflight_requests + settings.ingress_overflow_requests + jobs.max_uploads \
        + jobs.max_long_polls + jobs.max_event_streams
    check_request_slots(slots, IngressSettings.of(settings))
    with pytest.raises(ValueError, match="max_event_streams"):
        check_request_slots(settings.max_inflight_requests + settings.ingress_overflow_requests,
                            IngressSettings.of(settings))


def test_searchable_renders_run_once_per_job_within_the_clients_upload_slots():
    """Issue 37.5 in process: ten calls at once on one job render once; a client's slots bound them first."""
    import asyncio

    import pytest

    from app.errors import QuotaExceeded
    from app.jobs.model import Job
    from app.http.job_slots import ByteBudget, Holders
    from app.jobs.searchable import SearchableRenders

    renders = SearchableRenders(Holders("job uploads", 16, "max_uploads"), ByteBudget(10**9), 10**8)
    started = []

    async def render() -> bytes:
        started.append(1)
        await asyncio.sleep(0.05)
        return b"%PDF-1.7 one"

    async def calls(count: int, client_slots: int):
        job = Job(id=f"{count:032x}")
        return await asyncio.gather(*[renders.answer(job, "c", client_slots, 1000, render) for _ in range(count)],
                                    return_exceptions=True)

    answers = asyncio.run(calls(10, 16))
    assert len(started) == 1 and {a.body for a in answers} == {b"%PDF-1.7 one"}
    assert renders._locks == {} and not renders._users  # nothing kept for a job nobody renders
    crowded = asyncio.run(calls(6, 2))
    assert sum(isinstance(a, QuotaExceeded) for a in crowded) == 4 and len(started) == 2
    with pytest.raises(Exception, match="keep_document"):
        asyncio.run(renders.answer(Job(id="f" * 32), "c", 4, None, render))
