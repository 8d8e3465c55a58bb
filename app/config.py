"""One typed settings object: the application builder's args.

`serve_config.yaml` feeds `applications[0].args` into `Settings`; `python -m app`
uses the defaults, which are the single-machine profile (bundled CPU engine, no GPU).
Runtime batching knobs live apart in `BatchConfig`, the OCR deployment's
`user_config`, so they can change without restarting replicas.
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.settings.engines import TesseractOptions, VLLMOptions, VLMOptions
from app.settings.jobs import Jobs
from app.settings.structure import StructureSettings


class DecodeLimits(BaseModel):
    """What decoding one document may cost: the Preprocessor's half of `limits`. Each breach is a 4xx."""

    model_config = ConfigDict(extra="forbid")

    max_pages: int = Field(50, gt=0, description="Most pages one document may expand to (after `pages`).")
    max_image_pixels: int = Field(
        60_000_000, gt=0, description="Decompression-bomb guard: largest decoded image, in pixels."
    )
    pdf_dpi: int = Field(150, ge=36, le=600, description="Rasterisation resolution for PDF pages.")
    max_pdf_page_pixels: int = Field(
        20_000_000, gt=0, description="A PDF page that would render larger is rendered at a lower dpi."
    )
    decode_memory_mb: int = Field(
        2048, ge=256, description="Address-space cap of a decoder process; past it the document gets 422."
    )
    page_render_timeout_s: float = Field(
        30.0, gt=0, description="Wall-clock limit to open, count or render one page in the sandbox; past it 422."
    )


class Limits(DecodeLimits):
    """What one request may ask of the service. Each breach is a 4xx naming the limit. The ingress
    reads the upload limits; the decode limits are the Preprocessor's (`PreprocessConfig`)."""

    model_config = ConfigDict(extra="forbid")

    max_upload_bytes: int = Field(50 * 1024 * 1024, gt=0, description="Largest accepted request body.")
    upload_read_timeout_s: float = Field(
        30.0, gt=0, description="The whole request body must arrive within this; past it 408."
    )

    def decode_limits(self) -> DecodeLimits:
        return DecodeLimits.model_validate(self.model_dump(include=set(DecodeLimits.model_fields)))


class PreprocessConfig(BaseModel):
    """The Preprocessor deployment's `user_config`, applied live through `reconfigure()`: a change
    reconfigures the Preprocessor replicas in place and touches no other stage. The builder starts
    it from `limits`, `orientation` and `decode_workers` in args; serve_config.yaml sets it on the
    Preprocessor deployment, where `serve deploy` changes it alone."""

    model_config = ConfigDict(extra="forbid")

    limits: DecodeLimits = Field(default_factory=DecodeLimits)
    orientation: Literal["auto", "off"] = Field(
        "auto", description="auto: find each page's rotation (0/90/180/270) and turn it upright before the engine; "
        "off: pages go as uploaded. A request's `orientation` field overrides it (auto, off or an angle)."
    )
    orientation_min_share: float = Field(
        0.75, gt=0.5, le=1.0, description="In auto, a page is turned only where its longest lines, each read the "
        "ways its axis allows and weighted by length, back the turn by at least this share; below it the page is "
        "read as uploaded and its result notes that the direction was mixed or unsure."
    )
    decode_workers: int = Field(
        2, ge=1, le=64, description="Decoder processes per Preprocessor replica: documents decoded at once."
    )
    pdf_text: Literal["auto", "ocr", "layer"] = Field(
        "auto", description="auto: a PDF page with a usable visible text layer is read from it, not OCR'd (a page "
        "whose text is invisible over an image, mostly unmapped glyphs, or beside a large image is OCR'd); ocr: "
        "every page is OCR'd; layer: a page with any text layer is read from it. A request's `pdf_text` overrides it."
    )


class BatchConfig(BaseModel):
    """The OCR deployment's `user_config`: applied live through `reconfigure()`."""

    model_config = ConfigDict(extra="forbid")

    max_batch_size: int = Field(8, ge=1, description="Most pages in one engine call.")
    batch_wait_timeout_s: float = Field(
        0.05, ge=0, description="How long a partial batch waits to fill, while the replica already runs a batch."
    )
    wait_when_idle: bool = Field(
        False, description="Also wait batch_wait_timeout_s when the replica runs no batch; by default a page "
        "reaching an idle replica starts at once (pages queue, and batches fill, while one runs)."
    )
    max_concurrent_batches: int = Field(1, ge=1, description="Batches one replica runs at once.")
    max_batch_pixels: int = Field(
        32_000_000, gt=0, description="Pixel budget of one batch; a single page always fits."
    )


class OCRAutoscaling(BaseModel):
    """Autoscaling of the OCR deployment. Its target is derived: one replica's batch capacity."""

    model_config = ConfigDict(extra="forbid")

    min_replicas: int = Field(1, ge=1, description="Warm replicas kept through idle periods.")
    max_replicas: int = Field(4, ge=1, description="Most OCR replicas; the GPU check at deploy time counts min_replicas.")
    upscale_delay_s: float = Field(5.0, ge=0, description="Demand must last this long before scaling up.")
    downscale_delay_s: float = Field(120.0, ge=0, description="Idleness must last this long before scaling down.")
    look_back_period_s: float = Field(
        30.0, gt=10, description="Window over which queue length is averaged (must exceed Serve's 10 s metrics interval)."
    )
    policy: Literal["service_rate", "queue_capacity", "serve_default"] = Field(
        "service_rate",
        description="service_rate: replicas enough to clear the pages in flight within target_queue_wait_s at "
                    "the speed the replicas measure (app.scaling.autoscaling.ServiceRatePolicy); queue_capacity: one "
                    "replica per batch capacity of pages in flight (app.scaling.autoscaling.queue_policy); "
                    "serve_default: Ray Serve's own.",
    )
    target_queue_wait_s: float = Field(
        10.0, gt=0, description="service_rate: the pages queued and running should clear within this many seconds."
    )

    @field_validator("policy", mode="before")
    @classmethod
    def _old_policy_name(cls, value):
        return "queue_capacity" if value == "queue" else value  # its name before service_rate existed

    @model_validator(mode="after")
    def _ordered(self) -> "OCRAutoscaling":
        if self.max_replicas < self.min_replicas:
            raise ValueError("max_replicas must be at least min_replicas")
        return self


class Auth(BaseModel):
    """Who may call the OCR API. With no keys file every /v1 route is open: `python -m app` then
    listens on 127.0.0.1 only."""

    model_config = ConfigDict(extra="forbid")

    api_keys_file: Optional[str] = Field(
        None, description="File of `name:sha256hex` lines (app/http/auth.py); set: /v1/* needs `Authorization: Bearer`."
    )


class Readiness(BaseModel):
    """How /readyz learns the replica counts: from a cache each ingress replica refreshes in the background."""

    model_config = ConfigDict(extra="forbid")

    refresh_s: float = Field(
        5.0, ge=0.5, description="Seconds between two serve.status() calls of one ingress replica."
    )


class Logging(BaseModel):
    """How every deployment of the application logs (Serve's logging_config, set by the builder)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["text", "json"] = Field(
        "text", description="json: one JSON object a line, with request fields under `ocr` (app/http/request_log.py)."
    )
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Every deployment's log level.")


class Settings(BaseModel):
    """The application's configuration (`applications[].args` in serve_config.yaml)."""

    model_config = ConfigDict(extra="forbid")

    engine: str = Field(
        "ppocr", description="ppocr: the bundled CPU engine; vlm: a transformers model from model_dir; vllm: "
        "Qwen2/2.5-VL models on vLLM with continuous batching (its own environment: make install-vllm); "
        "tesseract: Tesseract alone through tesserocr, with Debian's traineddata (tesseract.model; docs/engines.md); "
        "null: reads nothing, at once (for measuring the pipeline: load/overhead.py); or package.module:Class, "
        "an engine of one's own behind the same protocol (app/engines/registry.py)."
    )
    engine_options: dict = Field(
        default_factory=dict, description="Options of an engine given as package.module:Class; the engine "
        "validates them itself."
    )
    model_dir: Optional[str] = Field(
        None, description="Local model directory (required for vlm). For ppocr it must hold det.onnx and rec.onnx; "
        "unset, ppocr uses the models inside the rapidocr wheel."
    )
    vlm: VLMOptions = Field(default_factory=VLMOptions)
    vllm: VLLMOptions = Field(default_factory=VLLMOptions)
    tesseract: TesseractOptions = Field(default_factory=TesseractOptions)
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the engine runs: auto (cuda where the replica has a GPU), cpu, cuda (needs "
        "ocr_num_gpus > 0). ppocr always runs on the CPU.")
    engine_threads: Optional[int] = Field(
        None, ge=1, description="Inference threads per OCR replica; default: the replica's CPU share."
    )
    ocr_replicas: int = Field(2, ge=1, description="OCR replicas; the local default fills 2 cores with 1 thread each.")
    ocr_num_cpus: float = Field(0.8, gt=0, description="CPUs reserved for each OCR replica.")
    ocr_num_gpus: float = Field(
        0.0, ge=0, description="GPU fraction per OCR replica (ray_actor_options.num_gpus); 0.25 packs 4 per GPU."
    )
    ocr_max_replicas_per_node: Optional[int] = Field(
        None, ge=1, description="Spread OCR replicas: at most this many on one node (losing a node loses fewer)."
    )
    ocr_autoscaling: Optional[OCRAutoscaling] = Field(
        None, description="Scale OCR replicas with the queue; unset: a fixed ocr_replicas."
    )
    max_inflight_requests: int = Field(
        64, ge=1, description="Requests one ingress replica works on at once; beyond: 503 with Retry-After."
    )
    max_queued_pages: int = Field(
        256, ge=1, description="Pages each caller may queue for the OCR replicas; beyond: 503 with Retry-After."
    )
    ingress_overflow_requests: int = Field(
        32, ge=0, description="Requests an ingress replica takes in beyond max_inflight_requests, only to answer "
        "them 503 JSON with Retry-After (its max_ongoing_requests is the sum); past that they queue at the proxy."
    )
    ingress_max_queued_requests: int = Field(
        64, ge=1, description="Requests queued at the proxy for the ingress replicas; past it the proxy itself "
        "answers 503 (plain text) instead of queueing more."
    )
    limits: Limits = Field(default_factory=Limits)
    orientation: Literal["auto", "off"] = Field(
        "auto", description="The Preprocessor's initial `orientation` (PreprocessConfig): auto finds each page's "
        "rotation and turns it upright; off leaves pages as uploaded."
    )
    orientation_min_share: float = Field(
        0.75, gt=0.5, le=1.0, description="The Preprocessor's initial `orientation_min_share` (PreprocessConfig): "
        "the share of a page's lines that must back a turn before it is made."
    )
    decode_workers: int = Field(
        2, ge=1, le=64, description="The Preprocessor's initial `decode_workers` (PreprocessConfig): decoder "
        "processes per replica."
    )
    pdf_text: Literal["auto", "ocr", "layer"] = Field(
        "auto", description="The Preprocessor's initial `pdf_text` (PreprocessConfig): auto reads a PDF page from "
        "its usable visible text layer instead of OCR; ocr always OCRs; layer reads any layer."
    )
    page_retries: int = Field(
        1, ge=0, le=3, description="Retries of a request's page after a retryable error in OCR or postprocessing "
        "(a replica died, a stage was overloaded or out of memory; pages are idempotent). Jobs: jobs.page_retries."
    )
    batching: BatchConfig = Field(default_factory=BatchConfig)
    structure: StructureSettings = Field(default_factory=StructureSettings)
    debug_keep_engine_inputs: int = Field(
        0, ge=0, le=8, description="Keep the last N pages each OCR replica gave its engine, in memory, for "
        "OCRModel.kept_engine_inputs() through a deployment handle (tests, debugging). 0 in production."
    )
    warmup: bool = Field(True, description="Run a synthetic page through the engine before taking traffic.")
    auth: Auth = Field(default_factory=Auth)
    jobs: Jobs = Field(default_factory=Jobs)
    readiness: Readiness = Field(default_factory=Readiness)
    logging: Logging = Field(default_factory=Logging)
    gpu_wait_timeout_s: float = Field(
        600.0, ge=0, description="How long the builder waits for the GPUs the OCR replicas need to join the cluster."
    )
    readiness_timeout_s: float = Field(
        2.0, gt=0, description="How long /readyz waits on the OCR replicas before answering 503."
    )

    def preprocess_config(self) -> PreprocessConfig:
        """The Preprocessor's initial user_config, from args."""
        return PreprocessConfig(limits=self.limits.decode_limits(), orientation=self.orientation,
                                orientation_min_share=self.orientation_min_share, decode_workers=self.decode_workers,
                                pdf_text=self.pdf_text)

    @model_validator(mode="after")
    def _consistent(self) -> "Settings":
        if self.device == "cuda" and self.ocr_num_gpus <= 0:
            raise ValueError("device 'cuda' needs ocr_num_gpus > 0, or the replica is given no GPU")
        store = self.jobs.store
        if store and not store.startswith(("sqlite:///", "redis://", "rediss://")):
            raise ValueError("jobs.store must be sqlite:///ABSOLUTE/PATH, rediss://HOST:PORT/DB (TLS) or redis://")
        return self
