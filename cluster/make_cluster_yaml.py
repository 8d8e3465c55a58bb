"""Write the on-prem Ray cluster launcher YAML from an inventory of hosts.

    python cluster/make_cluster_yaml.py cluster/inventory.example --image registry.local:5000/ocr:1.2.0 > cluster.yaml
    ray up cluster.yaml --no-config-cache   # from the head, inside the room

The inventory holds one host per line; the first is the head (or mark one `head`). The
image must already be on every node (loaded by verify-and-load.sh and pulled from the room's
registry), so `pull_before_run` is off and no setup command reaches a network.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

START_FLAGS = "--num-gpus=$(nvidia-smi -L | wc -l) --metrics-export-port=8080 --disable-usage-stats"
# Token authentication from the token file delivered to every node with the bundle (mode 0600,
# cluster/make-ray-token.sh), mounted read-only into the container; never baked into the image.
TOKEN_PATH = "/etc/ocr/secrets/ray_auth_token"
# Mutual TLS between nodes from the fleet's files (cluster/make-tls.sh), mounted read-only likewise.
TLS_DIR = "/etc/ocr/tls"
TLS_ENV = (f"RAY_USE_TLS=1 RAY_TLS_SERVER_CERT={TLS_DIR}/node.crt RAY_TLS_SERVER_KEY={TLS_DIR}/node.key "
           f"RAY_TLS_CA_CERT={TLS_DIR}/ca.crt")
AUTH_ENV = f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={TOKEN_PATH} {TLS_ENV} CUDA_DEVICE_ORDER=PCI_BUS_ID"


def read_inventory(path: Path) -> tuple[str, list[str]]:
    hosts, head = [], None
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        host, *marks = line.split()
        if "head" in marks:
            head = host
        hosts.append(host)
    if not hosts:
        raise ValueError(f"{path} lists no hosts")
    head = head or hosts[0]
    return head, [h for h in hosts if h != head]


def cluster_config(head: str, workers: list[str], image: str, ssh_user: str, ssh_key: str) -> dict:
    tag = image.rsplit(":", 1)[-1] if ":" in image.rsplit("/", 1)[-1] else ""
    if not tag or tag == "latest":
        raise ValueError(f"image '{image}' needs a version tag, never 'latest'")
    return {
        "cluster_name": "ocr",
        "provider": {"type": "local", "head_ip": head, "worker_ips": workers},
        "auth": {"ssh_user": ssh_user, "ssh_private_key": ssh_key},
        "max_workers": len(workers),
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 5,
        "docker": {
            "image": image,
            "container_name": "ocr",
            "pull_before_run": False,  # preloaded: nothing is fetched at start
            # --runtime=nvidia works on Docker engines too old to know --gpus.
            "run_options": ["--runtime=nvidia", "-e NVIDIA_VISIBLE_DEVICES=all", "--shm-size=16g",
                            "--ulimit nofile=65536:65536", "-v /models:/models:ro",
                            "-v /etc/ocr/secrets:/etc/ocr/secrets:ro", f"-v {TLS_DIR}:{TLS_DIR}:ro"],
        },
        "initialization_commands": [],
        "setup_commands": [],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        "head_start_ray_commands": [
            "ray stop",
            # The dashboard and job API on the head's loopback only: `serve deploy` runs on the head.
            f"{AUTH_ENV} ray start --head --port=6379 --dashboard-host=127.0.0.1 {START_FLAGS} "
            "--autoscaling-config=~/ray_bootstrap_config.yaml",
        ],
        "worker_start_ray_commands": [
            "ray stop",
            f"{AUTH_ENV} ray start --address=$RAY_HEAD_IP:6379 {START_FLAGS}",
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inventory", type=Path)
    parser.add_argument("--image", required=True, help="REGISTRY/NAME:VERSION, already on every node")
    parser.add_argument("--ssh-user", default="ocr")
    parser.add_argument("--ssh-key", default="~/.ssh/id_ed25519")
    options = parser.parse_args(argv)
    head, workers = read_inventory(options.inventory)
    config = cluster_config(head, workers, options.image, options.ssh_user, options.ssh_key)
    yaml.safe_dump(config, sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
