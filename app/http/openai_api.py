"""The OpenAI-compatible face of the service: `POST /v1/chat/completions` and `GET /v1/models`.

A chat request carries its document as an `image_url` part with a `data:` URL (the service
fetches nothing: it is offline); the document then takes the same path as an upload to
/v1/ocr (Preprocessor limits and sandbox, the engine, the Postprocessor), whatever the engine,
and the message content is the text /v1/ocr returns. What the request may set of the
generation (`max_tokens`, and vLLM's extensions `min_tokens`, `ignore_eos`, `logit_bias`)
travels with each page as a `Generation` (app/schemas.py); the bundled PP-OCR engine writes no
tokens and takes none of it.

Deliberate differences from OpenAI's API, documented in docs/api.md:
- the prompt is the deployment's (`vlm.prompt` / `vllm.prompt`): a request's text parts are
  accepted and not sent to the model, so one client cannot change what the fleet answers;
- decoding is greedy: `temperature` and `top_p` are accepted and have no effect; `n` must be 1;
- `stream: true` sends one content chunk per page, in page order, as each page is read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from typing import Any, Optional

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import BadRequest, NotFound, OCRServiceError, PayloadTooLarge, to_error
from app.http import error_boundary
from app.http.uploads import Upload
from app.schemas import Generation

OWNER = "offline-ocr-service"
# OpenAI clients branch on error.type; the status code says the rest.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "invalid_request_error", 415: "invalid_request_error",
                422: "invalid_request_error", 429: "rate_limit_error", 503: "service_unavailable_error"}


# A chat body is its document's data: URL and a little JSON around it. The JSON without its data: URLs
# is what json.loads and pydantic spend CPU and memory on (a 0.4 MB list of integers built 270 MB of
# objects and a 21.7 MB error), so it has a small cap of its own; the document is bounded apart from it.
MAX_JSON_BYTES = 64 * 1024
MAX_MESSAGES = 64
MAX_PARTS = 64  # content parts in one message
MAX_LOGIT_BIAS = 300  # entries: OpenAI's own cap; each costs the vlm engine work on every token
_DATA_URL = re.compile(rb'"data:[^",\\]{0,256},[A-Za-z0-9+/=\\]*"')


class ChatRequest(BaseModel):
    """The fields this service reads; any other field an OpenAI client sends is accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[dict] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    min_tokens: int = Field(0, ge=0)  # vLLM's extension
    ignore_eos: bool = False  # vLLM's extension
    logit_bias: Optional[dict[str, float]] = Field(None, max_length=MAX_LOGIT_BIAS)
    stream: bool = False
    stream_options: Optional[dict] = None
    n: int = 1

    def generation(self, token_cap: Optional[int]) -> Generation:
        """The request's knobs, checked against the engine's cap (None: the engine writes no tokens)."""
        if self.n != 1:
            raise BadRequest("Only n=1 is served: decoding is greedy, every choice would be the same.",
                             code="unsupported_parameter")
        max_tokens = self.max_completion_tokens or self.max_tokens
        if token_cap is not None and max_tokens is not None and max_tokens > token_cap:
            raise BadRequest(f"max_tokens={max_tokens} is more than this deployment's cap of {token_cap} tokens "
                             "per page.", code="max_tokens_too_large")
        if max_tokens is not None and self.min_tokens > max_tokens:
            raise BadRequest(f"min_tokens={self.min_tokens} is more than max_tokens={max_tokens}.",
                             code="invalid_parameter")
        try:
            bias = tuple(sorted((int(token), max(-100.0, min(100.0, value)))
                                for token, value in (self.logit_bias or {}).items()))
        except ValueError:
            raise BadRequest("logit_bias keys must be token ids.", code="invalid_parameter") from None
        return Generation(max_tokens=max_tokens, min_tokens=self.min_tokens, ignore_eos=self.ignore_eos,
                          logit_bias=bias)

    @property
    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))


def body_limit(max_upload_bytes: int) -> int:
    """The largest chat body: the upload limit as base64 (4/3), plus room for the messages' text."""
    return max_upload_bytes * 4 // 3 + 64 * 1024


def json_bytes(body: bytes) -> int:
    """The body's size less its data: URLs (a linear scan; the caller runs it off the event loop)."""
    return len(body) - sum(match.end() - match.start() for match in _DATA_URL.finditer(body))


def parse_chat(body: bytes, max_upload_bytes: int) -> tuple[ChatRequest, Upload]:
    """The request and its one document; 4xx errors name the first thing wrong. CPU-bound: the
    ingress runs it in a thread, so /healthz and other requests go on meanwhile."""
    if json_bytes(body) > MAX_JSON_BYTES:
        # 400, not 413: the body is within its limit; what is wrong is the request's shape.
        raise BadRequest(f"The request's JSON, less its data: URL, is over {MAX_JSON_BYTES} bytes: a chat "
                         "request carries one document and a few short messages.", code="request_too_large")
    try:
        chat = ChatRequest.model_validate(json.loads(body or b"null"))
    except (ValueError, ValidationError, RecursionError) as exc:  # RecursionError: JSON nested past any sense
        raise BadRequest(f"The request is not a valid chat completion request: {first_problem(exc)}",
                         code="malformed_request") from None
    parts = [_parts(message.get("content")) for message in chat.messages]
    if any(len(message_parts) > MAX_PARTS for message_parts in parts):
        raise BadRequest(f"A message has more than {MAX_PARTS} content parts.", code="malformed_request")
    urls = [part.get("image_url") for message, message_parts in zip(chat.messages, parts)
            if message.get("role") == "user" for part in message_parts if part.get("type") == "image_url"]
    if len(urls) != 1:
        raise BadRequest(f"Send exactly one image_url part in the user messages (got {len(urls)}): one "
                         "document per request.", code="missing_file" if not urls else "too_many_files")
    url = urls[0].get("url") if isinstance(urls[0], dict) else urls[0]
    return chat, _document(url if isinstance(url, str) else "", max_upload_bytes)


def first_problem(exc: Exception) -> str:
    """The first thing wrong, in a line: never pydantic's whole list (one per bad element)."""
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        return f"{where}: {error['msg']}"[:200] + (f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else "")
    return str(exc)[:200]


def _parts(content: Any) -> list[dict]:
    if isinstance(content, list):
        return [part for part in content if isinstance(part, dict)]
    return []  # a plain string: text only


def _document(url: str, max_upload_bytes: int) -> Upload:
    """A `data:<type>;base64,<bytes>` URL's document. Nothing else: the service fetches nothing."""
    if not url.startswith("data:"):
        raise BadRequest("image_url must be a data: URL (data:image/png;base64,...): this service is offline "
                         "and fetches nothing.", code="unsupported_image_url")
    header, _, payload = url[5:].partition(",")
    media_type, *params = header.split(";")
    if "base64" not in params:
        raise BadRequest("The data: URL must be base64 (data:<type>;base64,...).", code="unsupported_image_url")
    if len(payload) * 3 // 4 > max_upload_bytes:
        raise PayloadTooLarge(f"The document is larger than max_upload_bytes={max_upload_bytes}.",
                              code="upload_too_large")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("The data: URL's base64 does not decode.", code="malformed_request") from None
    if not data:
        raise BadRequest("The data: URL holds no document.", code="empty_file")
    return Upload(data, media_type or None, None, None)


def check_model(requested: str, engine: dict) -> str:
    """The served model's id; a request for another model is refused as OpenAI refuses it."""
    if requested not in (engine["version"], engine["name"]):
        raise NotFound(f"The model '{requested}' is not served here; GET /v1/models lists it: "
                       f"'{engine['version']}'.", code="model_not_found")
    return engine["version"]


def models_body(engine: dict, created: int) -> dict:
    return {"object": "list", "data": [{"id": engine["version"], "object": "model", "created": created,
                                        "owned_by": OWNER, "engine": engine["name"]}]}


def finish_reason(pages: list[dict]) -> str:
    """The document's: `length` if a page was cut at its cap, else the first page's that did not stop
    (`repetition`, `degenerate`), else `stop`."""
    reasons = [page["finish_reason"] for page in pages]
    if "length" in reasons:
        return "length"
    return next((reason for reason in reasons if reason != "stop"), "stop")


def usage(pages: list[dict]) -> dict:
    prompt = sum(page.get("prompt_tokens") or 0 for page in pages)
    completion = sum(page.get("generated_tokens") or 0 for page in pages)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def page_notes(pages: list[dict]) -> list[dict]:
    """What /v1/ocr says of each page beside its text, for clients that look (an extension field)."""
    return [{"page_number": page["page_number"], "valid": page["valid"], "finish_reason": page["finish_reason"],
             "notes": page["notes"], "generated_tokens": page.get("generated_tokens")} for page in pages]


def completion_body(completion_id: str, model: str, created: int, pages: list[dict]) -> dict:
    return {
        "id": completion_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "\n\n".join(p["text"] for p in pages)},
                     "finish_reason": finish_reason(pages), "logprobs": None}],
        "usage": usage(pages),
        "pages": page_notes(pages),
    }


def chunk(completion_id: str, model: str, created: int, delta: dict, finish: Optional[str] = None,
          usage_body: Optional[dict] = None) -> bytes:
    """One Server-Sent Event of a streamed completion."""
    body = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [] if usage_body else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
    if usage_body:
        body["usage"] = usage_body
    return f"data: {json.dumps(body)}\n\n".encode()


def stream_error(request_id: str, exc: BaseException) -> bytes:
    """A failure after the stream began (the status line is sent): an error event, as vLLM sends one."""
    error = to_error(exc, request_id)
    return f"data: {json.dumps(openai_error_body(error, request_id))}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def openai_error_body(error: OCRServiceError, request_id: str) -> dict:
    body = error.body()
    body["error"].update(request_id=request_id, type=_ERROR_TYPES.get(error.status, "server_error"), param=None)
    return body


def failed(request: Request, exc: BaseException) -> JSONResponse:
    """error_boundary.failed's answer, with the `type` and `param` OpenAI clients read beside code and message."""
    answer = error_boundary.failed(request, exc)
    body = json.loads(answer.body)
    body["error"].update(type=_ERROR_TYPES.get(answer.status_code, "server_error"), param=None)
    headers = {"Retry-After": answer.headers["retry-after"]} if "retry-after" in answer.headers else None
    return JSONResponse(body, status_code=answer.status_code, headers=headers)


def now() -> int:
    return int(time.time())
