#!/usr/bin/env bash
# One entrypoint, three roles:
#   standalone            Ray and the service in this container (one node)
#   head                  the Ray head; deploys serve_config.yaml once the head is up
#   worker HEAD_ADDRESS   joins the head at HEAD_ADDRESS (host:6379)
# GPUs are detected with nvidia-smi; RAY_AUTH_MODE defaults to disabled (closed network).
set -euo pipefail

role="${1:-standalone}"
config="${OCR_SERVE_CONFIG:-/etc/ocr/serve_config.yaml}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"

gpus() {
  if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L | wc -l; else echo 0; fi
}

case "$role" in
  standalone)
    exec python -m app --host 0.0.0.0 --port 8000 --config "$config" --num-gpus "$(gpus)"
    ;;
  head)
    ray start --head --port=6379 --dashboard-host=0.0.0.0 --num-gpus="$(gpus)" --disable-usage-stats
    serve deploy "$config"
    exec tail -f /dev/null
    ;;
  worker)
    address="${2:?worker needs the head address, host:6379}"
    exec ray start --address="$address" --num-gpus="$(gpus)" --disable-usage-stats --block
    ;;
  *)
    echo "unknown role '$role': use standalone, head or worker HEAD_ADDRESS" >&2
    exit 2
    ;;
esac
