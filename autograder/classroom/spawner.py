"""The classroom hub's spawner: each user's server as that user's account, with limits.

JupyterHub's ``LocalProcessSpawner`` starts a server as the user's system account and nothing
more: one student could fork without end or take every byte of memory. :class:`LimitedSpawner`
sets resource limits (``setrlimit``, soft = hard, so the server cannot raise them) in the new
process before it drops to the account; the server, its kernels and terminals inherit them:

- ``RLIMIT_AS`` (``address_space``, default 6 GiB; 0 = none): address space per process. The
  grading kernels get 4 GiB (:class:`autograder.sandbox.Limits`), enough for Day 13 and 14;
  an interactive kernel keeps more threads and figures. CUDA reserves far more address space
  than it uses: on a GPU machine start with ``--user-memory 0``.
- ``RLIMIT_NPROC`` (``processes``, default 512): processes and threads of the account, all of
  them together (a server, a few kernels of ~50 threads each, terminals).
- ``RLIMIT_FSIZE`` (``file_size``, default 1 GiB): the largest file it may write.
- ``RLIMIT_CORE`` 0: no core files in the homes.

These are per process or per account, not a share of the machine: for a real class, a cgroup
per user (``jupyterhub-systemdspawner``: ``mem_limit``, ``cpu_limit``, tasks) or a pod per
user (KubeSpawner) is the way; see docs/instructors.md, "Running a class".
"""

from __future__ import annotations

import resource

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer

GiB = 1024 ** 3


class LimitedSpawner(LocalProcessSpawner):
    """``LocalProcessSpawner`` whose servers start under per-process resource limits."""

    address_space = Integer(6 * GiB, help="RLIMIT_AS of each process, bytes (0: none)"
                            ).tag(config=True)
    processes = Integer(512, help="RLIMIT_NPROC of the account (0: none)").tag(config=True)
    file_size = Integer(1 * GiB, help="RLIMIT_FSIZE, bytes (0: none)").tag(config=True)

    def limits(self) -> list[tuple[int, int]]:
        """(resource, value) pairs the server starts under."""
        wanted = [(resource.RLIMIT_AS, self.address_space),
                  (resource.RLIMIT_NPROC, self.processes),
                  (resource.RLIMIT_FSIZE, self.file_size), (resource.RLIMIT_CORE, 0)]
        return [(res, value) for res, value in wanted
                if value or res == resource.RLIMIT_CORE]

    def make_preexec_fn(self, name):
        """Set the limits (as root, before the uid changes), then become the account."""
        become = super().make_preexec_fn(name)
        limits = self.limits()

        def preexec():
            for res, value in limits:
                resource.setrlimit(res, (value, value))
            become()

        return preexec
