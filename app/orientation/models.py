"""The bundled PP-OCR models orientation uses, on one thread each: local files, nothing fetched.

- the 0/180 text-line direction classifier (ch_ppocr_mobile_v2.0_cls, 0.6 MB, shipped in the
  rapidocr wheel) says whether a crop of a line is upside down: the cheap first look;
- the engine's detector and recognizer (PP-OCRv6 det/rec) find line boxes on a thumbnail and
  read lines both ways up, for the pages the first look left unsure (app/orientation/finder.py).
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Optional

import numpy as np

CLS_HEIGHT, CLS_WIDTH = 48, 192  # the classifier's input, a line crop padded on the right
REC_HEIGHT = 48  # the recognizer's input height; its width follows the widest crop in the batch
DET_SIDE = 736  # the detector's thumbnail: enough to find receipt lines (load/orientation_probe.py)


def bundled_model(name: str) -> Path:
    import rapidocr

    path = Path(rapidocr.__file__).parent / "models" / name
    if not path.is_file():
        raise FileNotFoundError(f"bundled orientation model missing: {path}")
    return path


def _session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # preprocessing runs many pages side by side, each on one core
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


class LineDirection:
    """P(upside down) for crops of text lines, batched in one call."""

    def __init__(self, path: Optional[Path] = None):
        self._session = _session(path or bundled_model("ch_ppocr_mobile_v2.0_cls_mobile.onnx"))
        self._input = self._session.get_inputs()[0].name

    def upside_down(self, crops: list[np.ndarray]) -> np.ndarray:
        """One probability per HxWx3 uint8 RGB crop that the line in it is turned 180 degrees."""
        import cv2

        batch = np.zeros((len(crops), 3, CLS_HEIGHT, CLS_WIDTH), dtype=np.float32)
        for index, crop in enumerate(crops):
            height, width = crop.shape[:2]
            resized_w = min(CLS_WIDTH, max(1, math.ceil(CLS_HEIGHT * width / height)))
            resized = cv2.resize(crop[:, :, ::-1], (resized_w, CLS_HEIGHT), interpolation=cv2.INTER_LINEAR)  # BGR, as trained
            batch[index, :, :, :resized_w] = resized.transpose(2, 0, 1) / 127.5 - 1.0
        probabilities = self._session.run(None, {self._input: batch})[0]
        return probabilities[:, 1]


class LineReader:
    """The engine's own PP-OCR detector and recognizer, for the pages the first look left unsure:
    line boxes on a thumbnail, and how confidently a line reads one way up and the other."""

    def __init__(self, det_path: Optional[Path] = None, rec_path: Optional[Path] = None):
        from rapidocr import RapidOCR

        self._lock = threading.Lock()  # a RapidOCR call sets per-call flags on the shared object
        self._ocr = RapidOCR(params={
            "Global.log_level": "warning", "Global.use_cls": False,
            "Global.max_side_len": DET_SIDE, "Global.min_side_len": 1,
            "Det.limit_type": "max", "Det.limit_side_len": DET_SIDE,
            "Det.model_path": str(det_path or bundled_model("PP-OCRv6_det_small.onnx")),
            "Rec.model_path": str(rec_path or bundled_model("PP-OCRv6_rec_small.onnx")),
            "EngineConfig.onnxruntime.intra_op_num_threads": 1,
            "EngineConfig.onnxruntime.inter_op_num_threads": 1,
        })
        # The recognizer is asked directly: rapidocr pads every crop to at least 320 px wide, and
        # the crops read here are about 4 line-heights (~190 px), so that padding was 40% of the time.
        self._recognizer = _session(rec_path or bundled_model("PP-OCRv6_rec_small.onnx"))
        self._rec_input = self._recognizer.get_inputs()[0].name

    def boxes(self, rgb: np.ndarray) -> list[np.ndarray]:
        """Text-line quadrilaterals (4x2, pixels of `rgb`), found on a thumbnail of at most DET_SIDE."""
        with self._lock:
            found = self._ocr(np.ascontiguousarray(rgb[:, :, ::-1]), use_det=True, use_cls=False, use_rec=False)
        boxes = getattr(found, "boxes", None)
        return [] if boxes is None else [np.asarray(box, dtype=float) for box in boxes]

    def scores(self, crops: list[np.ndarray]) -> np.ndarray:
        """The recognizer's confidence in its reading of each RGB line crop: the mean probability of
        the characters its CTC output keeps (rapidocr's own score), 0 where it reads nothing."""
        import cv2

        widths = [max(8, math.ceil(REC_HEIGHT * crop.shape[1] / max(1, crop.shape[0]))) for crop in crops]
        batch = np.zeros((len(crops), 3, REC_HEIGHT, max(widths)), dtype=np.float32)
        for index, (crop, width) in enumerate(zip(crops, widths)):
            resized = cv2.resize(np.ascontiguousarray(crop[:, :, ::-1]), (width, REC_HEIGHT))  # BGR, as trained
            batch[index, :, :, :width] = resized.transpose(2, 0, 1) / 127.5 - 1.0
        probabilities = self._recognizer.run(None, {self._rec_input: batch})[0]  # N x steps x classes
        return np.array([_ctc_confidence(steps) for steps in probabilities])


def _ctc_confidence(steps: np.ndarray) -> float:
    """Mean top probability of the characters a greedy CTC decode keeps (class 0 is the blank)."""
    best = steps.argmax(axis=1)
    kept = best != 0
    kept[1:] &= best[1:] != best[:-1]
    return float(steps.max(axis=1)[kept].mean()) if kept.any() else 0.0
