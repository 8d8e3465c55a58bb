"""Weights integrity: model directories arrive on removable disks, and USB copies corrupt files.

`weights.sha256` lists every file of the model directory in sha256sum's format, after
`# size <bytes> <path>` comment lines, so that both `sha256sum -c weights.sha256` and
`python -m app.tools.weights verify DIR` check it. Write it where the weights were
known to be good; verify it where they arrive, and at every start-up.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

MANIFEST = "weights.sha256"
_CHUNK = 16 * 1024 * 1024


class WeightsError(RuntimeError):
    pass


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def model_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.rglob("*") if p.is_file() and p.name != MANIFEST and ".cache" not in p.parts)


def write_manifest(model_dir: Path) -> Path:
    model_dir = Path(model_dir)
    files = model_files(model_dir)
    if not files:
        raise WeightsError(f"{model_dir} holds no files")
    lines = [f"# written by `python -m app.tools.weights write`; check with `sha256sum -c {MANIFEST}`"]
    lines += [f"# size {p.stat().st_size} {p.relative_to(model_dir).as_posix()}" for p in files]
    lines += [f"{sha256_file(p)}  {p.relative_to(model_dir).as_posix()}" for p in files]
    target = model_dir / MANIFEST
    target.write_text("\n".join(lines) + "\n")
    return target


def read_manifest(model_dir: Path) -> tuple[dict[str, str], dict[str, int]]:
    path = Path(model_dir) / MANIFEST
    if not path.is_file():
        raise WeightsError(
            f"{path} is missing: write it where the weights are known to be good "
            f"(python -m app.tools.weights write {model_dir}), or set vlm.verify_weights: off"
        )
    hashes, sizes = {}, {}
    for line in path.read_text().splitlines():
        if line.startswith("# size "):
            _, _, size, name = line.split(" ", 3)
            sizes[name] = int(size)
        elif line.strip() and not line.startswith("#"):
            digest, name = line.split("  ", 1)
            hashes[name] = digest
    return hashes, sizes


def verify(model_dir: Path, mode: str = "full") -> None:
    """Raise WeightsError naming every missing, resized or corrupted file; mode is full, size or off."""
    if mode == "off":
        return
    model_dir = Path(model_dir)
    hashes, sizes = read_manifest(model_dir)
    problems = []
    for name, digest in hashes.items():
        path = model_dir / name
        if not path.is_file():
            problems.append(f"missing: {name}")
        elif name in sizes and path.stat().st_size != sizes[name]:
            problems.append(f"wrong size: {name} ({path.stat().st_size} bytes, expected {sizes[name]})")
        elif mode == "full" and sha256_file(path) != digest:
            problems.append(f"corrupted (sha256 mismatch): {name}")
    # A file nobody listed is refused too: trust_remote_code or a tokenizer could load it.
    for path in model_files(model_dir):
        name = path.relative_to(model_dir).as_posix()
        if name not in hashes:
            problems.append(f"not in the manifest: {name}")
    if problems:
        raise WeightsError(f"model directory {model_dir} failed verification: " + "; ".join(problems))


def marker_dir() -> Path:
    """Node-local and private to the user: where verified states are remembered."""
    return Path(os.environ.get("OCR_WEIGHTS_MARKER_DIR") or Path.home() / ".cache" / "ocr-weights-verified")


def _state_key(model_dir: Path, mode: str) -> str:
    """The manifest's bytes and every file's size and mtime: a copied-over file changes the key."""
    digest = hashlib.sha256(mode.encode() + b"\0" + (model_dir / MANIFEST).read_bytes())
    for path in model_files(model_dir):
        stat = path.stat()
        digest.update(f"{path.relative_to(model_dir).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def verify_once_per_node(model_dir: Path, mode: str = "full", markers: Path | None = None) -> bool:
    """verify(), but once per node for one state of the directory; True when this call did the hashing.

    Replicas starting together on a node take a file lock: the first hashes and leaves a
    marker, the others wait for it and find the marker, instead of all reading 7 GB at once.
    """
    if mode == "off":
        return False
    model_dir = Path(model_dir)
    read_manifest(model_dir)  # a missing manifest is named before anything else
    markers = Path(markers or marker_dir())
    markers.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(markers / "verify.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        marker = markers / f"{_state_key(model_dir, mode)}.ok"
        if marker.exists():
            return False
        verify(model_dir, mode)
        marker.write_text(f"{model_dir} verified ({mode}) at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        return True
