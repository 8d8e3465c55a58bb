"""Waiting for something to come up, without hiding a failed assertion."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

# What "not up yet" looks like: refused or reset connections, a half-written answer. An
# AssertionError, or any other error, is a real failure and leaves at once.
NOT_UP_YET: tuple = (OSError, ValueError, KeyError)


def wait_for(check: Callable[[], T], timeout_s: float, what: str, not_up_yet: tuple = NOT_UP_YET,
             poll_s: float = 1.0) -> T:
    """The first truthy `check()` within `timeout_s`; TimeoutError naming `what` and the last error."""
    try:
        import httpx

        not_up_yet = not_up_yet + (httpx.HTTPError,)
    except ImportError:  # the GPU machine's image has no httpx: nothing of it to wait out there
        pass
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except not_up_yet as exc:
            last = exc
        time.sleep(poll_s)
    raise TimeoutError(f"{what} not ready after {timeout_s}s ({last})")
