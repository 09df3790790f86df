"""nbgrader's Execute preprocessor with the guards a cohort needs.

- a budget for the whole notebook (each cell also has its own timeout): a hanging submission
  costs at most ``notebook_timeout`` seconds, then the remaining cells are skipped;
- a dead kernel (``os._exit``, a crash, the memory limit) stops execution cleanly instead of
  losing the notebook, so the tests that already ran keep their points;
- outputs are capped while they stream: the kernel's start-up script stops print, display()
  and cell results at the source, and every IOPub message (whatever its type, also one the
  kernel sends straight on its socket) counts against ``max_output`` bytes, past which this
  preprocessor drops further output (errors still come through, trimmed);
- hidden test cells never run in the kernel: each is judged in this process
  (``autograder.judge``), which asks the kernel only to run the learner's code on inputs it
  chose and reads the results back as data.

What happened is recorded in the process's :class:`NotebookRun` (one notebook at a time,
started by the worker with :func:`begin`). A kernel started before the notebook arrived
(:mod:`autograder.selfcheck.standby`) is handed over in ``PRESTARTED``: the next
notebook runs in it, and it is killed when that notebook is done, like any other.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass, field
from time import monotonic

from jupyter_core.utils import ensure_async
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets import Integer

from autograder.sandbox.kernel_manager import GradingKernelManager


@dataclass
class NotebookRun:
    """One notebook's grading, as this process's executor sees it: the submission's seed
    (``pipeline.judge_seed``: the grader's secret and the submission; None draws a fresh one
    per test) and what happened (:meth:`events`, which the scoring reads). The worker starts
    one per notebook (:func:`begin`); a process grades one notebook at a time."""

    seed: bytes | None = None
    timeout: bool = False
    kernel_died: bool = False
    kernel_exit: int | None = None
    output_truncated: bool = False
    skipped: int = 0
    judged: dict = field(default_factory=dict)    # grade_id -> the verdict, as JSON
    review: list = field(default_factory=list)

    def events(self) -> dict:
        """What happened, as the scoring reads it (``autograder.grading.score``)."""
        return {k: v for k, v in asdict(self).items() if k != "seed"}


_RUN: list[NotebookRun] = [NotebookRun()]


def begin(seed: bytes | None = None) -> NotebookRun:
    """Start the record of the next notebook this process grades."""
    _RUN[0] = NotebookRun(seed)
    return _RUN[0]


def current() -> NotebookRun:
    """The notebook being graded (a fresh record before the first)."""
    return _RUN[0]


PRESTARTED: list = []   # kernel managers whose kernel is running and has run nothing yet
# The first words of the notice the kernel's start-up script (kernel_startup.STARTUP) prints when it
# starts dropping output at the source.
KERNEL_CAP_NOTICE = "[output truncated: more than"


def _is_test_cell(cell: NotebookNode) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return bool(meta.get("grade")) and not meta.get("solution")


class GuardedExecute(Execute):
    notebook_timeout = Integer(600, help="seconds for the whole notebook").tag(config=True)
    max_output = Integer(2 * 1024 * 1024, help="bytes of output per notebook").tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", GradingKernelManager)
        super().__init__(*args, **kwargs)

    def preprocess(self, nb, resources=None, km=None):
        self._deadline = monotonic() + self.notebook_timeout
        self._stopped = ""
        self._out_bytes = 0
        self._told_truncated = False
        self._judge_client = None
        self._judge_pool = None
        self._session = None
        self._judge_error = ""
        from autograder.judge.remote import Budget

        self._judge_budget = Budget()   # what the kernel may send the judge, whole notebook
        self._hidden_sources = [c.source for c in nb.cells if _is_test_cell(c)]
        prestarted = km is None and bool(PRESTARTED)
        if prestarted:
            km = PRESTARTED.pop()
        try:
            return super().preprocess(nb, resources, km)
        finally:
            if prestarted and self.km is not None:
                self._cleanup_kernel()   # nbclient stops only the kernels it started
            if self._judge_pool is not None:
                self._judge_pool.submit(self._close_judge_client).result()
                self._judge_pool.shutdown()
                self._judge_pool = None

    async def _async_cleanup_kernel(self) -> None:
        # Close the judge's connection before the kernel is shut down.
        if self._judge_pool is not None:
            await asyncio.get_running_loop().run_in_executor(self._judge_pool,
                                                             self._close_judge_client)
        await super()._async_cleanup_kernel()

    _cleanup_kernel = run_sync(_async_cleanup_kernel)

    def _close_judge_client(self) -> None:
        if self._judge_client is not None:
            self._judge_client.stop_channels()
            self._judge_client.context.destroy(linger=0)
            self._judge_client = None

    # -- time budget -----------------------------------------------------------------
    def _get_timeout(self, cell):
        t = super()._get_timeout(cell)
        left = max(1, int(self._deadline - monotonic()))
        return left if t is None else min(t, left)

    async def _async_handle_timeout(self, timeout, cell=None):
        current().timeout = True
        return await super()._async_handle_timeout(timeout, cell)

    # -- cells -----------------------------------------------------------------------
    def _stop_output(self, cell: NotebookNode, why: str) -> NotebookNode:
        cell.outputs = [NotebookNode(output_type="error", ename="NotExecuted",
                                     evalue=why, traceback=[f"NotExecuted: {why}"])]
        current().skipped += 1
        return cell

    async def async_execute_cell(self, cell, cell_index, execution_count=None,
                                 store_history=True):
        if cell.cell_type != "code" or not cell.source.strip():
            return await super().async_execute_cell(cell, cell_index, execution_count,
                                                    store_history)
        if self._stopped:
            return self._stop_output(cell, self._stopped)
        if monotonic() >= self._deadline:
            current().timeout = True
            self._stopped = (f"the notebook ran out of its {self.notebook_timeout} s "
                             "time budget before this cell")
            return self._stop_output(cell, self._stopped)
        if _is_test_cell(cell):
            return await self._judge_cell(cell)
        try:
            return await super().async_execute_cell(cell, cell_index, execution_count,
                                                    store_history)
        except CellTimeoutError as exc:
            current().timeout = True
            cell.outputs = list(cell.get("outputs", [])) + [NotebookNode(
                output_type="error", ename="CellTimeoutError", evalue=str(exc)[:300],
                traceback=[f"CellTimeoutError: {str(exc)[:300]}"])]
            return cell
        except DeadKernelError:
            current().kernel_died = True
            current().kernel_exit = await self._exit_code()
            self._stopped = "the kernel died earlier in the notebook"
            cell.outputs = list(cell.get("outputs", [])) + [NotebookNode(
                output_type="error", ename="DeadKernelError",
                evalue="the kernel died while running this cell (os._exit, a crash, or a "
                       "resource limit)",
                traceback=["DeadKernelError: the kernel died while running this cell"])]
            return cell

    execute_cell = run_sync(async_execute_cell)

    # -- the judge -------------------------------------------------------------------
    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        # Connect the judge before any learner code runs: the connection then survives
        # whatever the kernel later does to its socket files (and is never re-made).
        from concurrent.futures import ThreadPoolExecutor

        self._judge_pool = ThreadPoolExecutor(1, thread_name_prefix="judge")
        try:
            await asyncio.get_running_loop().run_in_executor(self._judge_pool,
                                                             self._connect_judge)
        except Exception as exc:  # noqa: BLE001 - each judged test will say so
            self._judge_error = f"{type(exc).__name__}: {exc}"
        return kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def _connect_judge(self) -> None:
        self._judge_client = self._make_judge_client()
        self._judge_client.kernel_info(reply=True, timeout=60)  # the connection is made
        # Then, in the judge's thread while the kernel runs the first cells: one-off imports.
        self._judge_pool.submit(_warm_up_judge, self._hidden_sources)

    async def _judge_cell(self, cell: NotebookNode) -> NotebookNode:
        """Judge a hidden test cell in this (trusted) process; the kernel only answers the
        judge's requests. The cell's outputs are the verdict: none when it passed, one
        error with the check's message when it failed (nbgrader scores it as usual)."""
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        verdict = await self._verdict(cell)
        if verdict.stopped == "timeout":
            current().timeout = True
            await ensure_async(self.km.interrupt_kernel())
            # then end the conversation, so that the kernel is free for the next cell
            await asyncio.get_running_loop().run_in_executor(self._judge_pool,
                                                             self._session.close)
        elif verdict.stopped == "died":
            current().kernel_died = True
            self._stopped = "the kernel died earlier in the notebook"
        # A check's message may quote what the kernel answered: capped, so that no answer
        # can make the autograded notebook larger than the worker reads back.
        message = _capped_message(verdict.message)
        current().judged[gid] = dict(verdict.to_json(), message=message)
        cell.outputs = [] if verdict.passed else [NotebookNode(
            output_type="error", ename="CheckFailure", evalue=message,
            traceback=[f"CheckFailure: {message}"])]
        return cell

    async def _verdict(self, cell: NotebookNode):
        deadline = monotonic() + (self._get_timeout(cell) or self.notebook_timeout)
        # Everything of the judge runs in its one thread, after its warm-up: importing torch
        # in two threads at once can deadlock, and that thread owns the blocking client.
        return await asyncio.get_running_loop().run_in_executor(
            self._judge_pool, self._judge_in_thread, cell.source, deadline)

    def _judge_in_thread(self, source: str, deadline: float):
        from autograder import judge
        from autograder.grading.judge_session import Session
        from autograder.judge.remote import Conn

        try:
            call = judge.parse_hidden_cell(source)
        except judge.NotJudgeable as exc:
            return judge.Verdict(False, f"the hidden test cannot be judged: {exc}", [],
                                 internal="grader bug")
        if self._judge_client is None:  # the connection made at kernel start failed
            return judge.Verdict(False, "the kernel did not answer the judge: "
                                 f"{self._judge_error or 'no connection'}", call.names,
                                 internal="no judge connection")
        self._session = Session(self._judge_client, deadline,
                                getattr(self.km.provisioner, "process", None))
        verdict = None
        try:
            verdict = judge.run(call, Conn(self._session, self._judge_budget),
                                seed=current().seed)
            return verdict
        finally:
            # A kernel past its time is interrupted first (_judge_cell), a dead one is gone.
            if verdict is None or verdict.stopped not in ("timeout", "died"):
                self._session.close()

    def _make_judge_client(self):
        import zmq
        from jupyter_client.blocking import BlockingKernelClient

        ctx = zmq.Context()
        ctx.setsockopt(zmq.RECONNECT_IVL, -1)
        # A dead kernel is never reconnected to, and a send with no peer would block forever:
        # every send gives up after a second, and the transport then asks why.
        ctx.setsockopt(zmq.SNDTIMEO, 1000)
        # The largest message the kernel may send the judge: one answer (64 MiB of JSON, as
        # base64) and its envelope; zmq drops a larger one before it is read into memory.
        from autograder.judge.remote import MAX_ANSWER_TEXT

        ctx.setsockopt(zmq.MAXMSGSIZE, MAX_ANSWER_TEXT + 8 * 1024 * 1024)
        bc = BlockingKernelClient(context=ctx)
        bc.load_connection_info(self.km.get_connection_info(session=False))
        bc.start_channels(shell=True, iopub=False, stdin=True, hb=False, control=False)
        return bc

    async def _exit_code(self) -> int | None:
        """The dead kernel's exit status (negative: killed by that signal), if known."""
        try:
            prov = self.km.provisioner
            for _ in range(20):  # the process may take a moment to be reaped
                code = prov.poll()
                if asyncio.iscoroutine(code):
                    code = await code
                if code is not None:
                    return code
                await asyncio.sleep(0.05)
        except Exception:  # noqa: BLE001 - no provisioner: the status says "unknown"
            pass
        return None

    def process_message(self, msg, cell, cell_index):
        """Every IOPub message counts against ``max_output``, whatever its type (stream,
        display, update_display_data, comm, error...), measured as its JSON size. Past the
        limit, messages are dropped; errors still come through, trimmed, two per cell."""
        msg_type = msg.get("msg_type") or msg.get("header", {}).get("msg_type", "")
        if msg_type in ("status", "execute_input"):
            return super().process_message(msg, cell, cell_index)
        if msg_type == "error":
            msg = _trimmed_error(msg)
        size = _msg_size(msg)
        if self._out_bytes + size > self.max_output:
            self._out_bytes = self.max_output + 1
            errors = sum(1 for o in cell.get("outputs", []) if o.get("output_type") == "error")
            if msg_type != "error" or errors >= 2:
                self._truncated(cell)
                return None
        else:
            self._out_bytes += size
        return super().process_message(msg, cell, cell_index)

    def _truncated(self, cell: NotebookNode) -> None:
        current().output_truncated = True
        if not self._told_truncated:
            self._told_truncated = True
            cell.outputs.append(NotebookNode(
                output_type="stream", name="stdout",
                text=f"\n[output truncated: the notebook sent more than "
                     f"{self.max_output // 1024} KiB of output]\n"))

    def output(self, outs, msg, display_id, cell_index):
        out = super().output(outs, msg, display_id, cell_index)
        if out is not None and out.get("output_type") == "stream" and \
                KERNEL_CAP_NOTICE in out.get("text", ""):
            current().output_truncated = True  # the kernel's start-up cap dropped output
        return out


#: The most characters of a check's message written into the notebook (and the result).
MAX_MESSAGE = 2000


def _capped_message(message) -> str:
    """A verdict's message, at most :data:`MAX_MESSAGE` characters ("…(cut)" marks a cut)."""
    message = str(message)
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 6] + "…(cut)"


def _warm_up_judge(hidden_sources: list[str]) -> None:
    from autograder.judge import warm_up  # imports torch: off the notebook's critical path

    warm_up(hidden_sources)


def _msg_size(msg: dict) -> int:
    n = len(json.dumps(msg.get("content", {}), default=str))
    for b in msg.get("buffers") or []:
        try:
            n += len(b)
        except TypeError:
            n += 64
    return n


def _trimmed_error(msg: dict) -> dict:
    """An error message with bounded fields (a 1 MB traceback is cut to its last 8 kB)."""
    content = dict(msg.get("content") or {})
    content["ename"] = str(content.get("ename", ""))[:200]
    content["evalue"] = str(content.get("evalue", ""))[:2000]
    tb = [str(t) for t in content.get("traceback") or []][-30:]
    keep, total = [], 0
    for line in reversed(tb):
        total += len(line)
        if total > 8000:
            break
        keep.append(line)
    content["traceback"] = list(reversed(keep))
    out = dict(msg)
    out["content"] = content
    return out
