"""Layout regions of a page: PP-Layout CDLA (a PicoDet detector) on onnxruntime.

The page is squeezed to the model's 608x800 input (as it was trained), and its four heads' class
scores and distance distributions are decoded into boxes (generalised focal loss: the expected
distance over `reg_max + 1` bins, times the stride), kept above `min_score`, and thinned by
non-maximum suppression per class. Boxes come back in pixels of the image given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

LABELS = ("text", "title", "figure", "figure_caption", "table", "table_caption", "header", "footer",
          "reference", "equation")
_INPUT_H, _INPUT_W = 800, 608
_STRIDES = (8, 16, 32, 64)
_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
_CANDIDATES = 1000  # per head, by best class score, before suppression
_IOU = 0.5


@dataclass(frozen=True)
class Region:
    type: str
    box: tuple  # (x0, y0, x1, y1), pixels of the image the model was given
    score: float


class LayoutModel:
    def __init__(self, path: Path, threads: int = 1, min_score: float = 0.5):
        from app.structure.models import session

        self._session = session(path, threads)
        self._input = self._session.get_inputs()[0].name
        self._min_score = min_score

    def regions(self, rgb: np.ndarray) -> list[Region]:
        import cv2

        height, width = rgb.shape[:2]
        bgr = np.ascontiguousarray(rgb[:, :, ::-1])  # as the model was trained (OpenCV's order)
        resized = cv2.resize(bgr, (_INPUT_W, _INPUT_H)).astype(np.float32) / 255.0
        batch = ((resized - _MEAN) / _STD).transpose(2, 0, 1)[None].astype(np.float32)
        outputs = self._session.run(None, {self._input: batch})
        boxes, scores = _decode(outputs)
        found = []
        for label, keep in _per_class_nms(boxes, scores, self._min_score):
            for index in keep:
                x0, y0, x1, y1 = boxes[index]
                box = (float(np.clip(x0 * width / _INPUT_W, 0, width)), float(np.clip(y0 * height / _INPUT_H, 0, height)),
                       float(np.clip(x1 * width / _INPUT_W, 0, width)), float(np.clip(y1 * height / _INPUT_H, 0, height)))
                if box[2] > box[0] and box[3] > box[1]:
                    found.append(Region(LABELS[label], box, float(scores[index, label])))
        return found


def _decode(outputs: list) -> tuple[np.ndarray, np.ndarray]:
    """(boxes N x 4 in input pixels, class scores N x classes) over every head's best candidates."""
    heads = len(outputs) // 2
    all_boxes, all_scores = [], []
    for stride, score, distribution in zip(_STRIDES, outputs[:heads], outputs[heads:]):
        score, distribution = score[0], distribution[0]
        bins = distribution.shape[-1] // 4
        rows, cols = int(np.ceil(_INPUT_H / stride)), int(np.ceil(_INPUT_W / stride))
        xs, ys = np.meshgrid(np.arange(cols), np.arange(rows))
        centres = np.stack([(xs.ravel() + 0.5) * stride, (ys.ravel() + 0.5) * stride] * 2, axis=1)
        logits = distribution.reshape(-1, bins)
        weights = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        distances = (weights @ np.arange(bins, dtype=np.float32)).reshape(-1, 4) * stride
        best = np.argsort(score.max(axis=1))[::-1][:_CANDIDATES]
        all_boxes.append(centres[best] + np.array([-1, -1, 1, 1]) * distances[best])
        all_scores.append(score[best])
    return np.concatenate(all_boxes), np.concatenate(all_scores)


def _per_class_nms(boxes: np.ndarray, scores: np.ndarray, min_score: float):
    for label in range(scores.shape[1]):
        candidates = np.nonzero(scores[:, label] > min_score)[0]
        if len(candidates):
            yield label, nms(boxes[candidates], scores[candidates, label], _IOU, candidates)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float, ids: np.ndarray) -> list[int]:
    order = list(np.argsort(scores)[::-1])
    keep = []
    areas = (boxes[:, 2] - boxes[:, 0]).clip(0) * (boxes[:, 3] - boxes[:, 1]).clip(0)
    while order:
        first, order = order[0], order[1:]
        keep.append(int(ids[first]))
        if not order:
            break
        rest = np.array(order)
        w = (np.minimum(boxes[first, 2], boxes[rest, 2]) - np.maximum(boxes[first, 0], boxes[rest, 0])).clip(0)
        h = (np.minimum(boxes[first, 3], boxes[rest, 3]) - np.maximum(boxes[first, 1], boxes[rest, 1])).clip(0)
        overlap = w * h / np.maximum(areas[first] + areas[rest] - w * h, 1e-9)
        order = [o for o, v in zip(order, overlap) if v <= iou]
    return keep
