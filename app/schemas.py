"""What travels between deployments.

Plain dataclasses of arrays, numbers and strings: no PIL objects. A page image is its
raw uint8 pixels at engine size, which Ray passes through its object store (pickle 5,
out of band: the OCR replica reads it without a copy) and which needs no encoding in the
preprocessor nor decoding in the OCR replica (load/cpu_cost.py, docs/measurements.md "CPU cost per page").
A raw A4 page is 2-9 MB: with RAY_SERVE_THROUGHPUT_OPTIMIZED=1, Serve sends it over gRPC,
whose 4 MiB cap RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH must then raise (docs/operations.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np


@dataclass(frozen=True)
class Generation:
    """What a request asks of a generating engine for its pages (the OpenAI API's knobs,
    app/http/openai_api.py); left unset, the engine's own settings apply. The bundled PP-OCR
    engine writes no tokens and takes none of these."""

    max_tokens: Optional[int] = None  # at most the engine's own cap (vllm.max_tokens, vlm.max_new_tokens)
    min_tokens: int = 0  # end tokens are held back until the page has written this many
    ignore_eos: bool = False  # write exactly max_tokens: nothing ends the page early, the loop guard included
    logit_bias: tuple = ()  # ((token id, bias), ...) added to the model's scores at every step

    @classmethod
    def exactly(cls, tokens: int) -> "Generation":
        """A page that writes `tokens` tokens whatever its weights say (benchmarks, tests)."""
        return cls(max_tokens=tokens, min_tokens=tokens, ignore_eos=True)


@dataclass(frozen=True)
class PageOptions:
    """A request's (or a job's) options for its pages, travelling together from the ingress to every stage:
    the Preprocessor reads orientation and pdf_text, the OCR replica lang and generation, the page's stages
    structure. None everywhere: the settings' own."""

    orientation: Optional[str] = None  # auto, off or an angle (app/orientation/upright.py)
    lang: Optional[str] = None  # auto, deu-frak or latin (app/engines/fraktur.py); None: auto
    structure: Optional[str] = None  # auto or off (app/structure)
    pdf_text: Optional[str] = None  # auto, ocr or layer (app/sandbox/pdf_text.py)
    generation: Optional[Generation] = None  # a generating engine's knobs (the OpenAI API's max_tokens...)


@dataclass
class PagePayload:
    """One page, ready for the engine: the preprocessor's output, the OCR model's input."""

    request_id: str
    index: int  # 0-based position in the response
    page_number: int  # 1-based page (or frame) number in the source document
    image: Optional[np.ndarray]  # uint8, HxW (grey) or HxWx3 (RGB), at engine resolution; None once read
    width: int  # engine-resolution size, of the page as turned upright
    height: int
    source_width: int  # the coordinate space of returned boxes: the page as uploaded, before any turn
    source_height: int
    scale: float  # engine pixels per source pixel (<= 1)
    dpi: Optional[float] = None  # set for rasterised PDF pages
    rotation: int = 0  # clockwise degrees the preprocessor turned the page (app/orientation)
    rotation_confidence: Optional[float] = None  # the finder's confidence; None where no finder ran
    rotation_note: Optional[str] = None  # why a page was read as uploaded though a turn was found (mixed, unsure)
    timings_ms: dict = field(default_factory=dict)
    options: PageOptions = field(default_factory=PageOptions)  # its request's options
    text_layer: Optional[list] = None  # list[TextLine] from the PDF's own text (app/sandbox/pdf_text.py): no OCR
    text_source: str = "ocr"  # "ocr", or "pdf_text" where the page was read from its text layer
    text_note: Optional[str] = None  # why a PDF page with a text layer was OCR'd all the same

    @property
    def pixels(self) -> int:
        return self.width * self.height


@dataclass
class TextLine:
    """One detected text region: a quadrilateral in engine pixels, its text and score."""

    quad: list  # [[x, y]] * 4, clockwise from top-left
    text: str
    confidence: float
    words: list = field(default_factory=list)  # list[TextWord] (app/engines/word_boxes.py): its text's tokens


@dataclass
class EngineResult:
    """What an engine read on one page."""

    lines: list = field(default_factory=list)  # list[TextLine]: detected regions, for engines that locate text
    markdown: Optional[str] = None  # the engine's own Markdown, for VLMs that write it
    finish_reason: str = "stop"  # "stop": the engine ended the page itself; "length": cut at the token cap
    valid: bool = True  # False when the output was truncated or a guard cut a repetition loop
    notes: list = field(default_factory=list)  # why a page is not valid, for the client
    generated_tokens: Optional[int] = None  # a VLM's tokens for the page, its end token included
    prompt_tokens: Optional[int] = None  # the prompt's tokens, image tokens included, where the engine says


@dataclass
class PageOCR:
    """The OCR model's output for one page, handed on to the postprocessor."""

    page: PagePayload
    result: EngineResult
    batch_size: int  # pages in the engine call that produced this result
    batch_pixels: int
    timings_ms: dict = field(default_factory=dict)


@dataclass
class PageStructure:
    """What the StructureModel found on a page (app/structure/deployment.py), in engine pixels of the page
    as turned upright, like the engine's lines."""

    regions: list = field(default_factory=list)  # [(type, (x0, y0, x1, y1), score)]
    tables: dict = field(default_factory=dict)  # region index -> (structure tokens, cell boxes)
    timings_ms: dict = field(default_factory=dict)  # layout, tables
    note: Optional[str] = None  # why a page has no regions (the models are not installed)
    candidates: list = field(default_factory=list)  # text regions read as tables too: kept where the lines agree
    whole_page: Optional[int] = None  # a region added for a page with none, as a table candidate: else dropped
