"""A small picture of a page as uploaded, for people to look at (the `/ui` page's `page_images=true`).

The payload's image is the page at engine resolution, turned upright; the boxes of a result are in the
page's coordinates as uploaded. The picture is turned back, so a box scaled by the picture's size over
the page's `width` x `height` lands on its text. Encoded in a thread: JPEG work is CPU work.
"""

from __future__ import annotations

import asyncio
import base64
import io

import numpy as np
from PIL import Image

from app.schemas import PagePayload

MAX_SIDE = 1600  # enough to read a line's box on a screen; about 100-300 KB a page
JPEG_QUALITY = 80


def _encode(image: np.ndarray, rotation: int) -> dict:
    as_uploaded = np.rot90(image, k=(rotation // 90) % 4)  # counter-clockwise: undoes the clockwise turn
    picture = Image.fromarray(np.ascontiguousarray(as_uploaded))
    picture.thumbnail((MAX_SIDE, MAX_SIDE))
    out = io.BytesIO()
    picture.convert("RGB").save(out, "JPEG", quality=JPEG_QUALITY)
    return {"data_url": "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii"),
            "width": picture.width, "height": picture.height}


async def page_preview(page: PagePayload) -> dict | None:
    """The page's picture as a JPEG data URL with its size; None for a page with no pixels."""
    if page.image is None:
        return None
    return await asyncio.to_thread(_encode, page.image, page.rotation)
