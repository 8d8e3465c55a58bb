"""The application builder: `import_path: app.builder:build_app` in serve_config.yaml.

It validates the args into `Settings`, refuses a GPU request the cluster cannot
meet (rather than leaving replicas in DEPLOYING forever), and wires the graph.
"""

from __future__ import annotations

import ray
from ray.serve import Application

from app.config import Settings
from app.ingress import Ingress
from app.ocr_model import OCRModel
from app.postprocess import Postprocessor
from app.preprocess import Preprocessor


class GPUCapacityError(RuntimeError):
    pass


def check_gpu_capacity(settings: Settings, cluster_gpus: float) -> None:
    wanted = settings.ocr_num_gpus * settings.ocr_replicas
    if settings.ocr_num_gpus > 0 and cluster_gpus < wanted:
        raise GPUCapacityError(
            f"OCRModel asks for {settings.ocr_replicas} replica(s) x num_gpus={settings.ocr_num_gpus} "
            f"= {wanted:g} GPU(s), but the Ray cluster has {cluster_gpus:g}. Start GPU nodes "
            "(`ray start --num-gpus=N`), lower ocr_replicas, or set ocr_num_gpus: 0 to run on CPU."
        )


def build_app(args: dict | None = None) -> Application:
    settings = Settings.model_validate(args or {})
    if ray.is_initialized():
        check_gpu_capacity(settings, ray.cluster_resources().get("GPU", 0.0))
    ocr_model = OCRModel.options(
        num_replicas=settings.ocr_replicas,
        ray_actor_options={"num_cpus": settings.ocr_num_cpus, "num_gpus": settings.ocr_num_gpus},
        user_config=settings.batching.model_dump(),
    ).bind(settings)
    return Ingress.bind(settings, Preprocessor.bind(settings), ocr_model, Postprocessor.bind())
