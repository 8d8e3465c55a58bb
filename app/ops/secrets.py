"""Secrets come from files only, and a file that others may read is not a secret any more.

Every key the service reads (callback signing keys; the API keys file has its own reader) goes
through `read_secret`, at start-up, so a replica refuses to start on a key that leaked by its mode
or that is empty (an empty HMAC key signs with nothing). cluster/preflight.py runs the same check.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class SecretFileError(ValueError):
    pass


def secret_file_problem(path: str) -> str | None:
    """Why this file cannot hold a secret (None: it can)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file"
    if info.st_mode & 0o077:
        return f"{path} has mode {info.st_mode & 0o777:o}: others may read it; chmod 600 it"
    if not Path(path).read_bytes().strip():
        return f"{path} is empty"
    return None


def read_secret(path: str, what: str) -> bytes:
    """The file's secret (surrounding whitespace dropped), or SecretFileError naming `what` and why not."""
    problem = secret_file_problem(path)
    if problem:
        raise SecretFileError(f"{what}: {problem}")
    return Path(path).read_bytes().strip()


def private_ray_token(home: Path | None = None) -> Path:
    """~/.ray/auth_token, readable by its owner only. Ray writes it with the process's umask (0644 on most
    machines: every local user could then reach the cluster); made here first, as Ray makes it (64 hex
    characters), with mode 0600, and an existing one is tightened. Ray reads it instead of writing one."""
    import secrets as random

    path = (home or Path.home()) / ".ray" / "auth_token"
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        return path
    with os.fdopen(descriptor, "w") as handle:
        handle.write(random.token_hex(32))
    return path
