"""The `jobs` settings: where job state lives, how jobs share the graph, and what each client may hold."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator


class JobQuotas(BaseModel):
    """What one client (API key name) may have in the job store at once."""

    model_config = ConfigDict(extra="forbid")

    max_queued_jobs: int = Field(20, ge=1, description="Unfinished jobs (queued or running).")
    max_queued_pages: int = Field(20000, ge=1, description="Pages of the client's unfinished jobs.")
    max_stored_bytes: int = Field(
        4 * 1024**3, ge=1, description="Documents and results the client keeps in the store, finished jobs included "
        "until they expire."
    )
    max_decode_s: float = Field(
        3600.0, gt=0, description="Decoder seconds (rendering or decoding, summed over its pages) one job may use "
        "on a runner; past it, its remaining pages fail with decode_budget_exceeded."
    )
    max_uploads: int = Field(4, ge=1, description="Job uploads in progress at one ingress replica.")
    max_long_polls: int = Field(4, ge=0, description="Long-polls held open at one ingress replica.")
    max_event_streams: int = Field(4, ge=0, description="Event streams (/v1/jobs/{id}/events) open at one ingress "
                                   "replica.")


class Callbacks(BaseModel):
    """POSTs to a client's own system when its job ends (`callback_url` on submit), signed with HMAC-SHA256."""

    model_config = ConfigDict(extra="forbid")

    allowed_hosts: list[str] = Field(
        default_factory=list, description="Receivers a callback_url may name: `host:port`, or `host` for the "
        "scheme's own port only (443 for https, 80 for http); any other is refused at submit with 400. A host "
        "that resolves to a link-local, multicast or unspecified address is never called, nor one that resolves "
        "to loopback unless the entry itself names loopback. Empty: no callbacks."
    )
    secret_file: Optional[str] = Field(
        None, description="File holding the HMAC-SHA256 key that signs callbacks (X-OCR-Signature); required "
        "with allowed_hosts. Mode 0600 or stricter, not empty: refused at start-up otherwise."
    )
    receiver_secret_files: dict[str, str] = Field(
        default_factory=dict, description="A key per receiver: `host[:port]` (as in allowed_hosts) -> its own "
        "secret file, so that one receiver cannot forge callbacks to another. Receivers not named here share "
        "secret_file."
    )
    ca_file: Optional[str] = Field(
        None, description="PEM file of the CA(s) that signed the receivers' certificates (https callbacks); unset: "
        "the system's CAs."
    )
    max_attempts: int = Field(6, ge=1, le=20, description="Deliveries tried before the callback is given up as "
                              "failed (shown in the job's status).")
    backoff_s: float = Field(2.0, gt=0, description="Wait before the second attempt; doubled after each (at most "
                             "300 s).")
    timeout_s: float = Field(10.0, gt=0, description="One attempt's whole limit: resolving, connecting, sending "
                             "and reading the answer (at most 64 KiB of it), however slowly the receiver sends.")

    @model_validator(mode="after")
    def _signed(self) -> "Callbacks":
        if self.allowed_hosts and not self.secret_file:
            raise ValueError("jobs.callbacks.allowed_hosts needs jobs.callbacks.secret_file: callbacks are signed")
        unknown = sorted(set(self.receiver_secret_files) - set(self.allowed_hosts))
        if unknown:
            raise ValueError(f"jobs.callbacks.receiver_secret_files names receivers not in allowed_hosts: {unknown}")
        return self


class Jobs(BaseModel):
    """Async jobs for long documents (app/jobs): where their state lives and how they share the graph."""

    model_config = ConfigDict(extra="forbid")

    store: Optional[str] = Field(
        None, description="sqlite:///ABSOLUTE/PATH (one node) or rediss://HOST:PORT/DB (the fleet, TLS; redis:// "
        "is plaintext, for a Redis on the same host); unset: no /v1/jobs."
    )
    redis_password_file: Optional[str] = Field(
        None, description="File holding the Redis password (requirepass); never put it in the URL or the config."
    )
    redis_ca_file: Optional[str] = Field(
        None, description="PEM file of the CA that signed the Redis server's certificate (rediss://); unset: the "
        "system's CAs."
    )
    require_aof: bool = Field(
        True, description="Refuse a Redis without appendonly: a restart of it would lose accepted jobs."
    )
    max_pages: int = Field(2000, gt=0, description="Most pages one job may expand to (after `pages`).")
    max_upload_bytes: int = Field(500 * 1024 * 1024, gt=0, description="Largest accepted job document.")
    upload_read_timeout_s: float = Field(300.0, gt=0, description="A job's whole document must arrive within this; else 408.")
    ttl_s: float = Field(86400.0, gt=0, description="Finished jobs and their results are deleted this long after they end.")
    page_retries: int = Field(3, ge=0, le=10, description="Retries of a job's page after a retryable error (the "
                              "rule of the top-level page_retries), then it is failed.")
    max_page_error_rate: float = Field(
        0.004, ge=0, le=1, description="Failed pages at or under this share end a job `partial`; above it, `failed`."
    )
    max_inflight_pages: int = Field(
        2, ge=1, description="Pages of one job in the graph at once, so one long job cannot starve the rest "
        "(2 keeps synchronous p95 within 3x on a 2-core machine, load/jobs_fairness.py; the fleet file sets 8)."
    )
    runner_replicas: int = Field(1, ge=1, description="JobRunner replicas; each lease is one job on one runner.")
    jobs_per_runner: int = Field(2, ge=1, description="Jobs one runner replica works on at once.")
    lease_s: float = Field(
        10.0, ge=1, description="A runner's claim on a job; renewed every third of it. A lapsed lease is taken over."
    )
    poll_s: float = Field(1.0, gt=0, description="How often an idle runner looks for queued jobs.")
    turn_pages: int = Field(
        16, ge=1, description="Pages of one job a runner reads before the job goes back to the queue, so that "
        "claims rotate among clients: a 1-page job waits at most one turn, not behind another client's backlog."
    )
    max_unfinished_age_s: float = Field(
        7 * 86400.0, gt=0, description="A job not finished this long after it was submitted fails with "
        "`job_expired` (its results so far kept for ttl_s), so that nothing waits in the store forever."
    )
    max_store_bytes: int = Field(
        50 * 1024**3, gt=0, description="The whole store's documents and results; past it a submit gets 507 "
        "insufficient_storage (as on a full disk)."
    )
    min_free_bytes: int = Field(
        1024**3, ge=0, description="Free space a SQLite store keeps on its disk: a submit that would leave less "
        "gets 507, so that results, deletes and the write-ahead log always find room (the store's own pages freed "
        "by deleted jobs count as free)."
    )
    max_uploads: int = Field(
        16, ge=1, description="Job uploads one ingress replica reads at once; beyond: 503 at once, so that slow "
        "uploads cannot take the replica's request slots."
    )
    max_upload_buffer_bytes: int = Field(
        2 * 1024**3, gt=0, description="Bytes of job documents one ingress replica holds in memory at once (each "
        "submit reserves its Content-Length, or max_upload_bytes without one, until it is answered); beyond: 503."
    )
    max_long_polls: int = Field(
        32, ge=0, description="`GET /v1/jobs/{id}?wait=` long-polls one ingress replica holds open at once; "
        "beyond them (or the client's quota) the status is answered at once."
    )
    max_event_streams: int = Field(
        64, ge=0, description="`GET /v1/jobs/{id}/events` streams one ingress replica holds open at once; beyond: "
        "503 (the client's own quota: 429), and the client polls the status instead."
    )
    events_poll_s: float = Field(0.5, gt=0, description="How often an event stream looks for newly finished pages.")
    events_keepalive_s: float = Field(
        15.0, gt=0, description="An event stream with nothing to tell sends a comment this often, so that proxies "
        "keep it open and a client that left is noticed."
    )
    upload_idle_timeout_s: float = Field(
        30.0, gt=0, description="A job upload that sends no byte for this long is ended with 408 (the whole "
        "upload has upload_read_timeout_s)."
    )
    callbacks: Callbacks = Field(default_factory=lambda: Callbacks(), description="Callbacks when a job ends.")
    quotas: JobQuotas = Field(
        default_factory=lambda: JobQuotas(), description="Each client's limits (API key name; the anonymous "
        "client without keys); past one: 429 quota_exceeded with Retry-After, the message naming the limit."
    )
    client_quotas: dict[str, JobQuotas] = Field(
        default_factory=dict, description="Quotas of named clients (API key names) that differ from `quotas`."
    )

    @property
    def long_lived_slots(self) -> int:
        """Request slots an ingress replica may hold for long: uploads (and kept-document renders), long-polls
        and event streams. The builder adds them to the ingress's request slots, so they never crowd out
        /v1/ocr; the ingress checks the sum at start-up (app/http/ingress.py)."""
        return self.max_uploads + self.max_long_polls + self.max_event_streams

    def quotas_for(self, client: str) -> JobQuotas:
        return self.client_quotas.get(client, self.quotas)

