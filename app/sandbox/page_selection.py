"""Which pages of a document a request names: '1-3,7' and '5-', within the page limit. Pure."""

from __future__ import annotations

from typing import Optional

from app.errors import BadRequest, PayloadTooLarge


def parse_page_spec(spec: Optional[str], page_count: int, max_pages: int) -> list[int]:
    """'1-3,7' -> [0, 1, 2, 6]; '5-' is page 5 to the end (0-based, in document order, no repeats), within the page limit.

    The count is checked before any list is built: a file may claim 2**31 frames, and a
    selection may name a range of a billion pages.
    """
    if not spec or not spec.strip():
        ranges = [(0, page_count)] if page_count > 0 else []
    else:
        if len(spec) > 1000:
            raise BadRequest("The page selection is longer than 1000 characters.", code="invalid_pages")
        ranges = _merge([_parse_range(part.strip(), page_count) for part in spec.split(",")])
    selected = sum(end - start for start, end in ranges)
    if selected > max_pages:
        raise PayloadTooLarge(
            f"The document has {selected} pages to process; the limit is max_pages={max_pages}. "
            "Select fewer with the 'pages' parameter.",
            code="too_many_pages",
        )
    return [index for start, end in ranges for index in range(start, end)]


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Half-open ranges sorted and joined, so that repeats count once."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _parse_range(part: str, page_count: int) -> tuple[int, int]:
    try:
        first, dash, last = part.partition("-")
        start = int(first)
        end = int(last) if last else (page_count if dash else start)  # "5-" runs to the last page
    except ValueError:
        raise BadRequest(f"Bad page selection '{part[:40]}': use e.g. '1-3,7'.", code="invalid_pages") from None
    if start < 1 or end < start or end > page_count:
        raise BadRequest(
            f"Page selection '{part[:40]}' is outside the document's {page_count} page(s).", code="invalid_pages"
        )
    return start - 1, end
