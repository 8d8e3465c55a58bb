"""Application metrics: what only this service knows, exported by Ray's metrics agent.

Each deployment records where the work happens (`ray.serve.metrics`); every node's
agent serves them on its metrics export port (`python -m app --metrics-port`,
`cluster/ray-node.sh`), next to Ray's own `ray_serve_*` and `ray_node_*` series.
Prometheus sees each name with Ray's prefix (`ocr_pages_total` is scraped as
`ray_ocr_pages_total`), and Serve adds the deployment, replica and application labels.

Ray exports a histogram's `_bucket` and `_count` exactly but its `_sum` from bucket
midpoints (ray/_private/telemetry/open_telemetry_metric_recorder.py): query quantiles of the
buckets, and a mean as a counter over `_count` (pages per batch: ocr_pages_total over
ocr_batch_pages_count), never `_sum / _count`.

Our labels are few and bounded: route templates, HTTP status codes, error codes,
stage names, engine names, job statuses. Never a request id, file name or key.
Recording never raises: a metric must not fail a page.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

logger = logging.getLogger("ray.serve")

PREFIX = "ray_"  # what Ray's exporter puts before every application metric
STAGES = ("read_upload", "decode", "render", "resize_encode", "orientation", "queue_wait", "engine", "structure_layout",
          "structure_tables", "postprocess",
          "total")
_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

# name: (kind, description, label keys, histogram boundaries)
SPEC: dict[str, tuple] = {
    "ocr_requests_total": ("counter", "HTTP requests answered by the ingress, by route template and status code",
                           ("route", "code"), None),
    "ocr_pages_total": ("counter", "Pages through the OCR engine: ok, invalid (truncated or looping) or failed",
                        ("engine", "outcome"), None),
    "ocr_invalid_pages_total": ("counter", "Pages the engine read but marked invalid, by reason (length, repetition, degenerate)",
                                ("reason",), None),
    "ocr_engine_errors_total": ("counter", "Pages the OCR replica failed, by the error code the client got",
                                ("code",), None),
    "ocr_stage_seconds": ("histogram", "Seconds spent in each stage; queue_wait is a page's wait in the batcher, "
                          "engine one batch's engine call, total one whole request", ("stage",), _SECONDS),
    "ocr_page_rotations_total": ("counter", "Pages the Preprocessor turned, by the clockwise degrees applied "
                                 "(0: found upright or orientation off)", ("rotation",), None),
    "ocr_batch_pages": ("histogram", "Pages in one engine call", (), [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64]),
    "ocr_batch_fill_ratio": ("histogram", "A batch's pixels over batching.max_batch_pixels", (),
                             [0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]),
    "ocr_queue_pages": ("gauge", "Pages waiting in this OCR replica's batcher", (), None),
    "ocr_seconds_per_page": ("gauge", "This OCR replica's busy seconds per page, a moving average over "
                             "recent batches (what the service_rate autoscaling policy reads)", (), None),
    "ocr_engine_pages": ("gauge", "Pages inside an engine that batches by itself (vllm), by state: running (being "
                         "decoded) or waiting (queued in its scheduler)", ("state",), None),
    "ocr_engine_kv_cache_usage": ("gauge", "Share of the engine's KV cache in use (vllm), as its scheduler last "
                                  "reported: near 1, pages wait for memory, not for sequence slots", (), None),
    "ocr_engine_time_to_first_token_seconds": ("histogram", "Seconds from a page entering the engine to its first "
                                               "token (vllm): queueing and prefill", (), _SECONDS),
    "ocr_engine_generated_tokens_total": ("counter", "Tokens an engine generated (vllm); its rate is tokens/s", (),
                                          None),
    "ocr_gpu_memory_used_bytes": ("gauge", "Memory used on this OCR replica's GPU (NVML; only where there is one)",
                                  (), None),
    "ocr_gpu_memory_total_bytes": ("gauge", "Memory of this OCR replica's GPU (NVML)", (), None),
    "ocr_gpu_utilization_ratio": ("gauge", "Busy share of this OCR replica's GPU over NVML's last sample period",
                                  (), None),
    "ocr_replicas_max": ("gauge", "ocr_autoscaling.max_replicas (set only where autoscaling is on)", (), None),
    "ocr_jobs": ("gauge", "Unfinished jobs in the store, by status (every runner reports the same store: use max)",
                 ("status",), None),
    "ocr_jobs_finished_total": ("counter", "Jobs ended, by final status", ("status",), None),
    "ocr_job_pages_total": ("counter", "Job pages recorded, by outcome (ok, failed)", ("outcome",), None),
}


@functools.lru_cache(maxsize=None)
def _metric(name: str):
    """One metric object per process, made on first use (inside the replica, where Serve's tags exist)."""
    from ray.serve import metrics

    kind, description, tag_keys, boundaries = SPEC[name]
    if kind == "counter":
        return metrics.Counter(name, description, tag_keys=tag_keys)
    if kind == "gauge":
        return metrics.Gauge(name, description, tag_keys=tag_keys)
    return metrics.Histogram(name, description, boundaries=boundaries, tag_keys=tag_keys)


_warned: set = set()


def _safely(name: str, record) -> None:
    try:
        record(_metric(name))
    except Exception as exc:  # outside Ray, or the agent is gone: the page matters more
        if name not in _warned:
            _warned.add(name)
            logger.warning("metric %s not recorded: %s", name, exc)


def inc(name: str, value: float = 1.0, **tags: str) -> None:
    if value:
        _safely(name, lambda metric: metric.inc(value, tags=tags or None))


def observe(name: str, value: float, **tags: str) -> None:
    _safely(name, lambda metric: metric.observe(value, tags=tags or None))


def set_gauge(name: str, value: float, **tags: str) -> None:
    _safely(name, lambda metric: metric.set(value, tags=tags or None))


def stage(name: str, seconds: float) -> None:
    observe("ocr_stage_seconds", max(0.0, seconds), stage=name)


def invalid_reason(notes: list, finish_reason: str) -> Optional[str]:
    """Why the engine's page is invalid, as a bounded label: degenerate, repetition, length or other."""
    if finish_reason == "degenerate":
        return "degenerate"
    if any("repetition" in note for note in notes):
        return "repetition"
    return "length" if finish_reason == "length" else "other"


def gpu_gauges(snapshot: Optional[dict]) -> None:
    """This replica's GPU, from app.ops.telemetry.gpu_snapshot (None without NVML: nothing is set)."""
    if not snapshot:
        return
    set_gauge("ocr_gpu_memory_used_bytes", snapshot["memory_used_mib"] * 2**20)
    set_gauge("ocr_gpu_memory_total_bytes", snapshot["memory_total_mib"] * 2**20)
    set_gauge("ocr_gpu_utilization_ratio", snapshot["utilisation_pct"] / 100)


def jobs_gauge(counts: dict[str, int]) -> None:
    """The store's unfinished jobs by status, zeros included, so that a drained queue reads 0."""
    for status, count in counts.items():
        set_gauge("ocr_jobs", count, status=status)


def exported_names() -> set[str]:
    """Every series name Prometheus can see of ours (histograms as _bucket, _sum, _count)."""
    names = set()
    for name, (kind, *_rest) in SPEC.items():
        if kind == "histogram":
            names |= {f"{PREFIX}{name}_{suffix}" for suffix in ("bucket", "sum", "count")}
        else:
            names.add(f"{PREFIX}{name}")
    return names
