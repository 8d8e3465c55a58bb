"""The VLM engines' options (`vlm:` and `vllm:` in the settings): part of app.config.Settings,
kept apart so that the settings module stays readable."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class VLMOptions(BaseModel):
    """Options of the `vlm` engine (transformers image-text-to-text models from `model_dir`)."""

    model_config = ConfigDict(extra="forbid")

    family: Optional[Literal["got_ocr2", "qwen2_vl", "qwen2_5_vl"]] = Field(
        None, description="Model family; default: from model_type in model_dir/config.json."
    )
    prompt: Optional[str] = Field(None, description="The instruction sent with each page; default: the family's.")
    max_new_tokens: int = Field(1024, ge=1, le=32768, description="Token cap per page; pages cut there are invalid.")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto", description="auto: bf16 on GPUs that compute it natively (compute capability 8.0+); on older "
        "cards fp16 for families safe in it (GOT-OCR2), and Qwen2/2.5-VL is refused at start-up (set float32 "
        "there); fp32 on CPU. An explicit bf16 without native support, or fp16 for Qwen, is refused too."
    )
    max_pixels: Optional[int] = Field(
        None, ge=28 * 28, description="Most pixels of a page the model reads (Qwen's max_pixels; the Preprocessor "
        "sizes pages to it). Default: the family's recipe: Qwen2/2.5-VL 1280x28x28 (about 1.0 MP, 1,280 visual "
        "tokens), GOT-OCR2 1024x1024 (it resizes every page to that). The model directory's own cap still applies."
    )
    gpu_memory_margin_mib: int = Field(
        256, ge=0, description="GPU memory left unclaimed per replica beyond its CUDA context: the replica's "
        "allocator may take its num_gpus share of the card, less its context (measured), less this."
    )
    trust_remote_code: bool = Field(False, description="Run modelling code shipped inside model_dir. Off unless set.")
    verify_weights: Literal["full", "size", "off"] = Field(
        "full", description="Check model_dir against its weights.sha256 at start-up: hashes, sizes, or not at all; "
        "a file not in the manifest is refused. Once per node per state of the directory: the first replica hashes "
        "under a file lock and leaves a marker (in OCR_WEIGHTS_MARKER_DIR, default ~/.cache/ocr-weights-verified)."
    )
    warmup_max_batch: int = Field(32, ge=1, description="Largest batch the CUDA warm-up probes.")
    page_timeout_s: float = Field(
        600.0, gt=0, description="Wall-clock budget of one batch's generation: past it every row is ended where "
        "it stands and its page is invalid (finish_reason `timeout`), so no page holds a shared batch longer."
    )


class VLLMOptions(BaseModel):
    """Options of the `vllm` engine: vLLM's AsyncLLM inside the OCR replica, fed pages as they come
    (continuous batching), from `model_dir`. Needs the vLLM environment (`make install-vllm`)."""

    model_config = ConfigDict(extra="forbid")

    family: Optional[Literal["qwen2_vl", "qwen2_5_vl"]] = Field(
        None, description="Model family (its prompt format and budget); default: from config.json's model_type."
    )
    prompt: Optional[str] = Field(None, description="The instruction sent with each page; default: the family's.")
    max_tokens: int = Field(2048, ge=1, le=32768, description="Token cap per page; pages cut there are invalid.")
    max_pixels: Optional[int] = Field(
        None, ge=28 * 28, description="Most pixels of a page the model reads (its image-token budget; the "
        "Preprocessor sizes pages to it). Default: the family's recipe (Qwen2/2.5-VL 1280x28x28)."
    )
    max_model_len: int = Field(8192, ge=256, description="Longest sequence, prompt and image tokens included.")
    max_num_seqs: int = Field(
        16, ge=1, description="Pages the engine decodes at once; the replica's max_ongoing_requests follows it."
    )
    max_num_batched_tokens: Optional[int] = Field(
        None, ge=256, description="Tokens one engine step may process (prefill chunks); default: vLLM's."
    )
    gpu_memory_utilization: Optional[float] = Field(
        None, gt=0, le=1, description="Share of the GPU vLLM may take; default: 0.9 x the replica's num_gpus, so "
        "that replicas sharing a card (0.5 each) fit beside each other."
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto", description="auto: the checkpoint's own (vLLM's rule); float32 for exact comparisons on CPU."
    )
    enable_prefix_caching: bool = Field(False, description="Off, as vLLM's OCR recipes have it: no two pages share "
                                        "an image prefix.")
    mm_processor_cache_gb: float = Field(0.0, ge=0, description="vLLM's cache of processed images; 0 (off): no "
                                         "page is seen twice.")
    enforce_eager: bool = Field(False, description="Skip graph capture and compilation (faster start, slower steps).")
    cpu_kv_cache_gib: int = Field(1, ge=1, description="KV cache of vLLM's CPU backend (VLLM_CPU_KVCACHE_SPACE), "
                                  "where there is no GPU.")
    trust_remote_code: bool = Field(False, description="Run modelling code shipped inside model_dir. Off unless set.")
    verify_weights: Literal["full", "size", "off"] = Field(
        "full", description="Check model_dir against its weights.sha256 at start-up, once per node (as `vlm`)."
    )


class TesseractOptions(BaseModel):
    """Tesseract (tesserocr, Debian's traineddata): the `tesseract` engine, and the ppocr engine's Fraktur pass."""

    model_config = ConfigDict(extra="forbid")

    tessdata_dir: Optional[str] = Field(
        None, description="Where the traineddata are; default: where Debian's and Ubuntu's packages "
        "(tesseract-ocr-script-frak, -deu, -eng) put them, /usr/share/tesseract-ocr/5/tessdata or .../4.00/tessdata. "
        "Nothing is fetched."
    )
    model: str = Field("Fraktur", description="The `tesseract` engine's model(s), as Tesseract names them "
                       "(Fraktur, deu, eng, Fraktur+deu).")
    fraktur_pass: Literal["on", "off"] = Field(
        "on", description="ppocr: a Fraktur page (a request's lang=deu-frak, or found from the reading with "
        "lang=auto) is read again by Tesseract's Fraktur model and the better word of each pair kept. Where the "
        "traineddata are missing the engine warns at start and reads Fraktur alone (a page asked for as deu-frak "
        "says so in its notes)."
    )
