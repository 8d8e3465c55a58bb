"""Rotation finding on the devset, in-process (no service): every page turned 0/90/180/270.

    python load/orientation_probe.py

Prints, per page and angle, the rotation found, its confidence, which look settled it and the
CPU milliseconds it took, then per angle: pages found right, and mean/p95 cost. A diagnostic for
tuning app/orientation/finder.py; the benchmark through the service is load/orientation.py.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.orientation.finder import OrientationFinder  # noqa: E402
from app.orientation.geometry import turn  # noqa: E402
from load.common import DEFAULT_MANIFEST  # noqa: E402


def main() -> int:
    finder = OrientationFinder()
    manifest = Path(DEFAULT_MANIFEST)
    right, seen, cost = Counter(), Counter(), defaultdict(list)
    for line in manifest.read_text().splitlines():
        sample = json.loads(line)
        img = ImageOps.exif_transpose(Image.open(manifest.parent / sample["image"])).convert("RGB")
        img.thumbnail((2000, 2000))  # the engine's input budget
        upright = np.asarray(img)
        for angle in (0, 90, 180, 270):
            page = turn(upright, (360 - angle) % 360)  # uploaded so that `angle` clockwise makes it upright
            started = time.process_time()
            found = finder.find(page)
            ms = 1000 * (time.process_time() - started)
            seen[angle] += 1
            right[angle] += found.rotation == angle
            cost[angle].append(ms)
            print(f"{sample['image'][-30:]:30s} want={angle:3d} got={found.rotation:3d} "
                  f"conf={found.confidence:.2f} {found.look:5s} {ms:6.0f} ms", flush=True)
    for angle in (0, 90, 180, 270):
        spent = np.array(cost[angle])
        print(f"angle {angle:3d}: found {right[angle]}/{seen[angle]}, "
              f"cost mean {spent.mean():.0f} ms, p95 {np.percentile(spent, 95):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
