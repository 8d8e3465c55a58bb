#!/usr/bin/env bash
# The wheels load/gpu_bench.py --engine-only needs on the GPU test machine beyond its image (Python 3.12,
# torch, transformers 5.17, numpy, pillow: ../shared/PLATFORM-NOTES.md), downloaded here into .whl/
# (ignored by git) for a device call to carry: the settings' pydantic, accelerate for device_map, and
# NVML's bindings. About 3 MB. Usage: load/gpu_bench_wheels.sh [PYTHON_VERSION, default 3.12]
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-3.12}"
grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir -p .whl
platforms=()
for n in 28 27 17; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" --implementation cp \
  "${platforms[@]}" -d .whl \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 accelerate==1.16.0 psutil==7.2.2 nvidia-ml-py==13.615.71
ls -l .whl
