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


def gpu_snapshot(index: int = 0) -> Optional[dict]:
    """Memory used/total (MiB) and utilisation (%) of one GPU, or None without NVML."""
    nvml = _init()
    if nvml is None:
        return None
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        utilisation = nvml.nvmlDeviceGetUtilizationRates(handle)
        return {
            "index": index,
            "memory_used_mib": round(memory.used / 2**20),
            "memory_total_mib": round(memory.total / 2**20),
            "utilisation_pct": utilisation.gpu,
        }
    except Exception as exc:
        logger.warning("NVML query failed: %s", exc)
        return None
