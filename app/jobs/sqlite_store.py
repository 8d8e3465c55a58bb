"""The single-node store: one SQLite file (WAL), shared by every replica on the machine.

Each change is one transaction; `BEGIN IMMEDIATE` takes the write lock up front so that two
runners claiming at once serialise instead of both reading the same free job.

Durability: WAL with `synchronous=FULL`, so a job answered 202 survives a power cut, not
only a process crash (NORMAL may lose the last commits then). A full disk (SQLITE_FULL) rolls
the transaction back (SQLite leaves a failed COMMIT open) and raises InsufficientStorage;
the connection stays usable and works again once space is freed. The file and its -wal and
-shm companions are 0600 from creation: SQLite gives the companions the database's mode.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from typing import Optional

from app.errors import InsufficientStorage
from app.jobs.model import CALLBACK_PENDING, FINISHED, RUNNING, Job
from app.jobs.quotas import Admission, Usage, first_exceeded, quota_exceeded, store_full
from app.jobs.sqlite_schema import (
    ADDED_COLUMNS, COLUMNS, SCHEMA, UNFINISHED, WAL_SIZE_LIMIT, dumps, job_from_row, row_of,
)
from app.jobs.store import DocumentLost, JobStore

class SQLiteJobStore(JobStore):
    def __init__(self, path: str):
        if not os.path.isabs(path):
            raise ValueError(f"jobs.store needs an absolute path (sqlite:///ABSOLUTE/PATH), not {path!r}")
        self._directory = os.path.dirname(path)
        os.makedirs(self._directory, mode=0o700, exist_ok=True)
        # Documents of strangers: readable by the service account only, from the first byte.
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")  # the log shrinks back after checkpoints
        self._db.executescript(SCHEMA)
        self._add_missing_columns()

    def _add_missing_columns(self) -> None:
        """A store written by an earlier release gains the newer columns (orientation NULL: the settings')."""
        present = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for name, kind in ADDED_COLUMNS.items():
            if name not in present:
                self._db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")

    def _transaction(self, work):
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                outcome = work(self._db)
                self._db.execute("COMMIT")
                return outcome
            except BaseException as exc:
                if self._db.in_transaction:  # a failed COMMIT (SQLITE_FULL) leaves the transaction open
                    try:
                        self._db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                if isinstance(exc, sqlite3.Error) and _is_full(exc):
                    raise store_full("the disk under the SQLite store has no space left") from exc
                raise

    def _query(self, sql: str, params: tuple = ()) -> list:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def create(self, job: Job, document: bytes, idempotency_key: Optional[str] = None,
               admission: Optional[Admission] = None) -> tuple[Job, bool]:
        def work(db):
            if idempotency_key:
                row = db.execute("SELECT job_id FROM idempotency WHERE client=? AND key=?",
                                 (job.client, idempotency_key)).fetchone()
                if row and db.execute("SELECT 1 FROM jobs WHERE id=?", (row[0],)).fetchone():
                    return row[0], False
            if admission is not None:
                self._admit(db, job, len(document), admission)
            if idempotency_key:
                db.execute("INSERT OR REPLACE INTO idempotency VALUES (?,?,?)", (job.client, idempotency_key, job.id))
            db.execute(f"INSERT INTO jobs ({', '.join(COLUMNS)}, idempotency_key, page_count, document_bytes, "
                       f"stored_bytes) VALUES ({', '.join('?' * (len(COLUMNS) + 4))})",
                       (*row_of(job), idempotency_key, len(job.pages), len(document), len(document)))
            db.execute("INSERT INTO documents VALUES (?,?)", (job.id, sqlite3.Binary(document)))
            return job.id, True

        try:
            job_id, created = self._transaction(work)
        except InsufficientStorage:
            # Space may sit in the write-ahead log, already copied into pages the file can reuse:
            # fold the log into the file and truncate it, then look once more.
            self._checkpoint()
            job_id, created = self._transaction(work)
        return self.get(job_id), created

    def _checkpoint(self) -> None:
        with self._lock:
            try:
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error:
                pass

    def _admit(self, db, job: Job, size: int, admission: Admission) -> None:
        jobs, pages, stored = db.execute(
            "SELECT COALESCE(SUM(status IN (?,?)), 0), COALESCE(SUM(CASE WHEN status IN (?,?) THEN page_count END), 0), "
            "COALESCE(SUM(stored_bytes), 0) FROM jobs WHERE client=?", (*UNFINISHED, *UNFINISHED, job.client)
        ).fetchone()
        exceeded = first_exceeded(Usage(jobs, pages, stored), len(job.pages), size, admission)
        if exceeded:
            raise quota_exceeded(job.client, *exceeded, admission)
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        reusable = db.execute("PRAGMA freelist_count").fetchone()[0] * page_size
        used = db.execute("PRAGMA page_count").fetchone()[0] * page_size - reusable
        if used + size > admission.max_store_bytes:
            raise store_full(f"jobs.max_store_bytes={admission.max_store_bytes}")
        disk = os.statvfs(self._directory)
        # The document passes through the write-ahead log before it lands in the file: room for both.
        if disk.f_bavail * disk.f_frsize + reusable - 2 * size < admission.min_free_bytes:
            raise store_full(f"jobs.min_free_bytes={admission.min_free_bytes} would no longer be free on its disk")

    def get(self, job_id: str) -> Optional[Job]:
        rows = self._query(f"SELECT {', '.join(COLUMNS)} FROM jobs WHERE id=?", (job_id,))
        if not rows:
            return None
        job = job_from_row(rows[0])
        counts = self._query("SELECT COUNT(result), COUNT(error) FROM page_results WHERE job_id=?", (job_id,))[0]
        job.done, job.failed = counts
        return job

    def claim(self, owner: str, lease_s: float) -> Optional[Job]:
        def work(db):
            now = time.time()
            row = db.execute(
                "SELECT jobs.id, jobs.client FROM jobs LEFT JOIN turns ON turns.client = jobs.client "
                "WHERE status IN (?,?) AND lease_until < ? ORDER BY COALESCE(turns.last, 0), created_at LIMIT 1",
                (*UNFINISHED, now)).fetchone()
            if row is None:
                return None
            db.execute("UPDATE jobs SET owner=?, lease_until=?, status=?, started_at=COALESCE(started_at, ?) "
                       "WHERE id=?", (owner, now + lease_s, RUNNING, now, row[0]))
            db.execute("INSERT INTO turns VALUES (?,?) ON CONFLICT(client) DO UPDATE SET last=excluded.last",
                       (row[1], now))
            return row[0]

        job_id = self._transaction(work)
        return self.get(job_id) if job_id else None

    def renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        return self._transaction(lambda db: db.execute(
            "UPDATE jobs SET lease_until=? WHERE id=? AND owner=? AND status=?",
            (time.time() + lease_s, job_id, owner, RUNNING)).rowcount == 1)

    def release(self, job_id: str, owner: str) -> None:
        self._transaction(lambda db: db.execute(
            "UPDATE jobs SET lease_until=0, owner=NULL WHERE id=? AND owner=?", (job_id, owner)))

    def charge_decode(self, job_id: str, ms: float) -> float:
        def charge(db) -> float:
            db.execute("UPDATE jobs SET decode_ms = decode_ms + ? WHERE id=?", (ms, job_id))
            row = db.execute("SELECT decode_ms FROM jobs WHERE id=?", (job_id,)).fetchone()
            return float(row[0]) if row else 0.0

        if ms <= 0:
            rows = self._query("SELECT decode_ms FROM jobs WHERE id=?", (job_id,))
            return float(rows[0][0]) if rows else 0.0
        return self._transaction(charge)

    def document_size(self, job_id: str) -> Optional[int]:
        rows = self._query("SELECT length(data) FROM documents WHERE job_id=?", (job_id,))
        return int(rows[0][0]) if rows else None

    def document(self, job_id: str) -> Optional[bytes]:
        rows = self._query("SELECT data FROM documents WHERE job_id=?", (job_id,))
        if rows:
            return bytes(rows[0][0])
        if self._query("SELECT 1 FROM jobs WHERE id=? AND status IN (?,?)", (job_id, *UNFINISHED)):
            raise DocumentLost(job_id)
        return None

    def record_page(self, job_id: str, page_number: int, result: Optional[dict] = None,
                    error: Optional[dict] = None) -> bool:
        body, failure = dumps(result), dumps(error)

        def work(db):
            written = db.execute(
                "INSERT OR IGNORE INTO page_results SELECT ?,?,?,? WHERE EXISTS "
                "(SELECT 1 FROM jobs WHERE id=? AND status IN (?,?))",
                (job_id, page_number, body, failure, job_id, *UNFINISHED)).rowcount == 1
            if written:
                db.execute("UPDATE jobs SET stored_bytes = stored_bytes + ? WHERE id=?",
                           (len(body or failure or ""), job_id))
            return written

        return self._transaction(work)

    def recorded_pages(self, job_id: str) -> set[int]:
        return {row[0] for row in self._query("SELECT page_number FROM page_results WHERE job_id=?", (job_id,))}

    def recorded_order(self, job_id: str) -> list[tuple[int, bool]]:
        # INSERT OR IGNORE gives each new row the next rowid: rowid order is the order pages were recorded
        rows = self._query("SELECT page_number, error IS NULL FROM page_results WHERE job_id=? ORDER BY rowid",
                           (job_id,))
        return [(number, bool(read)) for number, read in rows]

    def unfinished_created_before(self, cutoff: float) -> list[str]:
        return [row[0] for row in self._query("SELECT id FROM jobs WHERE status IN (?,?) AND created_at < ?",
                                              (*UNFINISHED, cutoff))]

    def unfinished_counts(self) -> dict[str, int]:
        rows = self._query("SELECT status, COUNT(*) FROM jobs WHERE status IN (?,?) GROUP BY status", UNFINISHED)
        return {status: 0 for status in UNFINISHED} | dict(rows)

    def results(self, job_id: str) -> dict[int, dict]:
        rows = self._query("SELECT page_number, result, error FROM page_results WHERE job_id=?", (job_id,))
        return {number: ({"result": json.loads(result)} if result is not None else {"error": json.loads(error)})
                for number, result, error in rows}

    def finish(self, job_id: str, owner: Optional[str], status: str, ttl_s: float, error: Optional[dict] = None,
               engine: Optional[dict] = None) -> bool:
        def work(db):
            now = time.time()
            changed = db.execute(
                "UPDATE jobs SET status=?, finished_at=?, expires_at=?, error=?, engine=?, owner=NULL, lease_until=0, "
                "stored_bytes = stored_bytes - CASE WHEN keep_document THEN 0 ELSE document_bytes END, "
                "document_bytes = CASE WHEN keep_document THEN document_bytes ELSE 0 END, "
                "callback = CASE WHEN callback_url IS NULL THEN NULL ELSE ? END, "
                "callback_due = CASE WHEN callback_url IS NULL THEN NULL ELSE ? END "
                f"WHERE id=? AND status NOT IN ({', '.join('?' * len(FINISHED))}) AND (? IS NULL OR owner=?)",
                (status, now, now + ttl_s, dumps(error), dumps(engine), dumps(CALLBACK_PENDING), now, job_id,
                 *FINISHED, owner, owner)).rowcount
            if changed:  # the results are what is kept, and the document where the client asked for it
                db.execute("DELETE FROM documents WHERE job_id=? AND job_id NOT IN "
                           "(SELECT id FROM jobs WHERE id=? AND keep_document)", (job_id, job_id))
            return changed == 1

        return self._transaction(work)

    def claim_callback(self, hold_s: float) -> Optional[Job]:
        def work(db):
            now = time.time()
            row = db.execute("SELECT id FROM jobs WHERE callback_due IS NOT NULL AND callback_due <= ? "
                             "ORDER BY callback_due LIMIT 1", (now,)).fetchone()
            if row is not None:
                db.execute("UPDATE jobs SET callback_due=? WHERE id=?", (now + hold_s, row[0]))
            return row[0] if row else None

        job_id = self._transaction(work)
        return self.get(job_id) if job_id else None

    def record_callback(self, job_id: str, state: dict, due: Optional[float]) -> None:
        self._transaction(lambda db: db.execute("UPDATE jobs SET callback=?, callback_due=? WHERE id=?",
                                                (dumps(state), due, job_id)))

    def delete(self, job_id: str) -> bool:
        def work(db):
            existed = db.execute("DELETE FROM jobs WHERE id=?", (job_id,)).rowcount == 1
            for table, column in (("documents", "job_id"), ("page_results", "job_id"), ("idempotency", "job_id")):
                db.execute(f"DELETE FROM {table} WHERE {column}=?", (job_id,))
            return existed

        return self._transaction(work)

    def purge_expired(self) -> int:
        expired = [row[0] for row in self._query("SELECT id FROM jobs WHERE expires_at IS NOT NULL AND expires_at < ?",
                                                 (time.time(),))]
        return sum(self.delete(job_id) for job_id in expired)

    def ping(self) -> None:
        self._query("SELECT 1")

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _is_full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or "disk is full" in str(exc)
