#!/usr/bin/env bash
# Check a bundle from cluster/bundle.sh, load it and push it to the room's registry.
#
#   cluster/verify-and-load.sh BUNDLE_DIR REGISTRY_HOST[:PORT]
#
# Every chunk is checked against SHA256SUMS and the joined stream against the whole digest;
# any missing or corrupted chunk stops everything before docker load. The image is pushed
# under its version tag, never 'latest'.
set -euo pipefail

bundle="${1:?usage: $0 BUNDLE_DIR REGISTRY}"
registry="${2:?usage: $0 BUNDLE_DIR REGISTRY}"
manifest="$bundle/MANIFEST"
[ -f "$manifest" ] || { echo "error: $manifest missing: not a bundle" >&2; exit 1; }
image="$(sed -n 's/^image=//p' "$manifest")"
name="$(sed -n 's/^name=//p' "$manifest")"
whole="$(sed -n 's/^whole_sha256=//p' "$manifest")"
parts="$(sed -n 's/^parts=//p' "$manifest")"

listed="$(grep -c . "$bundle/SHA256SUMS")"
if [ "$listed" != "$parts" ]; then
  echo "error: SHA256SUMS lists $listed chunk(s), MANIFEST says $parts" >&2
  exit 1
fi
if ! (cd "$bundle" && sha256sum --check --strict --quiet SHA256SUMS); then
  echo "error: chunk digests do not match (above): copy the bundle again" >&2
  exit 1
fi
joined="$(cat "$bundle/$name".tar.gz.part-* | sha256sum | cut -d' ' -f1)"
if [ "$joined" != "$whole" ]; then
  echo "error: joined chunks give sha256 $joined, expected $whole (chunk missing or out of order)" >&2
  exit 1
fi
echo "all $parts chunk(s) verified"

cat "$bundle/$name".tar.gz.part-* | gunzip | docker load
tag="${image##*:}"
target="$registry/$(basename "${image%:*}"):$tag"
docker tag "$image" "$target"
docker push "$target"
echo "loaded and pushed $target"
