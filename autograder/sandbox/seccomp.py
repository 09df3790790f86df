"""A seccomp filter for grading kernels: no kernel keyrings, no new user namespaces.

Two things a sandboxed kernel could otherwise still reach on the host's kernel, whatever its
uid or namespaces:

- **keyrings** (``add_key``, ``request_key``, ``keyctl``): a uid's user keyring lives in the
  host's kernel, outside every sandbox, and outlives the kernel, the sandbox and the grading
  run; two kernels that share a uid (every kernel of an unprivileged grader) could pass data
  through it. Refused with EPERM.
- **user namespaces** (``unshare``/``clone`` with ``CLONE_NEWUSER``; ``clone3``, whose flags a
  filter cannot read, says ENOSYS and glibc falls back to ``clone``): inside one, a process
  has every capability over its own namespaces, which exposes much of the host kernel's
  namespaced code (mounts, netfilter) to student code. An unprivileged grader's bwrap also
  says ``--disable-userns``; a root grader's could not.
- **io_uring** (ENOSYS): a large attack surface of the host kernel no notebook needs.

The program is classic BPF, as ``bwrap --seccomp FD`` takes it (``struct sock_filter``:
u16 code, u8 jt, u8 jf, u32 k), for x86_64 and aarch64. System calls of another ABI (i386
through ``int 0x80``, x32) get ENOSYS. On another architecture there is no filter
(:func:`program` returns None) and docs/security.md says so.

Source: seccomp(2), ``struct seccomp_data`` (nr at offset 0, arch at 4, args from 16).
"""

from __future__ import annotations

import errno
import os
import platform
import struct

# Per architecture: (AUDIT_ARCH_*, {name: syscall number}).
ARCHES = {
    "x86_64": (0xC000003E, {"add_key": 248, "request_key": 249, "keyctl": 250,
                            "unshare": 272, "clone": 56, "clone3": 435}),
    "aarch64": (0xC00000B7, {"add_key": 217, "request_key": 218, "keyctl": 219,
                             "unshare": 97, "clone": 220, "clone3": 435}),
}
# io_uring_setup/enter/register (the same numbers on every architecture since 5.1)
IO_URING = (425, 426, 427)
CLONE_NEWUSER = 0x10000000
X32_SYSCALL_BIT = 0x40000000

_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000


def program(machine: str | None = None) -> bytes | None:
    """The filter as bytes for ``bwrap --seccomp``, or None on an architecture without one."""
    arch = ARCHES.get(machine or platform.machine())
    if arch is None:
        return None
    audit, nr = arch
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    # (code, jump-if-true label, jump-if-false label, k); labels are resolved below
    prog = [
        (_LD_W_ABS, None, None, 4),                  # arch
        (_JEQ, None, "enosys", audit),
        (_LD_W_ABS, None, None, 0),                  # syscall number
        (_JGE, "enosys", None, X32_SYSCALL_BIT),
        (_JEQ, "eperm", None, nr["add_key"]),
        (_JEQ, "eperm", None, nr["request_key"]),
        (_JEQ, "eperm", None, nr["keyctl"]),
        (_JEQ, "enosys", None, nr["clone3"]),
        *[(_JEQ, "enosys", None, n) for n in IO_URING],
        (_JEQ, "flags", None, nr["unshare"]),
        (_JEQ, "flags", None, nr["clone"]),
        (_RET, None, None, _ALLOW),
        ("flags", _LD_W_ABS, None, None, 16),        # low 32 bits of args[0] (little-endian)
        (_JSET, "eperm", None, CLONE_NEWUSER),
        (_RET, None, None, _ALLOW),
        ("eperm", _RET, None, None, eperm),
        ("enosys", _RET, None, None, enosys),
    ]
    labels, rows = {}, []
    for ins in prog:
        if isinstance(ins[0], str):
            labels[ins[0]] = len(rows)
            ins = ins[1:]
        rows.append(ins)
    out = b""
    for i, (code, jt, jf, k) in enumerate(rows):
        t = labels[jt] - i - 1 if jt else 0
        f = labels[jf] - i - 1 if jf else 0
        out += struct.pack("=HBBI", code, t, f, k)
    return out


def program_fd() -> int | None:
    """A readable descriptor holding :func:`program` (a pipe, inheritable), or None."""
    prog = program()
    if prog is None:
        return None
    r, w = os.pipe()
    os.write(w, prog)            # a few hundred bytes: well within a pipe's buffer
    os.close(w)
    os.set_inheritable(r, True)
    return r
