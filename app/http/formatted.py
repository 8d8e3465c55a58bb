"""A finished document's answer in the format the client asked for (`?format=`, app/formats).

json is the body as it is; markdown, hOCR and ALTO are written from the page results (off the event
loop); a searchable PDF also needs the document itself, and is written by a Preprocessor replica in its
decoder sandbox (app/formats/searchable_pdf.py).
"""

from __future__ import annotations

import asyncio
from typing import Optional

from fastapi.responses import JSONResponse, Response
from ray.serve.handle import DeploymentHandle

from app.formats import MEDIA_TYPES
from app.formats.alto import render_alto
from app.formats.hocr import render_hocr
from app.formats.markdown import document_markdown


async def formatted(form: str, body: dict, preprocessor: DeploymentHandle, request_id: str,
                    document: Optional[bytes] = None, content_type: Optional[str] = None,
                    filename: Optional[str] = None, status_code: int = 200) -> Response:
    engine = (body.get("engine") or {}).get("name", "")
    if form == "json":
        return JSONResponse(body, status_code=status_code)
    if form == "markdown":
        content = document_markdown(body).encode()
    elif form == "hocr":
        content = await asyncio.to_thread(render_hocr, body["pages"], engine)
    elif form == "alto":
        content = await asyncio.to_thread(render_alto, body["pages"], engine, filename or "")
    else:
        content = await preprocessor.searchable_pdf.remote(request_id, document, content_type, body["pages"])
    return Response(content, status_code=status_code, media_type=MEDIA_TYPES[form])
