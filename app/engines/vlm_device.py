"""The `vlm` engine's device decisions, kept apart from generation so that each can be tested
without a GPU: which device and dtype, how much GPU memory this replica may take, one warm-up
probe per GPU at a time, and what an out-of-memory error is.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import logging
import os
import tempfile
from pathlib import Path
from typing import Iterator, Optional

logger = logging.getLogger("ray.serve")

NATIVE_BF16 = (8, 0)  # Ampere and newer compute bf16 in hardware; older cards emulate it, slowly
# What a process holds on its GPU outside torch's allocator (CUDA context, kernels, library
# handles) where NVML cannot see the process: an estimate, about what CUDA 12-13 contexts take.
ESTIMATED_CONTEXT_BYTES = 600 * 2**20


class DeviceRefused(RuntimeError):
    """This model cannot run correctly as configured on this device; the message says the way out."""


def pick_device(requested: str) -> str:
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' was requested but torch sees no CUDA device in this replica")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def choose_dtype(requested: str, device: str, family: str, fp16_safe: bool,
                 capability: Optional[tuple[int, int]] = None, gpu_name: str = "this GPU") -> str:
    """'bfloat16', 'float16' or 'float32'; raises DeviceRefused where the answer would be wrong or slow.

    bf16 only where the card computes it natively (capability 8.0 and newer; torch's
    is_bf16_supported() also counts emulation, which is slow). fp16 only for families safe
    in it. A family that is neither on a card without bf16 is refused, naming the way out.
    """
    if device != "cuda":
        return "float32" if requested == "auto" else requested
    native_bf16 = capability is not None and tuple(capability) >= NATIVE_BF16
    card = f"{gpu_name} (compute capability {'.'.join(map(str, capability or ('?',)))})"
    if requested == "auto":
        if native_bf16:
            return "bfloat16"
        if fp16_safe:
            return "float16"
        raise DeviceRefused(
            f"{card} has no native bfloat16, and {family} is not safe in float16 (its activations overflow "
            "and it writes '!!!!'). Run it on a GPU of compute capability 8.0 or newer (A10, L4, A100, H100), "
            "or set vlm.dtype: float32 (correct, twice the memory, slower).")
    if requested == "bfloat16" and not native_bf16:
        raise DeviceRefused(f"{card} has no native bfloat16: emulated, it is many times slower. Set vlm.dtype: "
                            f"{'float16' if fp16_safe else 'float32'} or auto.")
    if requested == "float16" and not fp16_safe:
        raise DeviceRefused(f"{family} is not safe in float16 (its activations overflow). Set vlm.dtype: auto, "
                            "bfloat16 (capability 8.0 and newer) or float32.")
    return requested


def memory_fraction(share: float, total_bytes: int, outside_torch_bytes: int, margin_bytes: int) -> float:
    """The fraction of the card torch's allocator may take: this replica's share of the card, less
    what the process holds outside the allocator (which no cap limits), less a margin. Four
    replicas at 0.25 then fit on one card together with their contexts."""
    allowed = share * total_bytes - outside_torch_bytes - margin_bytes
    if allowed <= 0:
        raise DeviceRefused(
            f"a {share:g} share of a {total_bytes / 2**30:.1f} GiB GPU leaves nothing for the model once "
            f"{outside_torch_bytes / 2**20:.0f} MiB outside torch and a {margin_bytes / 2**20:.0f} MiB margin "
            "are set aside: give each OCR replica a larger ocr_num_gpus")
    return allowed / total_bytes


def outside_torch_bytes() -> tuple[int, str]:
    """(bytes this process holds on GPU 0 outside torch's allocator, how it was known): NVML's
    figure for this process less torch's reserved bytes, or an estimate where NVML cannot see
    the process (no driver library, another PID namespace)."""
    import torch

    torch.cuda.init()
    torch.ones(1, device="cuda")  # the context, and the allocator's first block, exist now
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_key())
        for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if process.pid == os.getpid() and process.usedGpuMemory:
                return max(0, process.usedGpuMemory - torch.cuda.memory_reserved()), "measured (NVML)"
    except Exception as exc:  # no NVML, or the UUID is not NVML's: the estimate below
        logger.info("CUDA context size not measurable through NVML (%s)", exc)
    return ESTIMATED_CONTEXT_BYTES, "estimated"


def cap_gpu_memory(share: float, margin_mib: int) -> dict:
    """Limit torch's allocator to this replica's part of GPU 0; what was decided, for the engine's info."""
    import torch

    outside, how = outside_torch_bytes()
    total = torch.cuda.get_device_properties(0).total_memory
    fraction = memory_fraction(share, total, outside, margin_mib * 2**20)
    torch.cuda.set_per_process_memory_fraction(fraction)
    logger.info("GPU memory: share %.3g of %.1f GiB, %.0f MiB outside torch (%s), margin %d MiB: fraction %.3f",
                share, total / 2**30, outside / 2**20, how, margin_mib, fraction)
    return {"memory_fraction": round(fraction, 4), "outside_torch_mib": round(outside / 2**20), "outside_torch": how}


def gpu_key() -> str:
    """GPU 0 of this process as NVML names it (GPU-<uuid>): the same card for every replica on it."""
    import torch

    uuid = getattr(torch.cuda.get_device_properties(0), "uuid", None)
    if uuid is not None:
        return f"GPU-{uuid}"
    return "cuda-visible-" + os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]


@contextlib.contextmanager
def one_probe_per_gpu(key: str, lock_dir: Optional[str] = None) -> Iterator[None]:
    """Held while a replica probes how big a batch fits: replicas sharing a card probe one after
    another, each against its neighbours' steady state rather than their probes' peaks."""
    directory = Path(lock_dir or tempfile.gettempdir())
    path = directory / f"ocr-gpu-probe-{''.join(c if c.isalnum() or c in '-_' else '_' for c in key)}.lock"
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_out_of_memory(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def free_device_memory(device: str) -> None:
    """After an out-of-memory error has been let go of: its frames (inputs, a partial KV cache) are
    unreachable only then, and may sit in reference cycles that only the collector breaks."""
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
