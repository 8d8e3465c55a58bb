#!/usr/bin/env bash
# Pack an image for removable disks: docker save | gzip -1, split into chunks that fit
# FAT32/exFAT, with sha256 digests of every chunk and of the whole.
#
#   cluster/bundle.sh IMAGE:VERSION OUT_DIR [--chunk-mb 2000]
#
# Versioned tags only: 'latest' drifts between nodes and is refused.
set -euo pipefail

image=""; out=""; chunk_mb=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --chunk-mb) chunk_mb="$2"; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) if [ -z "$image" ]; then image="$1"; else out="$1"; fi; shift ;;
  esac
done
[ -n "$image" ] && [ -n "$out" ] || { echo "usage: $0 IMAGE:VERSION OUT_DIR [--chunk-mb N]" >&2; exit 2; }
tag="${image##*:}"
if [ "$tag" = "$image" ] || [ "$tag" = "latest" ] || [[ "$tag" == */* ]]; then
  echo "error: '$image' needs an explicit version tag (never 'latest')" >&2
  exit 2
fi

name="$(basename "${image%:*}")-$tag"
mkdir -p "$out"
docker save "$image" | gzip -1 | tee >(sha256sum | cut -d' ' -f1 > "$out/$name.tar.gz.sha256") \
  | split -b "${chunk_mb}M" -d -a 3 - "$out/$name.tar.gz.part-"
wait  # the digest of the whole is written by the process substitution
(cd "$out" && sha256sum -- "$name".tar.gz.part-* > SHA256SUMS)
{
  echo "image=$image"
  echo "name=$name"
  echo "whole_sha256=$(cat "$out/$name.tar.gz.sha256")"
  echo "parts=$(find "$out" -maxdepth 1 -name "$name.tar.gz.part-*" | wc -l)"
} > "$out/MANIFEST"
echo "bundled $image into $out: $(grep -c . "$out/SHA256SUMS") chunk(s) of at most ${chunk_mb} MB"
