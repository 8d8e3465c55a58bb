"""Tesseract through tesserocr, with Debian's traineddata: an engine behind the protocol (its
own lines and words, in boxes), and the German word list inside `deu.traineddata`.

Offline: every model is a local file under `tesseract.tessdata_dir` (default Debian's
/usr/share/tesseract-ocr/5/tessdata, from tesseract-ocr-script-frak, -deu and -eng; .ci/run and the
Dockerfile install them). tesserocr's wheel carries libtesseract itself. The word list is unpacked
from deu.traineddata once, at load, with Tesseract's own combine_tessdata and dawg2wordlist
(Debian's tesseract-ocr package, which the language packages depend on).
"""

from __future__ import annotations

import queue
import subprocess
import tempfile
import unicodedata
from pathlib import Path
from typing import Optional

import numpy as np

from app.settings.engines import TesseractOptions
from app.engines.base import EngineInfo, EngineRuntime, InputBudget, OCREngine
from app.engines.word_boxes import TextWord
from app.schemas import EngineResult, TextLine
from app.synthetic import render_text_page

MAX_SIDE = 4000  # Tesseract reads at the scan's own resolution; larger pages are shrunk to this
# The engine gets pixels without the file's DPI; Tesseract then assumes 70 and takes a 300 dpi page's
# specks for text (the devset's Kant page: CER 0.147 at the assumed 70, 0.101 told 300).
SOURCE_DPI = 300


PACKAGED_TESSDATA = ("/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata")


def tessdata_dir(configured: Optional[str]) -> str:
    """`tesseract.tessdata_dir`, or the first directory Debian's or Ubuntu's packages fill (5 on Debian
    13 and 12, 4.00 on Ubuntu 22.04, the image's base), or the first of them where none is there yet."""
    if configured:
        return configured
    return next((path for path in PACKAGED_TESSDATA if Path(path).is_dir()), PACKAGED_TESSDATA[0])


def _quad(box) -> list:
    x0, y0, x1, y1 = box
    return [[x0, y0], [x1, y0], [x1, y1], [x0, y1]]


class TesseractReader:
    """Reads whole pages with one model (`lang`, e.g. "Fraktur" or "eng"); one API per thread reading at once."""

    def __init__(self, tessdata_dir: str, lang: str, threads: int):
        import tesserocr

        for model in lang.split("+"):
            path = Path(tessdata_dir) / f"{model}.traineddata"
            if not path.is_file():
                raise FileNotFoundError(f"Tesseract model missing: {path} (Debian: tesseract-ocr-script-frak, "
                                        "tesseract-ocr-deu, tesseract-ocr-eng; docs/engines.md)")
        self.lang = lang
        self._apis: queue.Queue = queue.Queue()
        for _ in range(max(1, threads)):
            self._apis.put(tesserocr.PyTessBaseAPI(path=str(Path(tessdata_dir)) + "/", lang=lang,
                                                   oem=tesserocr.OEM.LSTM_ONLY))

    def read(self, rgb: np.ndarray) -> list[TextLine]:
        """The page's text lines, each with its words, in Tesseract's own layout and order."""
        import tesserocr
        from PIL import Image

        api = self._apis.get()
        try:
            api.SetImage(Image.fromarray(np.ascontiguousarray(rgb)).convert("L"))
            api.SetSourceResolution(SOURCE_DPI)
            # A strip a line or two high is one block of text: Tesseract's page layout finds nothing in
            # some. SINGLE_BLOCK, not SINGLE_LINE: read as one line, a strip of two lines came back empty
            # (a blackletter strip of two lines, 1400x182: 243 edits of 243, 5 as a block; the devset's ten
            # line images read alike either way).
            strip = rgb.shape[0] < 3 * 64 and rgb.shape[1] > 4 * rgb.shape[0]
            api.SetPageSegMode(tesserocr.PSM.SINGLE_BLOCK if strip else tesserocr.PSM.AUTO)
            api.Recognize()
            return _lines(api.GetIterator())
        finally:
            self._apis.put(api)


def _lines(iterator) -> list[TextLine]:
    import tesserocr

    line_level, word_level = tesserocr.RIL.TEXTLINE, tesserocr.RIL.WORD
    lines: list[TextLine] = []
    if iterator is None or iterator.Empty(word_level):
        return lines
    words: list[TextWord] = []
    while True:
        if iterator.IsAtBeginningOf(line_level):
            words = []
            box = iterator.BoundingBox(line_level)
            text = (iterator.GetUTF8Text(line_level) or "").strip()
            if box and text:
                lines.append(TextLine(quad=_quad(box), text=text, confidence=iterator.Confidence(line_level) / 100,
                                      words=words))
        word_box = iterator.BoundingBox(word_level)
        word = (iterator.GetUTF8Text(word_level) or "").strip()
        if word_box and word:
            words.append(TextWord(_quad(word_box), word, iterator.Confidence(word_level) / 100))
        if not iterator.Next(word_level):
            return lines


class TesseractEngine(OCREngine):
    """`engine: tesseract`: Tesseract alone, with `tesseract.model` (Fraktur by default)."""

    input_budget = InputBudget(max_side=MAX_SIDE, max_pixels=MAX_SIDE * MAX_SIDE)
    options_key = "tesseract"

    @classmethod
    def budget(cls, options: TesseractOptions, model_dir: Optional[str]) -> InputBudget:
        return cls.input_budget

    def __init__(self, options: TesseractOptions, runtime: EngineRuntime):
        import tesserocr

        self._options = options
        self._tessdata = tessdata_dir(self._options.tessdata_dir)
        self._threads = threads = runtime.threads
        self._reader = None
        self.info = EngineInfo(name="tesseract", version=f"tesserocr-{tesserocr.__version__}/{self._options.model}",
                               device="cpu", details={"threads": threads, "tessdata_dir": self._tessdata})

    def load(self) -> None:
        self._reader = TesseractReader(self._tessdata, self._options.model, self._threads)

    def warmup(self) -> None:
        if not self.infer([np.asarray(render_text_page())])[0].lines:
            raise RuntimeError("tesseract warm-up read no text from the synthetic page")

    def infer(self, pages: list[np.ndarray]) -> list[EngineResult]:
        return [EngineResult(lines=self._reader.read(page)) for page in pages]

    def batch_limits(self) -> None:
        return None

    def check_health(self) -> None:
        if self._reader is None:
            raise RuntimeError("tesseract engine is not loaded")


PUNCTUATION = ".,;:!?()[]{}\"'’‘‚„“”«»-—_<>|"


def plain_word(word: str) -> str:
    """A word as the word list spells it: NFKC, long s as s, without the punctuation around it."""
    return unicodedata.normalize("NFKC", word).replace("ſ", "s").strip(PUNCTUATION)


class WordList:
    """The words of a traineddata's dictionary (its lstm-word-dawg): a word, or a misreading?"""

    def __init__(self, tessdata_dir: str, language: str = "deu"):
        source = Path(tessdata_dir) / f"{language}.traineddata"
        if not source.is_file():
            raise FileNotFoundError(f"Tesseract language missing: {source} (Debian: tesseract-ocr-{language})")
        with tempfile.TemporaryDirectory() as scratch:
            prefix = str(Path(scratch) / language) + "."
            subprocess.run(["combine_tessdata", "-u", str(source), prefix], check=True, capture_output=True)
            listing = Path(scratch) / "words.txt"
            subprocess.run(["dawg2wordlist", prefix + "lstm-unicharset", prefix + "lstm-word-dawg", str(listing)],
                           check=True, capture_output=True)
            self.words = frozenset(listing.read_text(encoding="utf-8").split())
        if not self.words:
            raise RuntimeError(f"no words in {source}")

    def knows(self, word: str) -> bool:
        plain = plain_word(word)
        return bool(plain) and (plain in self.words or plain.lower() in self.words or plain.capitalize() in self.words)
