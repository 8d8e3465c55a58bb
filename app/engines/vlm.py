"""The GPU engine: a transformers image-text-to-text model loaded from a local directory.

Batched greedy generation with left padding; each page gets a finish reason and a
validity flag, and a repetition guard cuts generation loops. On CUDA out-of-memory
a batch is split in half and retried down to single pages; a page that does not fit
alone fails by itself with a retryable error.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from PIL import Image

from app.config import Settings
from app.engines.base import EngineInfo, InputBudget
from app.engines.repetition import cut_loop
from app.engines.warmup_probe import budget_page_size, largest_fitting_batch
from app.engines.vlm_families import family_for, missing_model_files
from app.errors import ServiceUnavailable
from app.schemas import EngineResult
from app.synthetic import render_text_page
from app.weights import verify_once_per_node

logger = logging.getLogger("ray.serve")

for _variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_variable, "1")


def is_out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def pick_device(requested: str) -> str:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but torch sees no CUDA device in this replica")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def pick_dtype(requested: str, device: str):
    import torch

    if requested != "auto":
        return getattr(torch, requested)
    if device == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


class VLMEngine:
    input_budget = InputBudget(max_side=2048, max_pixels=2048 * 2048)

    def __init__(self, settings: Settings, threads: int, gpu_share: float = 1.0):
        self._options = settings.vlm
        self._dir = Path(settings.model_dir)
        missing = missing_model_files(self._dir)
        if missing:
            raise FileNotFoundError(f"model directory {self._dir} is incomplete; missing: {', '.join(missing)}")
        if verify_once_per_node(self._dir, self._options.verify_weights):
            logger.info("weights in %s verified (%s)", self._dir, self._options.verify_weights)
        elif self._options.verify_weights != "off":
            logger.info("weights in %s already verified on this node in this state", self._dir)
        self._family = family_for(self._dir, self._options.family, self._options.trust_remote_code)
        self._device = pick_device(settings.device)
        self._dtype = pick_dtype(self._options.dtype, self._device)
        self._threads, self._gpu_share = threads, gpu_share
        self._concurrency = settings.batching.max_concurrent_batches  # batches the warm-up runs at once
        self._prompt = self._options.prompt or self._family.default_prompt
        self._model = None
        self._batch_limits: Optional[tuple[int, int]] = None
        self.last_peak_memory_mib: Optional[float] = None
        self.fault_hook: Optional[Callable[[list], None]] = None  # tests inject device faults here
        self.info = EngineInfo(
            name="vlm",
            version=f"{self._family.name}:{self._dir.name}",
            device=self._device,
            details={"dtype": str(self._dtype).replace("torch.", ""), "threads": threads,
                     "max_new_tokens": self._options.max_new_tokens, "prompt": self._prompt},
        )

    def load(self) -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        torch.set_num_threads(self._threads)
        if self._device == "cuda" and self._gpu_share < 1.0:
            torch.cuda.set_per_process_memory_fraction(self._gpu_share)
        self._family.load()
        options = {"local_files_only": True, "trust_remote_code": self._options.trust_remote_code, "dtype": self._dtype}
        try:
            model = AutoModelForImageTextToText.from_pretrained(self._dir, attn_implementation="sdpa", **options)
        except ValueError as exc:  # e.g. GOT-OCR2's vision tower has no SDPA path
            logger.info("SDPA attention unavailable for this model (%s); using its default", str(exc)[:120])
            model = AutoModelForImageTextToText.from_pretrained(self._dir, **options)
        self.info.details["attention"] = model.config._attn_implementation
        self._model = model.to(self._device).eval()

    def warmup(self) -> None:
        page = np.asarray(render_text_page())
        if self._device != "cuda":
            self.infer([page, page])  # one small batch: pays lazy initialisation, measures nothing
            return
        self.infer([page])  # lazy initialisation first, so the probe measures steady state
        width, height = budget_page_size(self.input_budget.max_side, self.input_budget.max_pixels)
        probe_page = Image.new("RGB", (width, height), "white")
        probe_page.paste(render_text_page(width=width, font_size=28), (0, 0))
        pages = largest_fitting_batch(lambda size: self._fits(probe_page, size), self._options.warmup_max_batch)
        if pages == 0:
            raise RuntimeError(f"a single {width}x{height} page at max_new_tokens={self._options.max_new_tokens} "
                               "does not fit in this replica's GPU memory share")
        self._batch_limits = (pages, pages * width * height)
        logger.info("vlm warm-up: %d page(s) of %dx%d fit, %d batch(es) at once, max_new_tokens=%d",
                    pages, width, height, self._concurrency, self._options.max_new_tokens)

    def _fits(self, page: Image.Image, size: int) -> bool:
        """`max_concurrent_batches` batches of `size` budget pages at once, each with a KV cache as
        long as the prompt plus `max_new_tokens`: True when none ran out of memory."""
        import concurrent.futures

        import torch

        try:
            with concurrent.futures.ThreadPoolExecutor(self._concurrency) as pool:
                for done in [pool.submit(self._kv_bound_forward, [page] * size) for _ in range(self._concurrency)]:
                    done.result()
            return True
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            return False
        finally:
            torch.cuda.empty_cache()

    def _kv_bound_forward(self, images: list[Image.Image]) -> None:
        """One forward over the prompt extended by max_new_tokens pad tokens, keeping the cache:
        its memory bounds generation's from above (the full-length KV cache, and prefill
        activations over more tokens than any decoding step), at a fraction of the time."""
        import torch

        inputs = self._family.inputs(images, self._prompt)
        inputs = {k: v.to(self._device) for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self._dtype)
        extra = self._options.max_new_tokens
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        pad = torch.full((ids.shape[0], extra), self._family.tokenizer.pad_token_id or 0, dtype=ids.dtype,
                         device=ids.device)
        inputs["input_ids"] = torch.cat([ids, pad], dim=1)
        inputs["attention_mask"] = torch.cat([mask, torch.ones_like(pad, dtype=mask.dtype)], dim=1)
        with torch.inference_mode():
            try:
                self._model(**inputs, use_cache=True, logits_to_keep=1)
            except TypeError:  # a model without logits_to_keep: full logits, a larger (still upper) bound
                self._model(**inputs, use_cache=True)

    def batch_limits(self) -> Optional[tuple[int, int]]:
        return self._batch_limits

    def infer(self, pages: list[np.ndarray]) -> list:
        """One EngineResult per page, or a retryable error for a page that alone does not fit."""
        return self._generate_split([Image.fromarray(page) for page in pages])

    def _generate_split(self, images: list[Image.Image]) -> list:
        try:
            return self._generate(images, self._options.max_new_tokens)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            self._free_memory()
            if len(images) == 1:
                return [ServiceUnavailable("The GPU ran out of memory on this page; retry later.", code="gpu_out_of_memory")]
            half = len(images) // 2
            logger.warning("out of memory at batch %d: splitting into %d + %d", len(images), half, len(images) - half)
            return self._generate_split(images[:half]) + self._generate_split(images[half:])

    def _generate(self, images: list[Image.Image], max_new_tokens: int) -> list[EngineResult]:
        import torch

        if self.fault_hook is not None:
            self.fault_hook(images)
        if self._device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        inputs = self._family.inputs(images, self._prompt)
        inputs = {k: v.to(self._device) for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self._dtype)
        with torch.inference_mode():
            output = self._model.generate(
                **inputs, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                pad_token_id=self._family.tokenizer.pad_token_id, eos_token_id=sorted(self._family.eos_token_ids),
            )
        if self._device == "cuda":
            self.last_peak_memory_mib = torch.cuda.max_memory_allocated() / 2**20
        prompt_length = inputs["input_ids"].shape[1]
        return [self._finish(row[prompt_length:].tolist(), max_new_tokens) for row in output]

    def _finish(self, tokens: list[int], max_new_tokens: int) -> EngineResult:
        text, finish_reason = self._family.decode(tokens)
        text, looped = cut_loop(text)
        notes = []
        if looped:
            notes.append("a repetition loop was cut from the output")
        elif finish_reason == "length":
            notes.append(f"the output was cut at max_new_tokens={max_new_tokens}")
        generated = _generated_tokens(tokens, self._family.eos_token_ids, self._family.tokenizer.pad_token_id)
        return EngineResult(markdown=text, finish_reason=finish_reason, valid=not notes, notes=notes,
                            generated_tokens=generated)

    def _free_memory(self) -> None:
        import torch

        if self._device == "cuda":
            torch.cuda.empty_cache()

    def check_health(self) -> None:
        """Touch the device: a dead CUDA context fails here, not on the next request."""
        import torch

        if self._model is None:
            raise RuntimeError("vlm engine is not loaded")
        started = time.perf_counter()
        value = (torch.ones(1, device=self._device) + 1).item()
        if value != 2.0 or time.perf_counter() - started > 10:
            raise RuntimeError(f"device {self._device} answered wrongly or slowly")


def _generated_tokens(tokens: list[int], stops: set, pad_token_id) -> int:
    """Tokens the model generated for one page of a batch: up to and including its first end token.
    A row that ended early is padded to the batch's longest; those pads were never generated."""
    for position, token in enumerate(tokens):
        if token in stops:
            return position + 1
    if pad_token_id is not None and pad_token_id not in stops:
        while tokens and tokens[-1] == pad_token_id:
            tokens = tokens[:-1]
    return len(tokens)
