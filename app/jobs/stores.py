"""The store that `jobs.store` names: the one place that picks a backend, so that the interface
(store.py) knows none of its implementations."""

from __future__ import annotations

from app.jobs.store import JobStore


def open_store(jobs) -> JobStore:
    """The store named by `jobs.store` (app.config.Jobs)."""
    url = jobs.store
    if not url:
        raise ValueError("jobs.store is not set")
    if url.startswith("sqlite:///"):
        from app.jobs.sqlite_store import SQLiteJobStore

        return SQLiteJobStore(url[len("sqlite://"):])
    from app.jobs.redis_store import RedisJobStore

    return RedisJobStore(url, password_file=jobs.redis_password_file, require_aof=jobs.require_aof,
                         ca_file=jobs.redis_ca_file)
