"""One typed settings object: the application builder's args.

`serve_config.yaml` feeds `applications[0].args` into `Settings`; `python -m app`
uses the defaults, which are the single-machine profile (bundled CPU engine, no GPU).
Runtime batching knobs live apart in `BatchConfig`, the OCR deployment's
`user_config`, so they can change without restarting replicas.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Limits(BaseModel):
    """What one request may ask of the service. Each breach is a 4xx naming the limit."""

    model_config = ConfigDict(extra="forbid")

    max_upload_bytes: int = Field(50 * 1024 * 1024, gt=0, description="Largest accepted request body.")
    max_pages: int = Field(50, gt=0, description="Most pages one document may expand to (after `pages`).")
    max_image_pixels: int = Field(
        60_000_000, gt=0, description="Decompression-bomb guard: largest decoded image, in pixels."
    )
    pdf_dpi: int = Field(150, ge=36, le=600, description="Rasterisation resolution for PDF pages.")
    max_pdf_page_pixels: int = Field(
        20_000_000, gt=0, description="A PDF page that would render larger is rendered at a lower dpi."
    )


class BatchConfig(BaseModel):
    """The OCR deployment's `user_config`: applied live through `reconfigure()`."""

    model_config = ConfigDict(extra="forbid")

    max_batch_size: int = Field(8, ge=1, description="Most pages in one engine call.")
    batch_wait_timeout_s: float = Field(0.05, ge=0, description="How long a partial batch waits to fill.")
    max_concurrent_batches: int = Field(1, ge=1, description="Batches one replica runs at once.")
    max_batch_pixels: int = Field(
        32_000_000, gt=0, description="Pixel budget of one batch; a single page always fits."
    )


class Settings(BaseModel):
    """The application's configuration (`applications[].args` in serve_config.yaml)."""

    model_config = ConfigDict(extra="forbid")

    engine: Literal["ppocr"] = Field("ppocr", description="OCR engine: ppocr is the bundled CPU engine.")
    model_dir: Optional[str] = Field(
        None, description="Local model directory. ppocr uses the models inside the rapidocr wheel when unset."
    )
    device: Literal["auto", "cpu", "cuda"] = "auto"
    engine_threads: Optional[int] = Field(
        None, ge=1, description="Inference threads per OCR replica; default: the replica's CPU share."
    )
    ocr_replicas: int = Field(2, ge=1, description="OCR replicas; the local default fills 2 cores with 1 thread each.")
    ocr_num_cpus: float = Field(0.8, gt=0, description="CPUs reserved for each OCR replica.")
    ocr_num_gpus: float = Field(
        0.0, ge=0, description="GPU fraction per OCR replica (ray_actor_options.num_gpus); 0.25 packs 4 per GPU."
    )
    limits: Limits = Field(default_factory=Limits)
    batching: BatchConfig = Field(default_factory=BatchConfig)
    warmup: bool = Field(True, description="Run a synthetic page through the engine before taking traffic.")
    readiness_timeout_s: float = Field(
        2.0, gt=0, description="How long /readyz waits on the OCR replicas before answering 503."
    )

    @model_validator(mode="after")
    def _cuda_needs_gpu(self) -> "Settings":
        if self.device == "cuda" and self.ocr_num_gpus <= 0:
            raise ValueError("device 'cuda' needs ocr_num_gpus > 0, or the replica is given no GPU")
        return self
