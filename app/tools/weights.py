"""Write or verify a model directory's weights.sha256.

    python -m app.tools.weights write /models/got-ocr2
    python -m app.tools.weights verify /models/got-ocr2 [--mode full|size]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.ops.weights import WeightsError, verify, write_manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["write", "verify"])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--mode", choices=["full", "size"], default="full")
    options = parser.parse_args(argv)
    try:
        if options.action == "write":
            print(f"wrote {write_manifest(options.model_dir)}")
        else:
            verify(options.model_dir, options.mode)
            print(f"{options.model_dir}: all files match ({options.mode})")
    except WeightsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
