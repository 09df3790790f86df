"""How the grading process starts and reaches a kernel: IPC sockets, through the sandbox.

TCP cannot cross the sandbox's empty network namespace, so kernels talk over IPC sockets.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import tempfile
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum, DottedObjectName, Type, default


class GradingKernelClient(AsyncKernelClient):
    """jupyter_client's client, ready without an idle wait.

    Its ``wait_for_ready`` ends by reading IOPub until nothing comes for 0.2 s: 0.2 s of idle
    time per graded notebook (a tenth of a fast notebook's grading). Here the handshake is
    the same (``kernel_info`` until a reply on shell, then one IOPub message, which proves
    the IOPub subscription is live so no output of the first cell is lost), and what IOPub
    already holds is dropped without waiting for more: nbclient reads only messages whose
    parent is the request it sent, so a late start-up message is ignored anyway.
    """

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                msg = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                msg = None
            if msg is not None and msg["msg_type"] == "kernel_info_reply":
                try:
                    await self.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    pass  # IOPub not subscribed yet: ask again
                else:
                    self._handle_kernel_info_reply(msg)
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
        for _ in range(1000):  # bounded: no learner code has run yet, but never spin
            if not await self.iopub_channel.msg_ready():
                break
            await self.iopub_channel.get_msg(timeout=0)


class GradingKernelManager(AsyncKernelManager):
    """Kernels talk over IPC sockets: TCP cannot cross the sandbox's empty network namespace.

    Unsandboxed, the sockets live in ``$JUPYTER_RUNTIME_DIR``. Sandboxed (``TFS_KERNEL_PRIVATE``
    names the kernel's host-only private folder), the kernel binds them in its own tmpfs and
    the host reaches them through ``/proc/<sandbox pid>/root``, which the launcher records in
    ``sandbox.json``: no host folder is writable by the kernel. Clients connect once the kernel
    has bound every socket; the judge's own connection is made before any learner code runs
    and never re-made (``RECONNECT_IVL`` -1), so a socket path the kernel replaces later is
    never followed by the judge. (Every message is signed with the kernel's own key: a
    socket that is not the kernel's cannot speak for it.)
    """

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
    client_class = DottedObjectName("autograder.sandbox.kernel_manager.GradingKernelClient")
    client_factory = Type(GradingKernelClient, klass=AsyncKernelClient)

    @default("connection_file")
    def _connection_file_default(self) -> str:
        runtime = os.environ.get("JUPYTER_RUNTIME_DIR") or tempfile.mkdtemp()
        return os.path.join(runtime, f"kernel-{uuid.uuid4().hex[:8]}.json")

    @default("ip")
    def _ip_default(self) -> str:
        if self.transport == "ipc":
            return os.path.splitext(self.connection_file)[0] + "-ipc"
        return super()._ip_default()

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        from autograder.sandbox import forkserver

        forked = forkserver.current()
        if forked is not None and self.transport == "ipc":
            # Forked by the worker's fork server instead of a launcher of its own.
            server, spec = forked
            prov = self.provisioner
            prov.process = server.spawn(spec, self.connection_file)
            prov.pid, prov.pgid = prov.process.pid, None
            self._reconcile_connection_info(prov.connection_info)
        else:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        if self.transport != "ipc":
            return
        from autograder.sandbox import INNER_IPC
        from autograder.sandbox.kernel_files import read_capped

        private = os.environ.get("TFS_KERNEL_PRIVATE")
        # Connect once the kernel has bound every socket (under /proc/<pid>/root when sandboxed).
        deadline = monotonic() + 120
        ports = [self.shell_port, self.iopub_port, self.stdin_port, self.control_port, self.hb_port]
        ip = None if private else self.ip
        while monotonic() < deadline:
            if ip is None:
                try:
                    info = json.loads(read_capped(Path(private) / "sandbox.json", 4096))
                    ip = f"/proc/{int(info['child-pid'])}/root{INNER_IPC}"
                except (ValueError, KeyError, TypeError):
                    pass
            if ip is not None and all(_is_socket(f"{ip}-{p}") for p in ports):
                self.ip = ip
                return
            code = self.provisioner.poll() if self.provisioner else None
            if asyncio.iscoroutine(code):
                code = await code
            if code is not None:
                raise RuntimeError(f"the sandboxed kernel exited while starting (exit code {code})")
            await asyncio.sleep(0.02)
        raise RuntimeError("the sandboxed kernel did not open its sockets within 120 s")


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False
