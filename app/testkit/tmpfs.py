"""A small tmpfs for tests that fill a disk: mounted on a fresh directory, unmounted on exit.

Mounting needs root (CAP_SYS_ADMIN), as CI's machine has; elsewhere it fails with the reason.
"""

from __future__ import annotations

import subprocess
import tempfile
from contextlib import contextmanager


@contextmanager
def small_tmpfs(size_bytes: int):
    directory = tempfile.mkdtemp(prefix="ocr-tmpfs-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0700", "tmpfs", directory],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        raise RuntimeError(f"cannot mount a tmpfs on {directory} (root needed): {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", directory], check=False)
