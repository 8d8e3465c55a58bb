#!/usr/bin/env bash
# One entrypoint, three roles:
#   standalone            Ray and the service in this container (one node)
#   head                  the Ray head; deploys serve_config.yaml once the head is up
#   worker HEAD_ADDRESS   joins the head at HEAD_ADDRESS (host:6379)
# Closed by default: Ray token authentication (cluster/ray-auth.sh: the token file is mounted,
# mode 0600, or RAY_AUTH_TOKEN comes from a Secret), mutual TLS between nodes and https on the API
# (cluster/ray-tls.sh: the fleet's files mounted at /etc/ocr/tls), the dashboard on 127.0.0.1, and API keys on
# /v1/* from the keys file that serve_config.yaml names (auth.api_keys_file, mounted read-only).
set -euo pipefail

role="${1:-standalone}"
config="${OCR_SERVE_CONFIG:-/etc/ocr/serve_config.yaml}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/ray-auth.sh
source "$here/ray-auth.sh"
# shellcheck source=cluster/ray-tls.sh
source "$here/ray-tls.sh"
export CUDA_DEVICE_ORDER=PCI_BUS_ID
tls_dir="${OCR_TLS_DIR:-/etc/ocr/tls}"

gpus() {
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L | wc -l; else echo 0; fi
}

case "$role" in
  standalone)
    # One node, one Ray instance inside this process (on loopback): Ray makes its own token for it.
    # The API is https with the node's certificate.
    export RAY_AUTH_MODE=token
    exec python -m app --host 0.0.0.0 --port 8000 --config "$config" --num-gpus "$(gpus)" \
      --tls-cert "$tls_dir/node.crt" --tls-key "$tls_dir/node.key"
    ;;
  head)
    ray_token_auth
    ray_tls
    ray start --head --port=6379 "--dashboard-host=${RAY_DASHBOARD_HOST:-127.0.0.1}" --num-gpus="$(gpus)" \
      --metrics-export-port=8080 --disable-usage-stats
    # Workers may join later: the builder waits gpu_wait_timeout_s for the GPUs the config needs.
    serve deploy "$config"
    exec tail -f /dev/null
    ;;
  worker)
    ray_token_auth
    ray_tls
    address="${2:?worker needs the head address, host:6379}"
    exec ray start --address="$address" --num-gpus="$(gpus)" --metrics-export-port=8080 --disable-usage-stats --block
    ;;
  *)
    echo "unknown role '$role': use standalone, head or worker HEAD_ADDRESS" >&2
    exit 2
    ;;
esac
