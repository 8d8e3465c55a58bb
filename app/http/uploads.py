"""Reading an upload without trusting it: a bounded body, then multipart or a raw image/PDF body."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Optional

from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import ClientDisconnect, Request

from app.engines.fraktur import parse_lang
from app.errors import BadRequest, PayloadTooLarge
from app.orientation.upright import parse_mode
from app.schemas import Generation, PageOptions
from app.sandbox.pdf_text import parse_pdf_text
from app.settings.structure import parse_structure


@dataclass
class Upload:
    data: bytes
    content_type: Optional[str]  # as declared by the client, checked against the bytes later
    filename: Optional[str]
    pages: Optional[str]
    orientation: Optional[str] = None  # auto, off or an angle (app/orientation/upright.py); None: the settings'
    lang: Optional[str] = None  # auto, deu-frak or latin (app/engines/fraktur.py); None: auto
    structure: Optional[str] = None  # auto or off (app/structure); None: the settings'
    pdf_text: Optional[str] = None  # auto, ocr or layer (app/sandbox/pdf_text.py); None: the settings'
    page_images: bool = False  # /v1/ocr only: each page's picture in its result (app/pipeline/page_preview.py)

    def page_options(self, generation: Optional[Generation] = None) -> PageOptions:
        return PageOptions(orientation=self.orientation, lang=self.lang, structure=self.structure,
                           pdf_text=self.pdf_text, generation=generation)


# A request's options, each with its parser: query parameters, or multipart form fields (which win).
_OPTIONS = {"orientation": parse_mode, "lang": parse_lang, "structure": parse_structure, "pdf_text": parse_pdf_text}


async def read_upload(request: Request, max_bytes: int, idle_timeout_s: Optional[float] = None) -> Upload:
    body = await read_bounded(request, max_bytes, idle_timeout_s)
    content_type = request.headers.get("content-type", "")
    pages = request.query_params.get("pages")
    options = {name: parse(request.query_params.get(name)) for name, parse in _OPTIONS.items()}
    if content_type.lower().startswith("multipart/form-data"):
        return await _from_multipart(request, body, pages, options)
    if not body:
        raise BadRequest("The request has no body: send multipart field 'file' or the raw document.", code="empty_file")
    return Upload(body, content_type or None, None, pages, **options)


async def read_bounded(request: Request, max_bytes: int, idle_timeout_s: Optional[float] = None) -> bytes:
    """Refuse an oversized body from its Content-Length, or as soon as the stream passes the limit.
    With `idle_timeout_s`, a body that sends nothing for that long raises asyncio.TimeoutError."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(int(declared), max_bytes)
    chunks, size = [], 0
    stream = request.stream().__aiter__()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(stream.__anext__(), idle_timeout_s)
            except StopAsyncIteration:
                break
            size += len(chunk)
            if size > max_bytes:
                raise _too_large(size, max_bytes)
            chunks.append(chunk)
    except ClientDisconnect:
        raise BadRequest("The client disconnected before the upload finished.", code="incomplete_upload") from None
    return b"".join(chunks)


def query_flag(request: Request, name: str) -> bool:
    """A true/false query parameter (absent: false); anything else is 400 `invalid_<name>`."""
    value = request.query_params.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise BadRequest(f"{name} must be true or false.", code=f"invalid_{name}")
    return value in ("true", "1")


def _too_large(size: int, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The upload is {size} bytes or more; the limit is max_upload_bytes={max_bytes}.", code="upload_too_large"
    )


async def _from_multipart(request: Request, body: bytes, pages: Optional[str], options: dict) -> Upload:
    """Form fields `pages` and the options win over the query's."""
    async def replay():
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, receive=replay).form(max_files=1, max_fields=12)
    except (HTTPException, MultiPartException, ValueError, KeyError) as exc:
        detail = getattr(exc, "detail", None) or getattr(exc, "message", None) or exc
        raise BadRequest(f"Malformed multipart body: {detail}", code="malformed_request") from None
    try:
        file = form.get("file")
        if not isinstance(file, UploadFile):
            raise BadRequest("Multipart field 'file' is missing or is not a file.", code="missing_file")
        data = await file.read()
        form_pages = form.get("pages")
        for name, parse in _OPTIONS.items():
            if isinstance(form.get(name), str):
                options[name] = parse(form.get(name))
        return Upload(data=data, content_type=file.content_type, filename=file.filename,
                      pages=form_pages if isinstance(form_pages, str) else pages, **options)
    finally:
        await form.close()
