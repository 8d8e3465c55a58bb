"""Rotation finding on the devset, in-process (no service): every page turned 0/90/180/270.

    python load/orientation_probe.py

Prints, per page and angle, the rotation found, its confidence, which look settled it and the
CPU milliseconds it took, then per angle: pages found right, and mean/p95 cost. A diagnostic for
tuning app/orientation/finder.py; the benchmark through the service is load/orientation.py.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.orientation.finder import OrientationFinder  # noqa: E402
from app.orientation.geometry import turn  # noqa: E402
from load.common import DEFAULT_MANIFEST, load_devset, percentile  # noqa: E402
from load.orientation import engine_side, upright_pixels  # noqa: E402


def main() -> int:
    finder = OrientationFinder()
    side = engine_side()
    right, seen, cost = Counter(), Counter(), defaultdict(list)
    for sample in load_devset(Path(DEFAULT_MANIFEST)):
        upright = upright_pixels(sample, side)  # as load/orientation.py sends it
        for angle in (0, 90, 180, 270):
            page = turn(upright, (360 - angle) % 360)  # uploaded so that `angle` clockwise makes it upright
            started = time.process_time()
            found = finder.find(page)
            ms = 1000 * (time.process_time() - started)
            seen[angle] += 1
            right[angle] += found.rotation == angle
            cost[angle].append(ms)
            print(f"{sample.path.name[-30:]:30s} want={angle:3d} got={found.rotation:3d} "
                  f"conf={found.confidence:.2f} {found.look:5s} {ms:6.0f} ms", flush=True)
    for angle in (0, 90, 180, 270):
        spent = np.array(cost[angle])
        print(f"angle {angle:3d}: found {right[angle]}/{seen[angle]}, "
              f"cost mean {spent.mean():.0f} ms, p95 {percentile(list(spent), 0.95):.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
