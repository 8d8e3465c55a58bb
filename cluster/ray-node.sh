#!/usr/bin/env bash
# Start this node's Ray process in the foreground (for systemd, which restarts it).
#
#   cluster/ray-node.sh head
#   cluster/ray-node.sh worker HEAD_IP
#
# Closed by default: Ray token authentication (cluster/ray-auth.sh; no token, no start), mutual
# TLS between Ray's processes and nodes (cluster/ray-tls.sh; no certificate, no start) and the
# dashboard and job API on the head's 127.0.0.1 only (reach them on the head or through an SSH
# tunnel; RAY_DASHBOARD_HOST=0.0.0.0 opts in). Every port is fixed, so a firewall can list them
# (cluster/README.md, "Ports"); OCR_* variables move them, for several nodes on one machine.
# GPUs are counted with nvidia-smi (0 without a driver) unless OCR_NUM_GPUS says otherwise.
set -euo pipefail

role="${1:?usage: $0 head | worker HEAD_IP}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=cluster/ray-auth.sh
source "$here/ray-auth.sh"
ray_token_auth
# shellcheck source=cluster/ray-tls.sh
source "$here/ray-tls.sh"
ray_tls

export RAY_USAGE_STATS_ENABLED=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# NVML and CUDA then count GPUs in the same order, so telemetry reads the replica's own GPU.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
# Serve's proxy on this node drops request headers it would fail to decode (app/http/proxy_guard.py).
export RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=app.http.proxy_guard:middlewares

gpus="${OCR_NUM_GPUS:-}"
if [[ -z "$gpus" ]]; then
  gpus=0
  if command -v nvidia-smi >/dev/null 2>&1; then
    gpus="$(nvidia-smi -L | wc -l)"
  fi
fi
gcs_port="${OCR_GCS_PORT:-6379}"
ports=(
  "--node-manager-port=${OCR_NODE_MANAGER_PORT:-6380}"
  "--object-manager-port=${OCR_OBJECT_MANAGER_PORT:-6381}"
  "--runtime-env-agent-port=${OCR_RUNTIME_ENV_AGENT_PORT:-6382}"
  "--dashboard-agent-grpc-port=${OCR_DASHBOARD_AGENT_GRPC_PORT:-6383}"
  "--dashboard-agent-listen-port=${OCR_DASHBOARD_AGENT_PORT:-52365}"
  "--metrics-export-port=${OCR_METRICS_PORT:-8080}"
  "--min-worker-port=${OCR_MIN_WORKER_PORT:-10002}"
  "--max-worker-port=${OCR_MAX_WORKER_PORT:-10999}"
)
common=(--block "--num-gpus=$gpus" "--resources={\"ocr_node\": 1}" --disable-usage-stats "${ports[@]}")
if [[ -n "${OCR_NUM_CPUS:-}" ]]; then
  common+=("--num-cpus=$OCR_NUM_CPUS")
fi
if [[ -n "${OCR_RAY_TEMP_DIR:-}" ]]; then
  common+=("--temp-dir=$OCR_RAY_TEMP_DIR")
fi

case "$role" in
  head)
    exec ray start --head "--port=$gcs_port" \
      "--dashboard-host=${RAY_DASHBOARD_HOST:-127.0.0.1}" "--dashboard-port=${OCR_DASHBOARD_PORT:-8265}" \
      "--ray-client-server-port=${OCR_CLIENT_PORT:-10001}" "${common[@]}"
    ;;
  worker)
    head_ip="${2:?worker needs HEAD_IP}"
    exec ray start "--address=$head_ip:$gcs_port" "${common[@]}"
    ;;
  *)
    echo "unknown role '$role'" >&2
    exit 2
    ;;
esac
