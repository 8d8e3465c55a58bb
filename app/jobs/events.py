"""A job's progress as Server-Sent Events (`GET /v1/jobs/{id}/events`).

One `page` event per finished page, in the order the store recorded them (`recorded_order`), its `id`
the page's place in that order; then one `end` event with the job's status body. Each page event
carries the counts up to it, so a client that reconnects with `Last-Event-ID: N` gets events N+1
onwards and the same counts it would have seen: nothing twice, nothing missed. A stream with nothing
to tell sends a comment every `jobs.events_keepalive_s`; it stops when the client leaves.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator, Awaitable, Callable, Optional

from app.errors import BadRequest
from app.jobs.model import Job, status_body

END_ID = "end"


def last_event_id(raw: Optional[str]) -> int:
    """Events already seen: Last-Event-ID as the stream set it (a page event's number, or `end`)."""
    if raw is None or raw == "":
        return 0
    if raw == END_ID:
        return -1  # the client saw the end: it gets the end again, nothing else
    if not raw.isdigit() or len(raw) > 9:
        raise BadRequest("Last-Event-ID must be an event id this stream sent.", code="invalid_last_event_id")
    return int(raw)


def event(name: str, event_id: str, data: dict) -> bytes:
    return f"id: {event_id}\nevent: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def page_events(job: Job, order: list, seen: int) -> list:
    """The page events after the first `seen`, each with the counts up to and including it."""
    events, done, failed = [], 0, 0
    for position, (number, read) in enumerate(order, 1):
        done, failed = done + read, failed + (not read)
        if position > seen:
            events.append(event("page", str(position), {"page_number": number, "status": "done" if read else "failed",
                                                        "done": done, "failed": failed, "total": len(job.pages)}))
    return events


async def job_events(job: Job, seen: int, order_of: Callable[[str], Awaitable[list]],
                     current: Callable[[str], Awaitable[Optional[Job]]], left: Callable[[], Awaitable[bool]],
                     poll_s: float, keepalive_s: float, base_path: str) -> AsyncIterator[bytes]:
    """The stream: page events as the pages finish, then the end event. `current` gives the job again
    (None once it is deleted), `left` says whether the client went away."""
    quiet_since = time.monotonic()
    while True:
        order = await order_of(job.id) if seen >= 0 else []
        fresh = page_events(job, order, seen) if seen >= 0 else []
        for chunk in fresh:
            yield chunk
        if fresh:
            seen, quiet_since = len(order), time.monotonic()
        if job.finished and (seen < 0 or seen >= len(order)):
            yield event("end", END_ID, status_body(job, base_path))
            return
        if await left():
            return
        if time.monotonic() - quiet_since >= keepalive_s:
            yield b": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(poll_s)
        again = await current(job.id)
        if again is None:
            yield event("end", END_ID, {"id": job.id, "status": "deleted"})
            return
        job = again
