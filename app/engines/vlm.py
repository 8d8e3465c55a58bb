"""The GPU engine: a transformers image-text-to-text model loaded from a local directory.

Batched greedy generation with left padding. Guards watch each row as it generates
(app/engines/generation_guards.py): a looping row is stopped at once while its
batch-mates go on, and a row whose logits went NaN is marked invalid. On CUDA
out-of-memory a batch is split in half and retried down to single pages; a page that
does not fit alone fails by itself with a retryable error. Device decisions (dtype,
memory share, the warm-up probe's turn) live in app/engines/vlm_device.py.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
from PIL import Image

from app.settings.engines import VLMOptions
from app.engines.base import EngineInfo, EngineRuntime, InputBudget, OCREngine
from app.engines.page_result import generated_tokens, page_result
from app.engines.vlm_device import (cap_gpu_memory, choose_dtype, free_device_memory, gpu_key, is_out_of_memory,
                                    one_probe_per_gpu, pick_device)
from app.engines.vlm_families import FAMILIES, budget_for, family_for, family_name, checked_model_dir
from app.engines.warmup_probe import budget_page_size, largest_fitting_batch
from app.errors import ServiceUnavailable
from app.schemas import EngineResult, Generation
from app.synthetic import render_text_page

logger = logging.getLogger("ray.serve")

for _variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ.setdefault(_variable, "1")


def options_budget(options: VLMOptions, model_dir: Optional[str]) -> InputBudget:
    """The pages' budget, known without loading the model (the Preprocessor sizes pages by it)."""
    family = FAMILIES.get(family_name(model_dir, options.family))
    return budget_for(family, options.max_pixels)


@dataclass(frozen=True)
class RowSpec:
    """How one row of a batch generates: at most `cap` tokens, no end token before `min_tokens`, only
    the end token from `forced_end` on, the loop guard stopping it or only looking, a logit bias."""

    cap: int
    min_tokens: int = 0
    forced_end: Optional[int] = None
    guarded: bool = True
    bias: dict = field(default_factory=dict)

    @classmethod
    def of(cls, knobs: Optional[Generation], max_new_tokens: int) -> "RowSpec":
        """A request's knobs (app/schemas.py), as vLLM reads the same ones."""
        if knobs is None:
            return cls(cap=max_new_tokens)
        cap = knobs.max_tokens or max_new_tokens
        return cls(cap=cap, min_tokens=cap if knobs.ignore_eos else knobs.min_tokens, guarded=not knobs.ignore_eos,
                   bias=dict(knobs.logit_bias))

    @classmethod
    def forced(cls, length: int) -> "RowSpec":
        """Exactly `length` tokens and then the end token (benchmarks)."""
        return cls(cap=length + 1, min_tokens=length, forced_end=length, guarded=False)


class VLMEngine(OCREngine):
    options_key = "vlm"
    budget = staticmethod(options_budget)
    takes_generation = True  # honours a request's Generation knobs (app/schemas.py)

    def __init__(self, options: VLMOptions, runtime: EngineRuntime):
        import torch

        self._options = options
        self._dir = checked_model_dir(runtime.model_dir, self._options.verify_weights)
        self._family = family_for(self._dir, self._options.family, self._options.trust_remote_code,
                                  self._options.max_pixels)
        self.input_budget = self._family.budget
        self._device = pick_device(runtime.device)
        on_cuda = self._device == "cuda"
        dtype = choose_dtype(self._options.dtype, self._device, self._family.name, self._family.fp16_safe,
                             torch.cuda.get_device_capability(0) if on_cuda else None,
                             torch.cuda.get_device_name(0) if on_cuda else "CPU")
        self._dtype = getattr(torch, dtype)
        threads = self._threads = runtime.threads
        self._gpu_share = runtime.gpu_share
        self._concurrency = runtime.concurrent_batches  # batches the warm-up runs at once
        self._prompt = self._options.prompt or self._family.default_prompt
        self._model = None
        self._batch_limits: Optional[tuple[int, int]] = None
        self.last_peak_memory_mib: Optional[float] = None
        self.fault_hook: Optional[Callable[[list], None]] = None  # tests inject device faults here
        self.extra_logits_processors: list = []  # tests steer the model's logits here (a looping page, NaN)
        self.info = EngineInfo(
            name="vlm",
            version=f"{self._family.name}:{self._dir.name}",
            device=self._device,
            details={"dtype": dtype, "threads": threads, "max_new_tokens": self._options.max_new_tokens,
                     "prompt": self._prompt, "max_pixels": self.input_budget.max_pixels},
        )

    def load(self) -> None:
        import torch
        from transformers import AutoModelForImageTextToText

        torch.set_num_threads(self._threads)
        if self._device == "cuda":
            self.info.details.update(cap_gpu_memory(self._gpu_share, self._options.gpu_memory_margin_mib))
        self._family.load()
        # device_map: the weights are read straight onto the device, without a CPU copy first.
        options = {"local_files_only": True, "trust_remote_code": self._options.trust_remote_code,
                   "dtype": self._dtype, "device_map": self._device}
        try:
            model = AutoModelForImageTextToText.from_pretrained(self._dir, attn_implementation="sdpa", **options)
        except ValueError as exc:  # e.g. GOT-OCR2's vision tower has no SDPA path
            logger.info("SDPA attention unavailable for this model (%s); using its default", str(exc)[:120])
            model = AutoModelForImageTextToText.from_pretrained(self._dir, **options)
        self.info.details["attention"] = model.config._attn_implementation
        self._model = model.eval()

    def warmup(self) -> None:
        page = np.asarray(render_text_page())
        if self._device != "cuda":
            self.infer([page, page])  # one small batch: pays lazy initialisation, measures nothing
            return
        with one_probe_per_gpu(gpu_key()):
            self.infer([page])  # lazy initialisation first, so the probe measures steady state
            self._batch_limits = self._probe_batch()

    def _probe_batch(self) -> tuple[int, int]:
        from app.engines.vlm_probe import fits

        width, height = budget_page_size(self.input_budget.max_side, self.input_budget.max_pixels)
        probe_page = Image.new("RGB", (width, height), "white")
        probe_page.paste(render_text_page(width=width, font_size=28), (0, 0))
        pages = largest_fitting_batch(lambda size: fits(self, probe_page, size), self._options.warmup_max_batch)
        if pages == 0:
            raise RuntimeError(f"a single {width}x{height} page at max_new_tokens={self._options.max_new_tokens} "
                               "does not fit in this replica's GPU memory share")
        logger.info("vlm warm-up: %d page(s) of %dx%d fit, %d batch(es) at once, max_new_tokens=%d",
                    pages, width, height, self._concurrency, self._options.max_new_tokens)
        return pages, pages * width * height

    def batch_limits(self) -> Optional[tuple[int, int]]:
        return self._batch_limits

    def infer(self, pages: list[np.ndarray], output_lengths: Optional[list[int]] = None,
              generation: Optional[list[Optional[Generation]]] = None) -> list:
        """One EngineResult per page, or a retryable error for a page that alone does not fit.

        generation: each page's request knobs (None: the settings'). output_lengths (benchmarks):
        page i writes exactly that many tokens, then its end token, whatever the weights say; the
        loop guard then looks but does not stop."""
        images = [Image.fromarray(page) for page in pages]
        if output_lengths is not None:
            rows = [RowSpec.forced(length) for length in output_lengths]
        else:
            rows = [RowSpec.of(knobs, self._options.max_new_tokens) for knobs in generation or [None] * len(images)]
        return self._generate_split(images, rows)

    def _generate_split(self, images: list[Image.Image], rows: list) -> list:
        try:
            return self._generate(images, rows)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
        # Out of memory. Only now, outside the except block, is the failed call's traceback gone,
        # and with it the frames that held its inputs and partial KV cache: freeing frees them.
        free_device_memory(self._device)
        if len(images) == 1:
            return [ServiceUnavailable("The GPU ran out of memory on this page; retry later.", code="gpu_out_of_memory")]
        half = len(images) // 2
        logger.warning("out of memory at batch %d: splitting into %d + %d", len(images), half, len(images) - half)
        return self._generate_split(images[:half], rows[:half]) + self._generate_split(images[half:], rows[half:])

    def model_inputs(self, images: list[Image.Image]) -> dict:
        """The batch's inputs on the device: exactly what the family's processor makes."""
        inputs = self._family.inputs(images, self._prompt)
        inputs = {k: v.to(self._device) for k, v in inputs.items()}
        if "pixel_values" in inputs:
            inputs["pixel_values"] = inputs["pixel_values"].to(self._dtype)
        return inputs

    def _generate(self, images: list[Image.Image], rows: list) -> list[EngineResult]:
        tokens, stopped_at, non_finite, expired = self._run_generate(images, rows)
        timeout_s = self._options.page_timeout_s if expired else None
        return [self._finish(row_tokens[:spec.cap], spec.cap, stopped, bad, timeout_s)
                for row_tokens, spec, stopped, bad in zip(tokens, rows, stopped_at, non_finite)]

    def _finish(self, tokens: list[int], max_new_tokens: int, stopped_at: Optional[int] = None,
                non_finite: bool = False, timeout_s: Optional[float] = None) -> EngineResult:
        return page_result(self._family, tokens, max_new_tokens, stopped_at, non_finite, timeout_s)

    def generated_ids(self, images: list[Image.Image]) -> list[list[int]]:
        """The tokens each page generated, through the serving path, up to and including its end
        token (the reference tests compare them with the model's own generate)."""
        rows = [RowSpec.of(None, self._options.max_new_tokens)] * len(images)
        tokens, stopped_at, _, _ = self._run_generate(images, rows)
        stops, pad = self._family.eos_token_ids, self._family.tokenizer.pad_token_id
        return [row[:stopped] if stopped is not None else row[:generated_tokens(row, stops, pad)]
                for row, stopped in zip(tokens, stopped_at)]

    def _run_generate(self, images: list[Image.Image], rows: list) -> tuple[list, list, list, bool]:
        """(each row's tokens after the prompt, where the loop guard stopped each row, which rows
        saw non-finite scores, whether the batch ran out of its wall-clock budget)."""
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList

        from app.engines.generation_guards import Deadline, LoopGuard, NonFiniteWatch, RowCaps, RowLimits

        if self.fault_hook is not None:
            self.fault_hook(images)
        if self._device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        inputs = self.model_inputs(images)
        prompt_length = inputs["input_ids"].shape[1]
        stops = self._family.eos_token_ids
        guard = LoopGuard(self._family.tokenizer, prompt_length, stops, enforce=[spec.guarded for spec in rows])
        watch, deadline = NonFiniteWatch(), Deadline(self._options.page_timeout_s, prompt_length)
        processors = [*self.extra_logits_processors, watch]  # the test hooks stand for the model's own logits
        if any(spec.min_tokens or spec.forced_end is not None or spec.bias for spec in rows):
            processors.append(RowLimits([spec.min_tokens for spec in rows], [spec.forced_end for spec in rows],
                                        [spec.bias for spec in rows], prompt_length, stops,
                                        self._family.tokenizer.eos_token_id))
        with torch.inference_mode():
            output = self._model.generate(
                **inputs, max_new_tokens=max(spec.cap for spec in rows), do_sample=False, num_beams=1,
                pad_token_id=self._family.tokenizer.pad_token_id, eos_token_id=sorted(stops),
                logits_processor=LogitsProcessorList(processors),
                stopping_criteria=StoppingCriteriaList([guard, RowCaps([spec.cap for spec in rows], prompt_length),
                                                        deadline]),
            )
        if self._device == "cuda":
            self.last_peak_memory_mib = torch.cuda.max_memory_allocated() / 2**20
        tokens = output[:, prompt_length:].tolist()
        return tokens, guard.stopped_rows(len(tokens)), watch.rows(len(tokens)), deadline.expired_at is not None

    def check_health(self) -> None:
        """Touch the device: a dead CUDA context fails here, not on the next request."""
        import torch

        if self._model is None:
            raise RuntimeError("vlm engine is not loaded")
        started = time.perf_counter()
        value = (torch.ones(1, device=self._device) + 1).item()
        if value != 2.0 or time.perf_counter() - started > 10:
            raise RuntimeError(f"device {self._device} answered wrongly or slowly")
