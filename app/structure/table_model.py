"""A table's structure: SLANet (PP-Structure's table model) on onnxruntime.

The crop is scaled so that its longer side is 488 and padded to 488x488; the model writes the
table as HTML structure tokens (`<tr>`, `<td></td>`, `<td`, ` colspan="2"`, `>`, `</td>`, ...)
and, for each cell token, the cell's box as four corners normalised to the crop. Loaded as the
`PPSTRUCTURE_EN` model type does: its boxes are relative to the crop itself, not to the padded
input (the `SLANETPLUS` rescaling scrambles this model's cells).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

_SIDE = 488
_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
CELL_TOKENS = ("<td>", "<td", "<td></td>")  # the tokens that open a cell and carry its box


@dataclass
class TableStructure:
    tokens: list  # HTML structure tokens between <table> and </table>
    cells: list  # one (x0, y0, x1, y1) in crop pixels per cell token, in token order
    score: float  # the mean probability of the tokens written


class TableModel:
    def __init__(self, path: Path, threads: int = 1):
        from app.structure.models import session

        self._session = session(path, threads)
        self._input = self._session.get_inputs()[0].name
        vocabulary = self._session.get_modelmeta().custom_metadata_map["character"].splitlines()
        if "<td></td>" not in vocabulary:
            vocabulary.append("<td></td>")
        if "<td>" in vocabulary:
            vocabulary.remove("<td>")
        self._vocabulary = ["sos"] + vocabulary + ["eos"]

    def structure(self, rgb: np.ndarray) -> TableStructure:
        import cv2

        height, width = rgb.shape[:2]
        ratio = _SIDE / max(height, width)
        resized = cv2.resize(np.ascontiguousarray(rgb[:, :, ::-1]),  # BGR, as trained
                             (max(1, int(width * ratio)), max(1, int(height * ratio))))
        padded = np.zeros((_SIDE, _SIDE, 3), dtype=np.float32)
        padded[:resized.shape[0], :resized.shape[1]] = (resized.astype(np.float32) / 255.0 - _MEAN) / _STD
        boxes, probabilities = self._session.run(None, {self._input: padded.transpose(2, 0, 1)[None]})
        return self._decode(boxes[0], probabilities[0], width, height)

    def _decode(self, boxes: np.ndarray, probabilities: np.ndarray, width: int, height: int) -> TableStructure:
        end = len(self._vocabulary) - 1
        tokens, cells, scores = [], [], []
        for step, index in enumerate(probabilities.argmax(axis=1)):
            if step > 0 and index == end:
                break
            if index in (0, end):
                continue
            token = self._vocabulary[index]
            if token in CELL_TOKENS:
                xs, ys = boxes[step][0::2] * width, boxes[step][1::2] * height
                cells.append((float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max())))
            tokens.append(token)
            scores.append(float(probabilities[step, index]))
        return TableStructure(tokens, cells, float(np.mean(scores)) if scores else 0.0)
