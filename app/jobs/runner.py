"""The JobRunner deployment: claims queued jobs under a lease and sends their pages through the graph.

Each replica runs one claim loop (restarted by `check_health` if it ever stops). A claimed job
is leased for `jobs.lease_s` and renewed every third of it; a runner that dies stops renewing,
its lease lapses, and the next claim (here or on any other runner) goes on from the pages the
store has not recorded. Per job at most `jobs.max_inflight_pages` pages are in the graph at once,
so a 500-page job cannot crowd out synchronous requests.
A turn's pages are rendered in one Preprocessor stream (app/jobs/rendering.py), then OCR'd and
postprocessed exactly like a page of /v1/ocr, and each result is written as it completes.
The document is read from the store and put in Ray's object store once per job on this runner:
every turn and every page retried alone passes that reference, not the bytes again (a replica on
the same node maps it, one on another node fetches it once). A job may spend at most its
client's quotas.max_decode_s of decoder time, failed pages included, counted in the store across
runners; past it, its remaining pages fail with `decode_budget_exceeded`, unrendered.

Turns: a claim is good for `jobs.turn_pages` pages; then the job goes back to the store and
the next claim takes the client served longest ago (app/jobs/store.py), so a client's 1-page
job waits at most one turn behind another client's backlog. The document of a job between
turns stays in a small cache, so a turn does not read it from the store again.

A full store (InsufficientStorage on writing a result) pauses this runner's claims, up to a minute:
OCR of pages whose results cannot be written would be lost work done again and again.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Optional

from ray import serve
from ray.serve.handle import DeploymentHandle

from app.ops import metrics
from app.config import Jobs
from app.errors import InsufficientStorage, JobDocumentLost, TooManyFailedPages, to_error
from app.jobs.callbacks import CallbackSender
from app.jobs.model import FAILED, Job, final_status, job_tag
from app.jobs.store import DocumentLost
from app.jobs.stores import open_store
from app.jobs.recording import record_page
from app.jobs.rendering import TurnRenderer
from app.jobs.turns import DecodeBudget, DecodeCharge, DocumentCache, PageFailure
from app.pipeline.page_pipeline import EngineIdentity, Stages, read_page
from app.pipeline.page_tasks import PageTasks
from app.schemas import PagePayload
from app.ops.replica import harden_process

logger = logging.getLogger("ray.serve")


@serve.deployment  # its options: app/serve/builder.py (defaults) and serve_config.yaml (the fleet)
class JobRunner:
    def __init__(self, jobs: Jobs, preprocessor: DeploymentHandle, ocr_model: DeploymentHandle,
                 postprocessor: DeploymentHandle, structure: Optional[DeploymentHandle] = None,
                 structure_mode: str = "auto"):
        harden_process()  # first: nothing below may leave a secret readable through /proc
        self._jobs = jobs
        self._store = open_store(jobs)
        self._stages = Stages(ocr_model, postprocessor, structure, structure_mode)
        self._owner = f"runner-{uuid.uuid4().hex[:12]}"
        self._active: dict[str, asyncio.Task] = {}
        self._engine = EngineIdentity(self._stages.ocr)
        self._render = TurnRenderer(preprocessor, jobs.page_retries, self._count_retry)
        self._wake: Optional[asyncio.Event] = None
        self._loop_task: Optional[asyncio.Task] = None
        self.stats = {"claimed": 0, "finished": 0, "pages": 0, "page_retries": 0, "lost_leases": 0, "turns": 0,
                      "store_full_pauses": 0, "documents_read": 0}
        self._documents = DocumentCache(self._store, jobs.jobs_per_runner, self.stats)
        self._budget = DecodeBudget(jobs, self._store)
        self._paused_until = 0.0
        self._pause_s = 0.0
        self._callbacks = CallbackSender(jobs.callbacks, self._store) if jobs.callbacks.allowed_hosts else None
        self._callback_task: Optional[asyncio.Task] = None
        try:
            self._ensure_loop()
        except RuntimeError:  # no running loop here: check_health starts it
            pass

    # -- the claim loop ------------------------------------------------------------------

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            loop = asyncio.get_running_loop()
            self._wake = self._wake or asyncio.Event()
            self._loop_task = loop.create_task(self._claim_loop())
            logger.info("job runner %s claiming from %s", self._owner, self._store.__class__.__name__)
        if self._callbacks is not None and (self._callback_task is None or self._callback_task.done()):
            self._callback_task = asyncio.get_running_loop().create_task(self._callbacks.run(self._jobs.poll_s))

    async def check_health(self) -> None:
        self._ensure_loop()
        metrics.jobs_gauge(await asyncio.to_thread(self._store.unfinished_counts))  # a store query: also the ping

    async def wake(self) -> None:
        """Called by the ingress when it queues a job, so that it starts without waiting for the poll."""
        self._ensure_loop()
        self._wake.set()

    def info(self) -> dict:
        callbacks = self._callbacks.stats if self._callbacks else None
        return {"owner": self._owner, "active": sorted(self._active), "stats": self.stats, "callbacks": callbacks}

    async def _claim_loop(self) -> None:
        last_purge = 0.0
        while True:
            try:
                if time.monotonic() - last_purge > 60:
                    last_purge = time.monotonic()
                    await self._purge()
                while len(self._active) < self._jobs.jobs_per_runner and time.monotonic() >= self._paused_until:
                    job = await asyncio.to_thread(self._store.claim, self._owner, self._jobs.lease_s)
                    if job is None:
                        break
                    self.stats["claimed"] += 1
                    self._active[job.id] = asyncio.ensure_future(self._run_job(job))
            except InsufficientStorage:
                self._pause_claims()
            except Exception:
                logger.exception("job runner %s: claiming failed; trying again", self._owner)
            self._wake.clear()
            try:
                wait = max(self._jobs.poll_s, self._paused_until - time.monotonic())
                await asyncio.wait_for(self._wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def _purge(self) -> None:
        purged = await asyncio.to_thread(self._store.purge_expired)
        expired = await asyncio.to_thread(self._store.expire_unfinished, self._jobs.max_unfinished_age_s,
                                          self._jobs.ttl_s)
        if purged or expired:
            logger.info("job runner %s: %d expired job(s) deleted, %d unfinished past jobs.max_unfinished_age_s "
                        "failed", self._owner, purged, expired)

    def _pause_claims(self) -> None:
        self._pause_s = min(60.0, max(5.0, 2 * self._pause_s))
        self._paused_until = time.monotonic() + self._pause_s
        self.stats["store_full_pauses"] += 1
        logger.warning("job runner %s: the job store is full; no claims for %.0f s", self._owner, self._pause_s)

    async def _run_job(self, job: Job) -> None:
        worker = asyncio.current_task()
        heartbeat = asyncio.ensure_future(self._heartbeat(job.id, worker))
        logger.info("job %s: claimed by %s (%d pages, %d recorded)", job_tag(job.id), self._owner, len(job.pages),
                    job.done + job.failed)
        try:
            await self._process(job)
        except asyncio.CancelledError:
            logger.info("job %s: stopped on %s (canceled, deleted or lease lost)", job_tag(job.id), self._owner)
        except InsufficientStorage:
            self._pause_claims()
        except DocumentLost:
            await self._fail_lost_document(job)
        except Exception:
            logger.exception("job %s: runner %s failed; the lease is released for another try", job_tag(job.id), self._owner)
            await asyncio.sleep(1.0)
        finally:
            heartbeat.cancel()
            self._active.pop(job.id, None)
            try:
                await asyncio.to_thread(self._store.release, job.id, self._owner)
            except Exception:
                pass  # the lease lapses by itself
            if self._wake is not None:
                self._wake.set()

    async def _heartbeat(self, job_id: str, worker: asyncio.Task) -> None:
        """Renew the lease; a job that is gone (DELETE) or was taken over stops here."""
        while True:
            await asyncio.sleep(self._jobs.lease_s / 3)
            try:
                held = await asyncio.to_thread(self._store.renew, job_id, self._owner, self._jobs.lease_s)
            except Exception:
                logger.warning("job %s: the store did not answer the heartbeat", job_tag(job_id))
                continue
            if not held:
                self.stats["lost_leases"] += 1
                worker.cancel()
                return

    # -- one job ---------------------------------------------------------------------------

    async def _process(self, job: Job) -> None:
        document = await self._documents.get(job.id)
        if document is None:
            return  # deleted meanwhile
        recorded = await asyncio.to_thread(self._store.recorded_pages, job.id)
        unrecorded = [number for number in job.pages if number not in recorded]
        if await self._budget.exhausted(job):
            await self._fail_unrendered(job, unrecorded)
            return await self._judge(job)
        todo = unrecorded[:self._jobs.turn_pages]
        index_of = {number: index for index, number in enumerate(job.pages)}
        with PageTasks(limit=self._jobs.max_inflight_pages) as pages:
            async for item in self._render.pages(job, document, todo):
                item = await self._budget.charge(job, item)
                if not isinstance(item, DecodeCharge):
                    await pages.start(self._page(job, item, index_of))
            await pages.results()
        if len(unrecorded) > len(todo):
            self.stats["turns"] += 1
            return  # the end of this turn: the lease goes back, and the next claim takes turns
        self._documents.drop(job.id)
        await self._judge(job)

    async def _fail_unrendered(self, job: Job, numbers: list[int]) -> None:
        for number in numbers:
            await self._record(job.id, number, None, self._budget.over(job, number).error)

    async def _fail_lost_document(self, job: Job) -> None:
        """The store lost the document (an evicting Redis): the job fails once, instead of being claimed forever."""
        error = JobDocumentLost("The job store lost this job's document; submit it again.").record()
        logger.error("job %s: its document is gone from the store; the job fails", job_tag(job.id))
        await asyncio.to_thread(self._store.finish, job.id, None, FAILED, self._jobs.ttl_s, error)

    async def _judge(self, job: Job) -> None:
        current = await asyncio.to_thread(self._store.get, job.id)
        if current is None or current.finished:
            return
        total = len(current.pages)
        if current.done + current.failed < total:
            raise RuntimeError(f"{total - current.done - current.failed} page(s) unrecorded at the end")
        status = final_status(total, current.failed, self._jobs.max_page_error_rate)
        error = None
        if status == FAILED:
            error = TooManyFailedPages(f"{current.failed} of {total} pages failed; a job may lose at most "
                                       f"jobs.max_page_error_rate={self._jobs.max_page_error_rate:g} of its "
                                       "pages.").record()
        engine = await self._engine_identity()
        if await asyncio.to_thread(self._store.finish, job.id, self._owner, status, self._jobs.ttl_s, error, engine):
            self.stats["finished"] += 1
            metrics.inc("ocr_jobs_finished_total", status=status)
            logger.info("job %s: %s (%d done, %d failed)", job_tag(job.id), status, current.done, current.failed)

    async def _page(self, job: Job, item, index_of: dict) -> None:
        if isinstance(item, PageFailure):
            number, result, error = item.page_number, None, item.error
        else:
            number = item.page_number
            result, error = await self._read_page(job, item)
            if result is not None:
                result["index"] = index_of[number]
        await self._record(job.id, number, result, error)
        self.stats["pages"] += 1

    async def _read_page(self, job: Job, payload: PagePayload) -> tuple[Optional[dict], Optional[dict]]:
        """(result, None), or (None, the error) once the one retry rule (app/pipeline/page_pipeline.py) gave up.
        The payload carries the job's options (PageOptions), as the Preprocessor was given them."""
        try:
            return await read_page(self._stages, payload, self._jobs.page_retries,
                                   on_retry=self._count_retry), None
        except Exception as exc:
            error = to_error(exc, job.id)
            logger.warning("job %s page %d failed: %s", job_tag(job.id), payload.page_number, error.code)
            return None, error.record()

    def _count_retry(self) -> None:
        self.stats["page_retries"] += 1

    async def _record(self, job_id: str, number: int, result: Optional[dict], error: Optional[dict]) -> None:
        await record_page(self._store, job_id, number, result, error)
        self._pause_s = 0.0  # the store took it: claims need no pause

    async def _engine_identity(self) -> Optional[dict]:
        try:
            return await self._engine.get()
        except Exception:  # a job's result says no engine rather than failing for it
            return None

    def __del__(self):
        """A runner told to stop hands its leases back, so another runner takes over at once."""
        for job_id in list(getattr(self, "_active", {})):
            try:
                self._store.release(job_id, self._owner)
            except Exception:
                pass
