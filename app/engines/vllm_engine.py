"""The `vllm` engine: vLLM's AsyncLLM inside the OCR replica, fed each page as it comes.

vLLM batches the pages itself, step by step (continuous batching): a short page leaves the
batch when it ends instead of waiting for the longest, and a new page joins at the next step.
So the replica skips `@serve.batch` (`schedules_own_batches`) and awaits `infer_page` per page.

The engine runs on an event loop of its own, in its own thread: AsyncLLM binds its output
handler to the loop it first runs on, and the replica's constructor (load, warm-up) is
synchronous. A page awaited from the replica's loop is a task on the engine's loop; cancelling
it (the client left, a sibling page failed) aborts its sequence in vLLM.

Each page's tokens stream back; the loop guard reads them every 16 tokens and aborts a page
caught in a repetition loop at once, while the other pages go on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
import uuid
from typing import Optional

import numpy as np
from PIL import Image

from app.settings.engines import VLLMOptions
from app.engines.base import EngineInfo, EngineRuntime, InputBudget, OCREngine
from app.engines.page_result import page_result, same_token_run
from app.engines.repetition import find_loop
from app.engines.vllm_scheduler import SchedulerView
from app.engines.vlm_families import FAMILIES, budget_for, family_for, family_name, checked_model_dir
from app.ops import metrics
from app.schemas import EngineResult, Generation
from app.synthetic import render_text_page

logger = logging.getLogger("ray.serve")

# Offline: no hub, and none of vLLM's usage reports (it sends them by default).
for _variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"):
    os.environ.setdefault(_variable, "1")

GUARD_EVERY = 16  # tokens between two looks of the loop guard, as the vlm engine's
GUARD_TAIL = 400  # the tokens it reads


def options_budget(options: VLLMOptions, model_dir: Optional[str]) -> InputBudget:
    family = FAMILIES.get(family_name(model_dir, options.family))
    return budget_for(family, options.max_pixels)


class EngineLoop:
    """An event loop in a daemon thread: the engine's home. `run(coro)` from any loop awaits it there."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._thread.start()

    def call(self, coro, timeout_s: Optional[float] = None):
        """Blocking, for synchronous callers (load, warm-up)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    async def run(self, coro):
        """Awaited from another loop; cancelling the awaiting task cancels the coroutine here."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))


class VLLMEngine(OCREngine):
    schedules_own_batches = True
    takes_generation = True  # honours a request's Generation knobs (app/schemas.py)
    options_key = "vllm"
    budget = staticmethod(options_budget)

    def __init__(self, options: VLLMOptions, runtime: EngineRuntime):
        self._options = options
        self._dir = checked_model_dir(runtime.model_dir, self._options.verify_weights)
        self._family = family_for(self._dir, self._options.family, self._options.trust_remote_code,
                                  self._options.max_pixels)
        if self._family.name not in ("qwen2_vl", "qwen2_5_vl"):
            raise ValueError(f"the vllm engine serves the Qwen2/2.5-VL family here; {self._family.name} is not "
                             "wired yet (docs/engines.md says how other vLLM models are configured)")
        self.input_budget = self._family.budget
        self._threads, self._gpu_share = runtime.threads, runtime.gpu_share
        self._prompt_text = self._options.prompt or self._family.default_prompt
        self._llm = None
        self._loop: Optional[EngineLoop] = None
        self.running = 0  # pages this replica has handed to the engine and not had back
        self._scheduler = SchedulerView()  # vLLM's own running and waiting counts, each engine step
        self.page_capacity = self._options.max_num_seqs  # pages one replica decodes at once
        self.info = EngineInfo(
            name="vllm", version=f"{self._family.name}:{self._dir.name}", device="pending",
            details={"max_tokens": self._options.max_tokens, "max_num_seqs": self._options.max_num_seqs,
                     "prompt": self._prompt_text, "max_pixels": self.input_budget.max_pixels},
        )

    # -- start ----------------------------------------------------------------------------------

    def engine_args(self) -> dict:
        options = self._options
        args = {
            "model": str(self._dir), "tokenizer": str(self._dir), "dtype": options.dtype,
            "max_model_len": self._max_model_len(), "max_num_seqs": options.max_num_seqs,
            "enable_prefix_caching": options.enable_prefix_caching,
            "mm_processor_cache_gb": options.mm_processor_cache_gb, "enforce_eager": options.enforce_eager,
            "trust_remote_code": options.trust_remote_code, "limit_mm_per_prompt": {"image": 1, "video": 0},
            "gpu_memory_utilization": options.gpu_memory_utilization or round(0.9 * self._gpu_share, 3),
            "distributed_executor_backend": "uni",  # one replica, one device share: no worker processes
            "disable_log_stats": False, "seed": 0,
        }
        if options.max_num_batched_tokens:
            args["max_num_batched_tokens"] = options.max_num_batched_tokens
        return args

    def _max_model_len(self) -> int:
        """vllm.max_model_len, within the model's own positions: vLLM refuses to start above them (a
        small checkpoint under the default 8192 would not serve at all)."""
        import json

        config = json.loads((self._dir / "config.json").read_text())
        limit = (config.get("text_config") or {}).get("max_position_embeddings") or config.get("max_position_embeddings")
        if isinstance(limit, int) and 0 < limit < self._options.max_model_len:
            logger.warning("vllm.max_model_len=%d is past the model's %d positions: using %d",
                           self._options.max_model_len, limit, limit)
            return limit
        return self._options.max_model_len

    def load(self) -> None:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self._options.cpu_kv_cache_gib))
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process
        os.environ.setdefault("OMP_NUM_THREADS", str(self._threads))
        from vllm import AsyncEngineArgs
        from vllm.platforms import current_platform
        from vllm.v1.engine.async_llm import AsyncLLM

        self._family.load()  # its tokenizer: the prompt's chat template, the end tokens, decoding
        message = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": self._prompt_text}]}]
        self._prompt = self._family.tokenizer.apply_chat_template(message, add_generation_prompt=True,
                                                                  tokenize=False)
        self._loop = EngineLoop()
        args = AsyncEngineArgs(**self.engine_args())

        async def start():
            return AsyncLLM.from_engine_args(args, stat_loggers=[self._scheduler.logger_factory()])

        started = time.perf_counter()
        self._llm = self._loop.call(start())
        self.info.device = "cuda" if current_platform.is_cuda() else current_platform.device_type
        self.info.details["gpu_memory_utilization"] = args.gpu_memory_utilization  # this replica's share
        logger.info("vllm engine on %s ready in %.1f s", self.info.device, time.perf_counter() - started)

    def warmup(self) -> None:
        page = np.asarray(render_text_page())

        async def two_pages():  # a coroutine, made on the engine's loop: gather() is bound to the loop it runs on
            return await asyncio.gather(*(self._read(page, None) for _ in range(2)))

        self._loop.call(two_pages(), timeout_s=600)

    # -- pages ----------------------------------------------------------------------------------

    def infer(self, pages: list[np.ndarray]) -> list[EngineResult]:
        raise AssertionError("the vllm engine schedules its own batches: the replica calls infer_page")

    async def infer_page(self, page: np.ndarray, generation: Optional[Generation] = None) -> EngineResult:
        """One page, batched by vLLM with whatever else is running, under the request's `generation`
        knobs (None: the settings')."""
        return await self._loop.run(self._read(page, generation))

    async def _read(self, page: np.ndarray, generation: Optional[Generation]) -> EngineResult:
        tokens, stopped_at, max_tokens, prompt_tokens = await self.generate_tokens(page, generation)
        result = page_result(self._family, tokens, max_tokens, stopped_at)
        result.prompt_tokens = prompt_tokens
        return result

    def sampling_params(self, generation: Optional[Generation]):
        """Greedy, streamed as deltas; the request's knobs where it set them."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        generation = generation or Generation()
        return SamplingParams(temperature=0.0, max_tokens=generation.max_tokens or self._options.max_tokens,
                              min_tokens=generation.min_tokens, ignore_eos=generation.ignore_eos,
                              logit_bias=dict(generation.logit_bias) or None,
                              output_kind=RequestOutputKind.DELTA, skip_special_tokens=False)

    async def generate_tokens(self, page: np.ndarray, generation: Optional[Generation] = None
                              ) -> tuple[list[int], Optional[int], int, Optional[int]]:
        """(the page's tokens, where the loop guard stopped it or None, the cap in force, the prompt's
        tokens). On the engine loop. A page that ignores its end token is not stopped by the guard."""
        params = self.sampling_params(generation)
        guarded = not params.ignore_eos
        request = {"prompt": self._prompt, "multi_modal_data": {"image": Image.fromarray(page)}}
        request_id = uuid.uuid4().hex
        tokens: list[int] = []
        prompt_tokens: Optional[int] = None
        looked_at = 0
        self._pages_changed(+1)
        entered = time.perf_counter()
        stream = self._llm.generate(request, params, request_id)
        try:
            async for output in stream:
                if prompt_tokens is None:
                    metrics.observe("ocr_engine_time_to_first_token_seconds", time.perf_counter() - entered)
                    prompt_tokens = len(output.prompt_token_ids or ())
                tokens.extend(output.outputs[0].token_ids)
                if guarded and len(tokens) - looked_at >= GUARD_EVERY:
                    looked_at = len(tokens)
                    if self._looping(tokens[-GUARD_TAIL:]):
                        await self._llm.abort(request_id)  # this page only; the others go on
                        return tokens, len(tokens), params.max_tokens, prompt_tokens
            return tokens, None, params.max_tokens, prompt_tokens
        finally:
            self._pages_changed(-1)
            metrics.inc("ocr_engine_generated_tokens_total", len(tokens))
            await stream.aclose()  # cancelled or stopped early: vLLM aborts the sequence

    def _pages_changed(self, delta: int) -> None:
        self.running += delta
        self.export_queue()

    def export_queue(self) -> None:
        """The queue gauges, as vLLM's scheduler last reported; also each health check (3 s) while busy."""
        stats = self.queue_stats()
        for state in ("running", "waiting"):
            metrics.set_gauge("ocr_engine_pages", stats[state], state=state)
        metrics.set_gauge("ocr_engine_kv_cache_usage", stats["kv_cache_usage"])

    def _looping(self, tail: list[int]) -> bool:
        if self._family.eos_token_ids.intersection(tail):
            return False
        if same_token_run(tail):
            return True
        return find_loop(self._family.tokenizer.decode(tail, skip_special_tokens=True)) is not None

    # -- state ----------------------------------------------------------------------------------

    def batch_limits(self) -> Optional[tuple[int, int]]:
        return None

    def check_health(self) -> None:
        if self._llm is None:
            raise RuntimeError("vllm engine is not loaded")
        if self._llm.errored:
            raise RuntimeError("the vLLM engine core has died")
        self.export_queue()

    def queue_stats(self) -> dict:
        """Pages running and waiting in vLLM's scheduler, as it last reported them (its KV cache in use
        beside them). Idle, or before vLLM's first report, the replica's own count stands in."""
        state = self._scheduler.snapshot()
        if self.running == 0 or state.steps == 0:
            running = min(self.running, self._options.max_num_seqs)
            return {"running": running, "waiting": self.running - running, "kv_cache_usage": state.kv_cache_usage}
        return {"running": state.running, "waiting": state.waiting, "kv_cache_usage": round(state.kv_cache_usage, 4)}

    def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None
