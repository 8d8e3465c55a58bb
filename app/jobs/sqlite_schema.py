"""The SQLite store's tables, and a job to and from its row (app/jobs/sqlite_store.py). A column added
after the first release goes in ADDED_COLUMNS too: an older file gains it when it is opened."""

from __future__ import annotations

import json
from typing import Optional

from app.jobs.model import QUEUED, RUNNING, Job

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, status TEXT NOT NULL, client TEXT NOT NULL, content_type TEXT, filename TEXT,
    document_sha256 TEXT NOT NULL, pages TEXT NOT NULL, created_at REAL NOT NULL, started_at REAL,
    finished_at REAL, expires_at REAL, error TEXT, engine TEXT, owner TEXT, lease_until REAL NOT NULL DEFAULT 0,
    idempotency_key TEXT, orientation TEXT, page_count INTEGER NOT NULL DEFAULT 0,
    document_bytes INTEGER NOT NULL DEFAULT 0, stored_bytes INTEGER NOT NULL DEFAULT 0,
    keep_document INTEGER NOT NULL DEFAULT 0, callback_url TEXT, callback TEXT, callback_due REAL, lang TEXT,
    structure TEXT, pdf_text TEXT, decode_ms REAL NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_claimable ON jobs (status, created_at);
CREATE INDEX IF NOT EXISTS jobs_by_client ON jobs (client, status);
CREATE TABLE IF NOT EXISTS turns (client TEXT PRIMARY KEY, last REAL NOT NULL);
CREATE TABLE IF NOT EXISTS documents (job_id TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS page_results (
    job_id TEXT NOT NULL, page_number INTEGER NOT NULL, result TEXT, error TEXT,
    PRIMARY KEY (job_id, page_number));
CREATE TABLE IF NOT EXISTS idempotency (
    client TEXT NOT NULL, key TEXT NOT NULL, job_id TEXT NOT NULL, PRIMARY KEY (client, key));
"""
COLUMNS = ("id", "status", "client", "content_type", "filename", "document_sha256", "pages", "created_at",
            "started_at", "finished_at", "expires_at", "error", "engine", "owner", "lease_until", "orientation",
            "keep_document", "callback_url", "callback", "lang", "structure", "pdf_text")
UNFINISHED = (QUEUED, RUNNING)
WAL_SIZE_LIMIT = 64 * 1024 * 1024
# Columns added after the first release, with their type: an older file gains them at open.
ADDED_COLUMNS = {"orientation": "TEXT", "page_count": "INTEGER NOT NULL DEFAULT 0",
                  "document_bytes": "INTEGER NOT NULL DEFAULT 0", "stored_bytes": "INTEGER NOT NULL DEFAULT 0",
                  "keep_document": "INTEGER NOT NULL DEFAULT 0", "callback_url": "TEXT", "callback": "TEXT",
                  "callback_due": "REAL", "lang": "TEXT", "structure": "TEXT", "pdf_text": "TEXT",
                  "decode_ms": "REAL NOT NULL DEFAULT 0"}



def dumps(value) -> Optional[str]:
    return None if value is None else json.dumps(value, separators=(",", ":"))


def row_of(job: Job) -> tuple:
    return (job.id, job.status, job.client, job.content_type, job.filename, job.document_sha256,
            json.dumps(job.pages), job.created_at, job.started_at, job.finished_at, job.expires_at,
            dumps(job.error), dumps(job.engine), job.owner, job.lease_until, job.orientation, int(job.keep_document),
            job.callback_url, dumps(job.callback), job.lang, job.structure, job.pdf_text)


def job_from_row(row) -> Job:
    values = dict(zip(COLUMNS, row))
    for name in ("pages", "error", "engine", "callback"):
        values[name] = json.loads(values[name]) if values[name] is not None else None
    values["pages"] = values["pages"] or []
    values["keep_document"] = bool(values["keep_document"])
    return Job(**values)
