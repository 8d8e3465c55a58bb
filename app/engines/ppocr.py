"""The bundled CPU engine: PP-OCRv6 det/rec ONNX models shipped inside the rapidocr wheel.

Measured on the devset (../shared/eval/devset, 22 images, 2 cores), see docs/engines.md "Engine choices":
- Direction classifier off: on it flipped long upright lines (SROIE receipt 037: CER 0.038 -> 0.063).
- Detector limit_type "max" at 2000 px instead of "min" at 736: the default upscaled a 1182x44
  text line to 19776x736 (2.3 s, CER 0.147); "max" keeps it native (0.37 s, CER 0.059), and the
  whole devset ran in 27 s instead of 57 s.
- In place of the classifier, a line read with low confidence is read again turned 180 degrees,
  and the more confident reading is kept: an upside-down line in an upright page then reads too,
  and upright lines are never turned on the classifier's word (whole pages are turned upright
  before the engine, by app/orientation).
- A Fraktur page (a request's `lang=deu-frak`, or found from the reading with `lang=auto`) is read
  again by Tesseract's Fraktur model and the better word of the two kept (app/engines/fraktur.py),
  where `tesseract.fraktur_pass` is on and Debian's traineddata are installed.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Optional

import numpy as np

from app.settings.engines import TesseractOptions
from app.engines.base import EngineInfo, EngineRuntime, InputBudget, OCREngine
from app.engines.word_boxes import words_by_share, words_from_parts
from app.schemas import EngineResult, TextLine
from app.synthetic import render_text_page

logger = logging.getLogger("ray.serve")

MAX_SIDE = 2000  # rapidocr's own Global.max_side_len: larger pages it would shrink anyway
TEXT_SCORE = 0.5  # rapidocr's default: readings below it are dropped (after the second reading)
REREAD_BELOW = 0.8  # a line read less confidently than this is read again, turned 180 degrees
FLIP_MARGIN = 0.05  # the turned reading must be this much more confident to replace the first


class PPOCREngine(OCREngine):
    input_budget = InputBudget(max_side=MAX_SIDE, max_pixels=MAX_SIDE * MAX_SIDE)

    options_key = "tesseract"  # the Fraktur pass's Tesseract (app/engines/fraktur.py)

    @classmethod
    def budget(cls, options: TesseractOptions, model_dir: Optional[str]) -> InputBudget:
        return cls.input_budget

    takes_lang = True  # infer(pages, langs=[...]): a request's `lang` (app/engines/fraktur.py)

    def __init__(self, options: TesseractOptions, runtime: EngineRuntime):
        import rapidocr
        from rapidocr._version import __version__ as rapidocr_version

        self._options = options
        self._threads = threads = runtime.threads
        self._det_path, self._rec_path = self._model_paths(runtime.model_dir, Path(rapidocr.__file__).parent)
        self._ocr = None
        self._fraktur = None
        self._fraktur_missing = "tesseract.fraktur_pass is off"
        if runtime.device == "cuda":
            logger.warning("ppocr runs on CPU through onnxruntime; device=cuda is ignored for this engine")
        self.info = EngineInfo(
            name="ppocr",
            version=f"rapidocr-{rapidocr_version}/PP-OCRv6-small",
            device="cpu",
            details={"threads": threads, "det_model": self._det_path.name, "rec_model": self._rec_path.name},
        )

    @staticmethod
    def _model_paths(model_dir: str | None, package_dir: Path) -> tuple[Path, Path]:
        """Explicit local files only, so rapidocr never reaches for its download path."""
        if model_dir:
            det, rec = Path(model_dir) / "det.onnx", Path(model_dir) / "rec.onnx"
        else:
            det = package_dir / "models" / "PP-OCRv6_det_small.onnx"
            rec = package_dir / "models" / "PP-OCRv6_rec_small.onnx"
        missing = [str(p) for p in (det, rec) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"ppocr model files missing: {', '.join(missing)}")
        return det, rec

    def load(self) -> None:
        from rapidocr import RapidOCR

        self._ocr = RapidOCR(
            params={
                "Global.log_level": "warning",
                "Global.use_cls": False,
                "Global.text_score": 0.0,  # every reading comes back; _read_page drops the weak ones
                "Global.return_word_box": True,  # word quads from the recogniser's own columns
                "Global.max_side_len": MAX_SIDE,
                "Det.limit_type": "max",
                "Det.limit_side_len": MAX_SIDE,
                "Det.model_path": str(self._det_path),
                "Rec.model_path": str(self._rec_path),
                "EngineConfig.onnxruntime.intra_op_num_threads": self._threads,
                "EngineConfig.onnxruntime.inter_op_num_threads": 1,
            }
        )
        if self._options.fraktur_pass == "on":
            self._load_fraktur()

    def _load_fraktur(self) -> None:
        """Tesseract's Fraktur model and the German word list; without them, PP-OCR reads Fraktur alone."""
        from app.engines.fraktur import FrakturPass

        try:
            self._fraktur = FrakturPass(self._options.tessdata_dir, self._threads)
        except (ImportError, OSError, RuntimeError, subprocess.CalledProcessError) as exc:  # OSError: a file or tool missing
            self._fraktur_missing = ("the Fraktur pass is unavailable on this server (Tesseract or its traineddata "
                                     "are not installed): read by PP-OCR alone")
            logger.warning("the Fraktur pass is unavailable (%s); Fraktur pages are read by PP-OCR alone", exc)
        self.info.details["fraktur_pass"] = self._fraktur is not None

    def warmup(self) -> None:
        result = self.infer([np.asarray(render_text_page())])[0]
        if not result.lines:
            raise RuntimeError("ppocr warm-up read no text from the synthetic page")

    def infer(self, pages: list[np.ndarray], langs: Optional[list] = None) -> list[EngineResult]:
        # rapidocr takes one image per call and batches text crops within it, so a batch of
        # pages is a loop here; the batcher still pays off by keeping the replica busy.
        return [self._read(page, lang) for page, lang in zip(pages, langs or [None] * len(pages))]

    def _read(self, page: np.ndarray, lang: Optional[str]) -> EngineResult:
        lines = self._read_page(page)
        if lang == "latin":
            return EngineResult(lines=lines)
        if self._fraktur is None:
            notes = [self._fraktur_missing] if lang == "deu-frak" else []
            return EngineResult(lines=lines, notes=notes)
        both = self._fraktur.apply(page, lines, lang)
        if both is not None:
            return EngineResult(lines=both, notes=["read as Fraktur by PP-OCR and Tesseract"])
        return EngineResult(lines=lines)

    def batch_limits(self) -> None:
        return None

    def _read_page(self, rgb: np.ndarray) -> list[TextLine]:
        if self._ocr is None:
            raise RuntimeError("engine not loaded")
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])  # rapidocr expects BGR
        result = self._ocr(bgr)
        if result.boxes is None or result.txts is None:
            return []
        parts = result.word_results if len(result.word_results or ()) == len(result.txts) else [()] * len(result.txts)
        lines = [
            TextLine(quad=np.asarray(box, dtype=float).tolist(), text=text, confidence=float(score),
                     words=words_from_parts(text, line_parts, box, float(score)))
            for box, text, score, line_parts in zip(result.boxes, result.txts, result.scores, parts)
        ]
        return [line for line in self._reread_upside_down(bgr, lines) if line.confidence >= TEXT_SCORE]

    def _reread_upside_down(self, bgr: np.ndarray, lines: list[TextLine]) -> list[TextLine]:
        """Each doubtful line read again turned 180 degrees; the more confident reading stays."""
        from rapidocr.utils.process_img import get_rotate_crop_image

        doubtful = [index for index, line in enumerate(lines) if line.confidence < REREAD_BELOW]
        if not doubtful:
            return lines
        crops = [np.ascontiguousarray(get_rotate_crop_image(bgr, np.asarray(lines[index].quad, dtype=np.float32))[::-1, ::-1])
                 for index in doubtful]
        again = self._ocr.recognize_txt(crops)
        for index, text, score in zip(doubtful, again.txts, again.scores):
            if score > lines[index].confidence + FLIP_MARGIN:
                quad = lines[index].quad
                # read turned, the line's text starts at the quad's bottom-right corner
                upside_down = np.asarray(quad)[[2, 3, 0, 1]]
                lines[index] = TextLine(quad=quad, text=text, confidence=float(score),
                                        words=words_by_share(upside_down, text, float(score)))
        return lines

    def check_health(self) -> None:
        if self._ocr is None:
            raise RuntimeError("ppocr engine is not loaded")
