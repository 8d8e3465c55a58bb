"""The application builder: `import_path: app.serve.builder:build_app` in serve_config.yaml.

It validates the args into `Settings`, refuses a GPU request the cluster cannot
meet (rather than leaving replicas in DEPLOYING forever), and wires the graph.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import ray
from ray.serve import Application

from app.config import Settings
from app.engines import check_engine, input_budget
from app.http.ingress import Ingress
from app.http.ingress_settings import IngressSettings
from app.jobs.runner import JobRunner
from app.pipeline.ocr_model import OCRModel
from app.pipeline.ocr_settings import OCRReplicaSettings
from app.pipeline.postprocess import Postprocessor
from app.pipeline.preprocess import Preprocessor
from app.structure.deployment import StructureModel


logger = logging.getLogger("ray.serve")
MARKDOWN_ENGINES = ("vlm", "vllm")  # they write a page's Markdown, without boxes to join regions to


class GPUCapacityError(RuntimeError):
    pass


def initial_ocr_replicas(settings: Settings) -> int:
    return settings.ocr_autoscaling.min_replicas if settings.ocr_autoscaling else settings.ocr_replicas


def check_gpu_capacity(settings: Settings, cluster_gpus: float, waited_s: float = 0.0) -> None:
    replicas = initial_ocr_replicas(settings)
    wanted = settings.ocr_num_gpus * replicas
    if settings.ocr_num_gpus > 0 and cluster_gpus < wanted:
        raise GPUCapacityError(
            f"OCRModel asks for {replicas} replica(s) x num_gpus={settings.ocr_num_gpus} "
            f"= {wanted:g} GPU(s), but the Ray cluster has {cluster_gpus:g} after waiting {waited_s:.0f} s "
            f"(gpu_wait_timeout_s): {wanted - cluster_gpus:g} GPU(s) missing. Start or join GPU nodes "
            "(`cluster/ray-node.sh worker HEAD_IP`), lower ocr_replicas, or set ocr_num_gpus: 0 to run on CPU."
        )


def wait_for_gpu_capacity(settings: Settings, cluster_gpus: Callable[[], float], poll_s: float = 2.0) -> None:
    """A cold fleet: `serve deploy` runs on the head before the GPU workers have joined. Wait for them,
    up to `gpu_wait_timeout_s`, then fail with what is missing (never leave replicas pending forever)."""
    wanted = settings.ocr_num_gpus * initial_ocr_replicas(settings)
    started = time.monotonic()
    logged = False
    while settings.ocr_num_gpus > 0 and cluster_gpus() < wanted:
        waited = time.monotonic() - started
        if waited >= settings.gpu_wait_timeout_s:
            break
        if not logged:
            logger.warning("waiting up to %.0f s for %g GPU(s) to join (the cluster has %g)",
                           settings.gpu_wait_timeout_s, wanted, cluster_gpus())
            logged = True
        time.sleep(min(poll_s, max(0.0, settings.gpu_wait_timeout_s - waited)))
    check_gpu_capacity(settings, cluster_gpus(), time.monotonic() - started)


def ocr_scaling_options(settings: Settings) -> dict:
    """A fixed replica count, or autoscaling whose target is one replica's full batch capacity."""
    if settings.engine == "vllm":  # vLLM batches itself: a replica holds as many pages as it decodes at once
        capacity = settings.vllm.max_num_seqs
    else:
        capacity = settings.batching.max_batch_size * settings.batching.max_concurrent_batches
    # Below batch x concurrency the batches never fill (ray#43288); twice it keeps the next batch queued.
    options = {"max_ongoing_requests": 2 * capacity}
    if settings.ocr_max_replicas_per_node:
        options["max_replicas_per_node"] = settings.ocr_max_replicas_per_node
    scaling = settings.ocr_autoscaling
    if scaling is None:
        return options | {"num_replicas": settings.ocr_replicas}
    config = {
        "min_replicas": scaling.min_replicas,
        "initial_replicas": scaling.min_replicas,
        "max_replicas": scaling.max_replicas,
        "target_ongoing_requests": capacity,
        "upscale_delay_s": scaling.upscale_delay_s,
        "downscale_delay_s": scaling.downscale_delay_s,
        "look_back_period_s": scaling.look_back_period_s,
    }
    if scaling.policy == "service_rate":
        config["policy"] = {"policy_function": "app.scaling.autoscaling:ServiceRatePolicy",
                            "policy_kwargs": {"target_queue_wait_s": scaling.target_queue_wait_s}}
    elif scaling.policy == "queue_capacity":
        config["policy"] = {"policy_function": "app.scaling.autoscaling:queue_policy"}
    return options | {"autoscaling_config": config}


def logging_config(settings: Settings) -> dict:
    """Serve's per-deployment logging: JSON lines when asked; text (Serve's own format) by default."""
    return {"encoding": settings.logging.format.upper(), "log_level": settings.logging.level}


# Each deployment's options, in this one place, for a run from args alone (`python -m app`, tests).
# serve_config.yaml's `deployments:` entries override them one deployment at a time for the fleet;
# the @serve.deployment decorators set none.

def ingress_request_slots(settings: Settings) -> int:
    """Every kind of request an ingress replica holds, each with room of its own: /v1/ocr's working slots,
    the overflow it answers 503, and the jobs' long-lived slots (uploads, long-polls, event streams)."""
    return settings.max_inflight_requests + settings.ingress_overflow_requests + settings.jobs.long_lived_slots


def ingress_options(settings: Settings) -> dict:
    # Room above the admission limit so that excess requests reach the ingress and get its
    # JSON 503; past that the proxy itself answers 503 (plain text) instead of queueing more.
    # An ingress replica told to stop holds whole requests: a long document gets time to finish.
    return {"ray_actor_options": {"num_cpus": 0.1}, "max_ongoing_requests": ingress_request_slots(settings),
            "max_queued_requests": settings.ingress_max_queued_requests,
            "graceful_shutdown_timeout_s": 120}


def preprocessor_options(settings: Settings) -> dict:
    # Its limits are its user_config: `serve deploy` changes them in place, on this stage alone.
    return {"ray_actor_options": {"num_cpus": 0.15}, "max_ongoing_requests": 16,
            "graceful_shutdown_timeout_s": 60, "user_config": settings.preprocess_config().model_dump()}


def ocr_options(settings: Settings) -> dict:
    # health_check_period_s: the controller notices a killed replica at its next health check; at
    # 10 s a replacement took up to 15 s. graceful_shutdown_timeout_s: a replica told to stop
    # finishes the batches it holds; a VLM batch at max_new_tokens 2048 on a shared GPU can take minutes.
    return {"ray_actor_options": {"num_cpus": settings.ocr_num_cpus, "num_gpus": settings.ocr_num_gpus},
            "health_check_period_s": 3, "graceful_shutdown_timeout_s": 300,
            "user_config": settings.batching.model_dump(), "max_queued_requests": settings.max_queued_pages,
            **ocr_scaling_options(settings)}


def postprocessor_options(settings: Settings) -> dict:
    return {"ray_actor_options": {"num_cpus": 0.1}, "max_ongoing_requests": 64}


def structure_options(settings: Settings) -> dict:
    # A page at a time per thread: more in flight only queue inside the replica, where Serve cannot see them.
    return {"ray_actor_options": {"num_cpus": settings.structure.num_cpus}, "num_replicas": settings.structure.replicas,
            "max_ongoing_requests": 4 * settings.structure.threads, "graceful_shutdown_timeout_s": 30}


def runner_options(settings: Settings) -> dict:
    # num_cpus 0: the runner only waits, on the store and on deployments that reserve their own CPUs
    # (at 0.1 the default graph asked for 2.05, and `make run` on 2 cores never scheduled its Ingress).
    return {"ray_actor_options": {"num_cpus": 0}, "max_ongoing_requests": 16, "health_check_period_s": 5,
            "graceful_shutdown_timeout_s": 5, "num_replicas": settings.jobs.runner_replicas}


def build_app(args: dict | None = None) -> Application:
    settings = Settings.model_validate(args or {})
    check_engine(settings)  # the engine registry is the only place that knows engine names
    if ray.is_initialized():
        wait_for_gpu_capacity(settings, lambda: ray.cluster_resources().get("GPU", 0.0))
    logs = {"logging_config": logging_config(settings)}
    # Each stage is bound only what it reads: the Preprocessor the engine's input budget (the rest
    # of its settings are its user_config), the Postprocessor nothing, the job runner `jobs`, the OCR
    # replicas their engine's spec and batching, the ingress its limits (and /v1/info's public settings).
    ocr_model = OCRModel.options(**ocr_options(settings), **logs).bind(OCRReplicaSettings.of(settings))
    preprocessor = Preprocessor.options(**preprocessor_options(settings), **logs).bind(input_budget(settings))
    postprocessor = Postprocessor.options(**postprocessor_options(settings), **logs).bind()
    # Deployed whatever the default mode, so that a request may ask for structure where it is off; not for
    # the engines that write their page as Markdown, whose structure is parsed from what they wrote.
    structure = None
    if settings.engine not in MARKDOWN_ENGINES:
        structure = StructureModel.options(**structure_options(settings), **logs).bind(settings.structure)
    runner = None
    if settings.jobs.store:
        runner = JobRunner.options(**runner_options(settings), **logs).bind(
            settings.jobs, preprocessor, ocr_model, postprocessor, structure, settings.structure.mode)
    return Ingress.options(**ingress_options(settings), **logs).bind(
        IngressSettings.of(settings), preprocessor, ocr_model, postprocessor, runner, structure)
