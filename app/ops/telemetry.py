"""GPU telemetry through NVML, where there is one. Absent driver or library: None, logged once."""

from __future__ import annotations

import logging
from typing import Optional

logger = logging.getLogger("ray.serve")
_nvml = None
_nvml_failed = False


def _init():
    global _nvml, _nvml_failed
    if _nvml is None and not _nvml_failed:
        try:
            import pynvml

            pynvml.nvmlInit()
            _nvml = pynvml
        except Exception as exc:  # NVMLError_LibraryNotFound on machines without a driver
            _nvml_failed = True
            logger.info("GPU telemetry off: %s", exc)
    return _nvml


def assigned_gpu_id() -> Optional[str]:
    """The first GPU Ray assigned to this worker, as Ray names it: a UUID or a physical index."""
    try:
        import ray

        ids = ray.get_runtime_context().get_accelerator_ids().get("GPU") or []
    except Exception:  # outside a Ray worker
        return None
    return str(ids[0]) if ids else None


def nvml_handle(nvml, gpu_id: str):
    """NVML's handle of the GPU Ray named. NVML ignores CUDA_VISIBLE_DEVICES, so index 0 inside a
    replica is not this replica's GPU: a UUID (GPU-..., MIG-...) is looked up as such, an index as
    the physical index it is on the node (the nodes set CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML's order)."""
    if gpu_id.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(gpu_id)
    return nvml.nvmlDeviceGetHandleByIndex(int(gpu_id))


def gpu_snapshot(gpu_id: Optional[str], nvml=None) -> Optional[dict]:
    """Memory used/total (MiB) and utilisation (%) of the GPU `gpu_id`, or None without NVML or GPU."""
    nvml = nvml or _init()
    if nvml is None or gpu_id is None:
        return None
    try:
        handle = nvml_handle(nvml, gpu_id)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        utilisation = nvml.nvmlDeviceGetUtilizationRates(handle)
        return {
            "gpu_id": gpu_id,
            "memory_used_mib": round(memory.used / 2**20),
            "memory_total_mib": round(memory.total / 2**20),
            "utilisation_pct": utilisation.gpu,
        }
    except Exception as exc:
        logger.warning("NVML query of GPU %s failed: %s", gpu_id, exc)
        return None
