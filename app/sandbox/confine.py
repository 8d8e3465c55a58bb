"""What the kernel lets an unprivileged process give up, given up by a decoder before it reads a byte.

A decoder parses strangers' files with C libraries (PDFium, libjpeg, libtiff, qpdf); an exploit in
one runs as the replica's user. Rlimits (worker.py) bound its memory and time. Here the rest:

- Landlock (Linux 5.13+, where enabled): the filesystem is read-only and only where code lives (the
  Python installation, the packages, `app/`, system libraries and fonts); nothing else can be opened
  at all: not /proc (the replica's environment), not ~/.ray (the cluster token), not the keys file.
  From ABI 4, no TCP bind or connect; from ABI 6, no signal to and no abstract socket of any process
  outside the decoder.
- seccomp (through libseccomp, Debian's libseccomp2): no new process (fork, vfork, clone without
  CLONE_THREAD, clone3), no exec, no socket of any family, no ptrace or cross-process memory access,
  no io_uring (it would run those calls around the filter), no namespaces, BPF or keyrings.
- RLIMIT_NPROC 0: no new process or thread, even by a way the filter did not foresee.

Each layer is applied where the kernel offers it; `confine` says which are in force, the
Preprocessor reports it (/v1/info `sandbox`), and a replica logs a layer that is missing.
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import sys
from pathlib import Path

# -- Landlock (include/uapi/linux/landlock.h); its three calls have one number on every architecture.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_RULE_PATH_BENEATH = 1
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FILE_ONLY = _EXECUTE | _WRITE_FILE | _READ_FILE | (1 << 14) | (1 << 15)  # rights a rule on a file may hold
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1

# -- seccomp, through libseccomp
_ACT_ALLOW = 0x7FFF0000
_CLONE_THREAD = 0x00010000
_CMP_MASKED_EQ = 7
DENIED_SYSCALLS = ("fork", "vfork", "execve", "execveat", "socket", "socketpair", "connect", "bind", "listen",
                   "ptrace", "process_vm_readv", "process_vm_writev", "kill", "io_uring_setup", "io_uring_enter",
                   "io_uring_register", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
                   "unshare", "setns", "mount", "pivot_root", "chroot")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def readable_paths() -> list[str]:
    """Where a decoder may read (and run) files from: code, libraries, fonts; never a home, /proc or /etc."""
    app_dir = Path(__file__).resolve().parent.parent
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(app_dir), "/usr/lib", "/usr/lib64", "/lib",
                  "/lib64", "/usr/local/lib", "/usr/share/fonts", "/usr/share/poppler", "/etc/fonts",
                  "/etc/ld.so.cache", "/etc/localtime", "/dev/null", "/dev/urandom"}
    candidates.update(entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages")))
    return sorted(path for path in candidates if path and os.path.exists(path))


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or it is disabled)."""
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def apply_landlock(paths: list[str]) -> int:
    """Read-only access beneath `paths`, nothing else; no TCP; scoped signals and sockets. The ABI used (0: none)."""
    abi = landlock_abi()
    if abi == 0:
        return 0
    fs_rights = _FS_RIGHTS_BY_ABI.get(abi, _FS_RIGHTS_BY_ABI[5])
    attr = _RulesetAttr(handled_access_fs=fs_rights,
                        handled_access_net=(_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0,
                        scoped=(_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24  # the struct as this kernel knows it
    ruleset = _libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for path in paths:
            _allow_read(int(ruleset), path, fs_rights)
        if _libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def _allow_read(ruleset: int, path: str, fs_rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        access = (_READ_FILE | _EXECUTE) if os.path.isfile(path) else (_READ_FILE | _EXECUTE | _READ_DIR)
        if path == "/dev/null":
            access |= _WRITE_FILE
        rule = _PathBeneath(allowed_access=access & fs_rights & (_FILE_ONLY if not os.path.isdir(path) else ~0),
                            parent_fd=fd)
        if _libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                         ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def load_libseccomp():
    """libseccomp, or None where it is not installed. Loaded before Landlock closes the filesystem (and by
    its soname: ctypes.util.find_library would run a compiler)."""
    for name in ("libseccomp.so.2", "libseccomp.so"):
        try:
            return ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
    return None


def apply_seccomp(lib) -> bool:
    """The syscall filter (EPERM for DENIED_SYSCALLS, clone without CLONE_THREAD, ENOSYS for clone3, so
    that threads fall back to clone). False where libseccomp is not installed."""
    if lib is None:
        return False
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    context = lib.seccomp_init(_ACT_ALLOW)
    if not context:
        raise OSError(errno.ENOMEM, "seccomp_init")
    try:
        deny = 0x00050000 | errno.EPERM  # SCMP_ACT_ERRNO(EPERM)
        for syscall in DENIED_SYSCALLS:
            _rule(lib, context, deny, syscall)
        _rule(lib, context, 0x00050000 | errno.ENOSYS, "clone3")
        not_a_thread = (_ArgCmp * 1)(_ArgCmp(0, _CMP_MASKED_EQ, _CLONE_THREAD, 0))
        _rule(lib, context, deny, "clone", not_a_thread)
        if lib.seccomp_load(context) != 0:
            raise OSError(ctypes.get_errno(), "seccomp_load")
    finally:
        lib.seccomp_release(context)
    return True


def _rule(lib, context, action: int, syscall: str, compare=None) -> None:
    number = lib.seccomp_syscall_resolve_name(syscall.encode())
    if number < 0:
        return  # not on this architecture (fork and vfork are not on arm64)
    if lib.seccomp_rule_add_array(context, action, number, len(compare) if compare else 0, compare) != 0:
        raise OSError(errno.EINVAL, f"seccomp rule for {syscall}")


def confine() -> dict:
    """Every layer this kernel offers, in the order that keeps each possible: Landlock (it needs to open
    the paths), then seccomp, then no new processes. What is in force, for the replica's log and /v1/info."""
    lib = load_libseccomp()
    landlock = apply_landlock(readable_paths())
    seccomp = apply_seccomp(lib)
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    return {"landlock_abi": landlock, "seccomp": seccomp, "nproc": 0}
