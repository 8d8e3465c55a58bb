"""The OCR deployment: one engine per replica, pages batched under a page and pixel budget.

Callers send one page at a time (`infer`); `@serve.batch` gathers concurrent pages
into one engine call. The batcher is built per replica so that all three knobs of
`BatchConfig` (`user_config`) apply live through `reconfigure()`.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
import time
from typing import Optional

import ray
from ray import serve

from app.ops import metrics
from app.pipeline.batching import Queued, batch_cost, read_outcome, record_batch_metrics
from app.config import BatchConfig
from app.page_size import as_rgb
from app.engines import build_engine, schedules_own_batches
from app.errors import EngineFailure, OCRServiceError, UnprocessableDocument
from app.pipeline.ocr_settings import OCRReplicaSettings
from app.schemas import PageOCR, PagePayload
from app.pipeline.service_rate import METRIC as SECONDS_PER_PAGE
from app.pipeline.service_rate import ServiceRate
from app.ops.replica import harden_process, release_freed_memory, replica_share
from app.ops.telemetry import assigned_gpu_id, gpu_snapshot

logger = logging.getLogger("ray.serve")


@serve.deployment  # its options: app/serve/builder.py (defaults) and serve_config.yaml (the fleet)
class OCRModel:
    def __init__(self, settings: OCRReplicaSettings):
        harden_process()  # first: nothing below may leave a secret readable through /proc
        threads = settings.engine_threads or max(1, math.ceil(replica_share("CPU", 1.0)))
        self._engine = build_engine(settings.engine, threads=threads, gpu_share=min(1.0, replica_share("GPU", 1.0) or 1.0),
                                    concurrent_batches=settings.batching.max_concurrent_batches)
        start = time.perf_counter()
        self._engine.load()
        if settings.warmup:
            self._engine.warmup()
        logger.info("engine %s ready in %.2fs", self._engine.info, time.perf_counter() - start)
        # An engine with its own scheduler (continuous batching) takes pages as they come.
        self._own_batches = schedules_own_batches(self._engine)
        # A generating engine honours a request's knobs (max_tokens...); PP-OCR writes no tokens.
        self._takes_generation = self._engine.takes_generation
        self._takes_lang = self._engine.takes_lang  # a request's script hint (ppocr)
        self._on_gpu = self._engine.info.device.startswith("cuda")
        self._gpu_id = assigned_gpu_id() if self._on_gpu else None  # NVML is asked about this GPU only
        self._config: Optional[BatchConfig] = None
        self._batcher = None
        self._stats = {"batches": 0, "pages": 0, "max_batch_size": 0, "failed_pages": 0}
        self._waiting = 0  # pages in the batcher not yet in a batch: the ocr_queue_pages gauge
        # Batches in the engine now (an idle replica does not wait for a batch to fill), and the
        # replica's seconds per page over them (for the service_rate autoscaling policy).
        self._rate = ServiceRate()
        self._trimming: Optional[asyncio.Future] = None  # the heap trim after a batch, off the pages' path
        if settings.max_replicas:  # for the OCRReplicasAtMax alert (cluster/observability/alerts.yml)
            metrics.set_gauge("ocr_replicas_max", settings.max_replicas)
        # What the engine was given, last pages first out (debug_keep_engine_inputs; off by default).
        self._kept = collections.deque(maxlen=settings.debug_keep_engine_inputs)
        self.reconfigure(settings.batching.model_dump())

    def reconfigure(self, user_config: dict) -> None:
        config = self._within_device_limits(BatchConfig.model_validate(user_config or {}))
        if self._batcher is None or config.max_concurrent_batches != self._config.max_concurrent_batches:
            # max_concurrent_batches has no setter: a new batcher takes the new requests,
            # the old one drains what it already holds.
            self._batcher = serve.batch(
                max_batch_size=config.max_batch_size,
                batch_wait_timeout_s=config.batch_wait_timeout_s,
                max_concurrent_batches=config.max_concurrent_batches,
                batch_size_fn=self._batch_cost,
            )(self._run_batch)
        else:
            self._batcher.set_max_batch_size(config.max_batch_size)
        self._config = config
        self._set_batch_wait()
        logger.info("batching: %s", config)

    def _set_batch_wait(self) -> None:
        """Serve's batcher waits the timeout in force when a batch's first page arrives. A page that
        reaches an idle replica has nobody to wait for: it starts at once, and the pages that come
        while it runs queue and wait to fill the next batch (what the timeout is for)."""
        busy = self._rate.running > 0 or self._config.wait_when_idle
        self._batcher.set_batch_wait_timeout_s(self._config.batch_wait_timeout_s if busy else 0.0)

    def _batch_cost(self, pages: list) -> int:
        """Against the config in force now, so that live changes of the knobs apply to the cost too."""
        try:
            return batch_cost(pages, self._config.max_batch_size, self._config.max_batch_pixels)
        except Exception:  # never raise inside the batcher (ray#66140)
            return len(pages)

    def _within_device_limits(self, config: BatchConfig) -> BatchConfig:
        """Clamp the configured batch to what the warm-up measured fits the device."""
        limits = self._engine.batch_limits()
        if limits is None:
            return config
        pages, pixels = limits
        clamped = config.model_copy(
            update={"max_batch_size": min(config.max_batch_size, pages),
                    "max_batch_pixels": min(config.max_batch_pixels, pixels)}
        )
        if clamped != config:
            logger.warning("batching clamped to the measured device limit: %s", clamped)
        return clamped

    async def infer(self, page: PagePayload) -> PageOCR:
        if self._own_batches:
            return await self._infer_as_it_comes(page)
        queued = Queued(page)
        self._queue_changed(+1)
        try:
            outcome = await self._batcher(queued)
        finally:
            if not queued.started:  # cancelled while waiting
                self._queue_changed(-1)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def _infer_as_it_comes(self, page: PagePayload) -> PageOCR:
        """One page straight to an engine that batches by itself; errors as `_infer_batch` gives them."""
        start = time.perf_counter()
        image = self._engine_input(page)
        decode_ms = (time.perf_counter() - start) * 1000
        self._rate.batch_started()
        done = 0
        try:
            if self._takes_generation:
                result = await self._engine.infer_page(image, page.options.generation)
            else:
                result = await self._engine.infer_page(image)
            done = 1
        except Exception as exc:
            logger.exception("engine failed on request %s page %s", page.request_id, page.page_number)
            raise self._as_error(exc, page) from None
        finally:
            self._rate.batch_finished(done)
        engine_ms = (time.perf_counter() - start) * 1000 - decode_ms
        outcome = read_outcome(page, result, 1, page.pixels, 0.0, decode_ms, engine_ms)
        self._record([page], [outcome], engine_ms)
        return outcome

    def _engine_input(self, page: PagePayload):
        """The page as engines take it (kept when debug_keep_engine_inputs asks); a payload that is no
        page fails alone, here, with its own 422, never inside the engine."""
        try:
            image = as_rgb(page.image)
        except Exception:
            logger.exception("request %s page %s: undecodable payload", page.request_id, page.page_number)
            raise UnprocessableDocument(f"page {page.page_number}: undecodable payload") from None
        if self._kept.maxlen:
            self._kept.append((page.request_id, page.page_number, image))
        return image

    def _queue_changed(self, pages: int) -> None:
        self._waiting += pages
        metrics.set_gauge("ocr_queue_pages", self._waiting)

    async def _run_batch(self, batch: list[Queued]) -> list:
        if self._trimming is not None:  # the last batch's trim ends first (counted in queue_wait): RSS stays flat
            await asyncio.shield(self._trimming)
        now = time.perf_counter()
        for queued in batch:
            queued.started = True
            metrics.stage("queue_wait", now - queued.since)
        self._queue_changed(-len(batch))
        waits_ms = [round((now - queued.since) * 1000, 1) for queued in batch]
        self._rate.batch_started()
        self._set_batch_wait()
        done = 0
        try:
            outcomes = await asyncio.to_thread(self._infer_batch, [queued.page for queued in batch], waits_ms)
            done = sum(not isinstance(outcome, BaseException) for outcome in outcomes)
            return outcomes
        finally:
            self._rate.batch_finished(done)  # a batch that failed or was cancelled is not a speed
            self._set_batch_wait()
            self._trim_after_batch()

    def _trim_after_batch(self) -> None:
        """Freed heap back to the OS in a thread once the batch's pages are answered (4-23 ms a PP-OCR batch
        here, which was on their path), before the next batch."""
        if self._trimming is None or self._trimming.done():
            self._trimming = asyncio.ensure_future(asyncio.to_thread(release_freed_memory))

    def _infer_batch(self, pages: list[PagePayload], waits_ms: Optional[list] = None) -> list:
        """One result or one exception per page: a bad page never fails its batch-mates."""
        waits_ms = waits_ms or [0.0] * len(pages)
        start = time.perf_counter()
        images, outcomes = [], [None] * len(pages)
        for i, page in enumerate(pages):
            try:
                images.append((i, self._engine_input(page)))
            except UnprocessableDocument as error:
                outcomes[i] = error
        decode_ms = (time.perf_counter() - start) * 1000
        results = self._run_engine([img for _, img in images], [pages[i] for i, _ in images])
        engine_ms = (time.perf_counter() - start) * 1000 - decode_ms
        batch_pixels = sum(page.pixels for page in pages)
        for (i, _), result in zip(images, results):
            outcomes[i] = result if isinstance(result, BaseException) else \
                read_outcome(pages[i], result, len(pages), batch_pixels, waits_ms[i], decode_ms, engine_ms)
        self._record(pages, outcomes, engine_ms)
        return outcomes

    def _run_engine(self, images: list, pages: list[PagePayload]) -> list:
        if not images:
            return []
        try:
            if self._takes_generation and any(page.options.generation for page in pages):
                return self._engine.infer(images, generation=[page.options.generation for page in pages])
            if self._takes_lang and any(page.options.lang for page in pages):
                return self._engine.infer(images, langs=[page.options.lang for page in pages])
            return self._engine.infer(images)
        except Exception as exc:
            if len(images) == 1:
                logger.exception("engine failed on request %s page %s", pages[0].request_id, pages[0].page_number)
                return [self._as_error(exc, pages[0])]
        # Find the page that broke the batch: run each alone.
        return [self._run_engine([image], [page])[0] for image, page in zip(images, pages)]

    @staticmethod
    def _as_error(exc: Exception, page: PagePayload) -> OCRServiceError:
        if isinstance(exc, OCRServiceError):
            return exc
        # The exception text stays in the log line (logged with this request id), never in the body.
        return EngineFailure(f"The OCR engine failed on page {page.page_number}; the service log has the "
                             f"details under request id {page.request_id}.")

    def _record(self, pages: list[PagePayload], outcomes: list, engine_ms: float) -> None:
        self._stats["batches"] += 1
        self._stats["pages"] += len(pages)
        self._stats["max_batch_size"] = max(self._stats["max_batch_size"], len(pages))
        self._stats["failed_pages"] += sum(isinstance(o, BaseException) for o in outcomes)
        gpu = gpu_snapshot(self._gpu_id)
        record_batch_metrics(self._engine.info.name, pages, outcomes, engine_ms, self._config.max_batch_pixels, gpu)
        fields = {"model": self._engine.info.version, "pages": len(pages),
                  "sizes": [f"{p.width}x{p.height}" for p in pages], "engine_ms": round(engine_ms, 1),
                  "peak_gpu_mib": self._engine.last_peak_memory_mib, "gpu": gpu,
                  "request_ids": sorted({p.request_id for p in pages})}
        logger.info("batch %s", " ".join(f"{key}={value}" for key, value in fields.items()), extra={"ocr": fields})

    def info(self) -> dict:
        context = ray.get_runtime_context()
        return {
            **dataclasses.asdict(self._engine.info),
            "batching": self._config.model_dump(),
            "stats": self._stats,
            "gpu": gpu_snapshot(self._gpu_id),
            "queue": self._engine.queue_stats(),
            "placement": {
                "replica": serve.get_replica_context().replica_id.unique_id,
                "node_id": context.get_node_id(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "resources": context.get_assigned_resources(),
            },
        }

    def kept_engine_inputs(self) -> list:
        """(request id, page number, the RGB array the engine was given) for the last
        debug_keep_engine_inputs pages; empty when that setting is 0."""
        return list(self._kept)

    def record_autoscaling_stats(self) -> dict:
        """For app/scaling/autoscaling.py: pages this replica takes at once, as clamped to its device, and
        once it has run a batch, its measured seconds per page."""
        capacity = self._engine.page_capacity  # an engine that batches itself says how many
        if capacity is None:
            capacity = self._config.max_batch_size * self._config.max_concurrent_batches
        stats = {"batch_capacity": float(capacity)}
        queue = self._engine.queue_stats()  # vLLM's scheduler: what it runs, what waits inside it
        if queue is not None:
            stats.update(engine_running=float(queue["running"]), engine_waiting=float(queue["waiting"]))
        seconds_per_page = self._rate.seconds_per_page
        if seconds_per_page is not None:
            stats[SECONDS_PER_PAGE] = seconds_per_page
            metrics.set_gauge("ocr_seconds_per_page", seconds_per_page)
        return stats

    def check_health(self) -> None:
        self._engine.check_health()
        if self._gpu_id is not None:  # every health check (3 s): the GPU gauges stay fresh when idle
            metrics.gpu_gauges(gpu_snapshot(self._gpu_id))

    def __del__(self):  # Serve calls this when the replica stops: an engine's own processes (vLLM's) go too
        engine = getattr(self, "_engine", None)  # None: the replica failed before its engine was built
        if engine is not None:
            engine.shutdown()

