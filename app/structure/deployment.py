"""The StructureModel deployment: a page's layout regions and its tables' structure, on the CPU.

It is fed the same page as the OCR replicas, at the same time (app/pipeline/page_pipeline.py), and the
Postprocessor joins the two: a GPU engine's pages pay no GPU time and no latency for layout, only this
deployment's CPU, and the CPU engine's pages wait for whichever finishes last. It reads pixels only: the
text of a table's cells comes from the page's own OCR words, joined in the Postprocessor, never from a
second OCR pass over the crop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

import numpy as np
from ray import serve

from app.ops import metrics
from app.schemas import PagePayload, PageStructure
from app.structure.gutters import in_columns
from app.settings.structure import StructureSettings
from app.ops.replica import harden_process

logger = logging.getLogger("ray.serve")
_TABLE_MARGIN = 0.02  # of the page's longer side around a table region: SLANet wants the table's edges in view


class StructureReader:
    """The two models, loaded from the pinned files; pure of Ray (load/ measures it in process)."""

    def __init__(self, settings: StructureSettings):
        from app.structure.layout_model import LayoutModel
        from app.structure.models import LAYOUT, TABLE, model_path
        from app.structure.table_model import TableModel

        self._settings = settings
        self._layout = LayoutModel(model_path(LAYOUT, settings.model_dir), settings.threads, settings.min_region_score)
        self._table = TableModel(model_path(TABLE, settings.model_dir), settings.threads) if settings.tables else None

    def read(self, image: np.ndarray) -> PageStructure:
        rgb = np.repeat(image[:, :, None], 3, axis=2) if image.ndim == 2 else image
        started = time.perf_counter()
        regions = [(r.type, r.box, r.score) for r in self._layout.regions(rgb)]
        layout_ms = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        tables, candidates, whole_page = {}, [], None
        if self._table is not None:
            candidates = self._candidates(rgb, regions)
            if not regions and in_columns(_gray(rgb)):  # nothing found: the image may be a table, cropped tight
                whole_page = len(regions)
                regions.append(("text", (0.0, 0.0, float(rgb.shape[1]), float(rgb.shape[0])), 0.0))
                candidates.append(whole_page)
            for index, (kind, box, _) in enumerate(regions):
                if kind == "table" or index in candidates:
                    tables[index] = self._table_cells(rgb, box)
        return PageStructure(regions, tables, {"layout": round(layout_ms, 1),
                                               "tables": round((time.perf_counter() - started) * 1000, 1)},
                             candidates=candidates, whole_page=whole_page)

    def _candidates(self, rgb: np.ndarray, regions: list) -> list:
        """Text and figure regions that stand in columns (a tight crop of a table reads as either): the table
        model reads them too (app/structure/gutters.py)."""
        found = []
        for index, (kind, box, _) in enumerate(regions):
            x0, y0, x1, y1 = (int(v) for v in box)
            if kind in ("text", "figure") and in_columns(_gray(rgb[y0:y1, x0:x1])):
                found.append(index)
        return found

    def _table_cells(self, rgb: np.ndarray, box: tuple) -> tuple:
        height, width = rgb.shape[:2]
        margin = _TABLE_MARGIN * max(height, width)
        x0, y0 = int(max(0, box[0] - margin)), int(max(0, box[1] - margin))
        x1, y1 = int(min(width, box[2] + margin)), int(min(height, box[3] + margin))
        found = self._table.structure(rgb[y0:y1, x0:x1])
        cells = [(c[0] + x0, c[1] + y0, c[2] + x0, c[3] + y0) for c in found.cells]
        return found.tokens, cells


def _gray(rgb: np.ndarray) -> np.ndarray:
    return rgb.mean(axis=2) if rgb.ndim == 3 else rgb


@serve.deployment  # its options: app/serve/builder.py (defaults) and serve_config.yaml (the fleet)
class StructureModel:
    """Bound the `structure` settings only. Without the model files it still starts, logs why, and every
    page it is asked about says so in its notes (read as lines, nothing lost)."""

    def __init__(self, settings: StructureSettings):
        harden_process()  # first: nothing below may leave a secret readable through /proc
        self._reader: Optional[StructureReader] = None
        self._missing: Optional[str] = None
        try:
            self._reader = StructureReader(settings)
        except Exception as exc:  # missing wheel, wrong digest: the service reads lines as before
            self._missing = f"layout regions unavailable: {exc}"
            logger.warning("StructureModel: %s", self._missing)

    async def analyse(self, page: PagePayload) -> PageStructure:
        if self._reader is None:
            return PageStructure(note="layout regions were not read: the structure models are not installed")
        try:
            found = await asyncio.to_thread(self._reader.read, page.image)
        except Exception as exc:  # noqa: BLE001 - a page the models choke on is still read, as lines
            logger.warning("StructureModel: request %s page %d: %s", page.request_id, page.page_number,
                           type(exc).__name__)
            return PageStructure(note=f"layout regions were not read ({type(exc).__name__})")
        for stage, ms in found.timings_ms.items():
            metrics.stage(f"structure_{stage}", ms / 1000)
        return found
