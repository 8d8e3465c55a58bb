#!/usr/bin/env bash
# Write a new Ray cluster token, mode 0600, to carry to every node with the bundle:
#   cluster/make-ray-token.sh /media/disk/ocr-1.2.0/ray_auth_token
# then on each node: install -m 0600 -o ocr ray_auth_token /etc/ocr/secrets/ray_auth_token
set -euo pipefail
out="${1:?usage: $0 OUTPUT_FILE}"
if [[ -e "$out" ]]; then
  echo "error: $out exists; a cluster keeps one token (delete it first to rotate)" >&2
  exit 1
fi
umask 077
python3 -c 'import secrets; print(secrets.token_hex(32))' > "$out"
chmod 600 "$out"
echo "wrote $out (mode 0600)"
