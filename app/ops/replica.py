"""What a replica process asks of its surroundings: its share of the node, and freed heap back to the OS."""

from __future__ import annotations

import ray


def replica_share(resource: str, default: float) -> float:
    """This replica's reserved amount of a resource ("CPU", "GPU"), as Ray assigned it."""
    try:
        return float(ray.get_runtime_context().get_assigned_resources().get(resource, default))
    except Exception:  # outside a Ray worker
        return default


def _libc_malloc_trim():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_MALLOC_TRIM = _libc_malloc_trim()


def release_freed_memory() -> None:
    """Give freed heap back to the OS after a batch (glibc only; elsewhere a no-op).

    Pages of many sizes leave glibc's heap holding the high-water mark of the largest
    batch seen so far: RSS grew 13-18% from request 500 to 3,000 in the soak, with no
    live objects behind it. A trim costs about a millisecond against a batch's seconds.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
