"""A guard against generation loops: a VLM that repeats a phrase until the token cap.

A loop is a unit of text (1 to `max_unit` characters) repeated back to back at the
end of the output, covering at least `min_chars` characters and `min_repeats` copies.
The output is cut after the unit's first copy, and the page marked invalid.
"""

from __future__ import annotations

from typing import Optional


def find_loop(text: str, max_unit: int = 200, min_repeats: int = 4, min_chars: int = 48) -> Optional[int]:
    """Index at which a trailing loop's second copy starts, or None if the text ends cleanly."""
    body = text.rstrip()
    if len(body) < min_chars:
        return None
    best: Optional[int] = None
    for unit in range(1, min(max_unit, len(body) // min_repeats) + 1):
        pattern = body[-unit:]
        start = len(body) - unit
        while start - unit >= 0 and body[start - unit:start] == pattern:
            start -= unit
        while start > 0 and body[start - 1] == body[start - 1 + unit]:
            start -= 1  # the loop may begin part-way through a unit: align to where it really starts
        copies = (len(body) - start) // unit
        if copies >= min_repeats and copies * unit >= min_chars:
            cut = start + unit
            best = cut if best is None else min(best, cut)
    return best


def cut_loop(text: str, **limits) -> tuple[str, bool]:
    """(text with any trailing loop removed, whether one was found)."""
    cut = find_loop(text, **limits)
    if cut is None:
        return text, False
    return text[:cut].rstrip(), True
