#!/usr/bin/env bash
# Start this node's Ray process in the foreground (for systemd, which restarts it).
#
#   cluster/ray-node.sh head
#   cluster/ray-node.sh worker HEAD_IP
#
# GPUs are counted with nvidia-smi (0 without a driver); CPUs and memory are Ray's own
# detection. RAY_AUTH_MODE defaults to disabled for a closed network: set it to token and
# provide the token where the network is shared.
set -euo pipefail

role="${1:?usage: $0 head | worker HEAD_IP}"
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# Serve's proxy on this node drops request headers it would fail to decode (app/proxy_guard.py).
export RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=app.proxy_guard:middlewares
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus="$(nvidia-smi -L | wc -l)"
fi
resources="{\"ocr_node\": 1}"

case "$role" in
  head)
    exec ray start --head --block --port=6379 --dashboard-host=0.0.0.0 --num-gpus="$gpus" \
      --resources="$resources" --disable-usage-stats
    ;;
  worker)
    head_ip="${2:?worker needs HEAD_IP}"
    exec ray start --block --address="$head_ip:6379" --num-gpus="$gpus" --resources="$resources" \
      --disable-usage-stats
    ;;
  *)
    echo "unknown role '$role'" >&2
    exit 2
    ;;
esac
