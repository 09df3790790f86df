"""How the judge talks to a grading kernel: one conversation per hidden test.

The judge (``autograder.judge``) asks the kernel's agent (:mod:`course.agent`) one request at a
time. A conversation opens with one silent ``execute_request`` that runs
``course.agent.serve(first request)`` with standard input allowed; from then on each answer
arrives as the *prompt* of an ``input_request`` on the stdin channel, and the judge sends the
next request as the ``input_reply``. An empty reply ends the conversation, and the
``execute_reply`` says the kernel is free again.

Why the stdin channel: a Jupyter kernel answers an ``input_reply`` in its main thread without
the bookkeeping of a new request (status messages, the IPython cell machinery). Measured on a
2-core machine with ipykernel 7.4: about 0.8 ms and 0.55 ms of kernel CPU per request, against
3.5 ms and 2.9 ms for one silent ``execute_request`` per request (the previous transport). Day
13's hidden tests make about 300 requests.

Trust: nothing changes. The kernel may answer anything at any time, on either channel; the
judge reads only messages whose parent is the conversation's own ``execute_request``, takes
the prompt only if it is a base64 string, and decodes it with :mod:`course.wire`'s checks
(``autograder.judge.remote``). The learner's code runs in the kernel's main thread as in a
cell, so an interrupt stops it, and a kernel that stops answering is timed out or found dead.
"""

from __future__ import annotations

import queue
import re
from time import monotonic

from autograder.judge.remote import JudgeError

_B64 = re.compile(r"[A-Za-z0-9+/=]*")
# How long the judge waits for the kernel to end a conversation it no longer needs.
CLOSE_SECONDS = 5.0


class Session:
    """A transport for :class:`autograder.judge.remote.Conn` (request text -> answer text)
    over a ``BlockingKernelClient`` with its shell and stdin channels started.

    Args:
        client: the judge's own client of the kernel (connected before any learner code ran).
        deadline: ``time.monotonic()`` value after which the test has timed out.
        process: the kernel's process (``poll()`` says whether it is dead), or None.

    Raises (from a call):
        JudgeError: timed out (``stopped="timeout"``), the kernel died (``stopped="died"``),
            the conversation ended on the kernel's side, or an answer is not base64 text.
    """

    def __init__(self, client, deadline: float, process=None):
        self.client = client
        self.deadline = deadline
        self.process = process
        self.msg_id: str | None = None     # the conversation's execute_request, once sent
        self.waiting = False               # the kernel waits for our next request

    # -- the transport ----------------------------------------------------------------
    def __call__(self, payload: str) -> str:
        if self.msg_id is None:
            self._open(payload)
        elif self.waiting:
            self.waiting = False
            self._reply(payload)
        else:
            raise JudgeError("the kernel ended the judge's conversation")
        return self._answer()

    def close(self, seconds: float = CLOSE_SECONDS) -> bool:
        """End the conversation: an empty request whenever the kernel waits for one, until
        its ``execute_reply`` (at most ``seconds``). True when the kernel is free again (or
        was never asked); False when it still runs the learner's code or died."""
        if self.msg_id is None:
            return True
        self.deadline = monotonic() + seconds
        try:
            if self.waiting:
                self.waiting = False
                self._reply("")
            while True:
                channel, msg = self._next()
                if channel == "shell":
                    self.msg_id = None
                    return True
                self._reply("")           # another prompt: the agent still serves
        except JudgeError:
            return False

    # -- inside -----------------------------------------------------------------------
    def _open(self, payload: str) -> None:
        code = f"__import__('course.agent', fromlist=['serve']).serve('{payload}')"
        self.msg_id = self._send(self.client.execute, code, silent=True, store_history=False,
                                 allow_stdin=True)

    def _reply(self, text: str) -> None:
        """The next request (``text``) as the ``input_reply`` the kernel waits for."""
        self._send(self.client.input, text)

    def _send(self, send, *args, **kwargs):
        """``send(...)``, again while nobody takes it within the socket's send timeout (until
        the test's time is up or the kernel is found dead)."""
        import zmq

        while True:
            try:
                return send(*args, **kwargs)
            except zmq.Again:
                self._time_left()
                self._check_alive()

    def _answer(self) -> str:
        channel, msg = self._next()
        if channel == "shell":
            content = msg.get("content") or {}
            self.msg_id = None
            if content.get("status") != "ok":
                raise JudgeError(f"the kernel's agent failed: {str(content.get('ename'))[:100]}"
                                 f": {str(content.get('evalue'))[:300]}")
            raise JudgeError("the kernel's agent stopped before answering")
        self.waiting = True
        prompt = (msg.get("content") or {}).get("prompt")
        if not isinstance(prompt, str) or not _B64.fullmatch(prompt):
            raise JudgeError("the kernel's answer is not a base64 string")
        return prompt

    def _next(self) -> tuple[str, dict]:
        """The next message of this conversation: its ``execute_reply`` on the shell channel
        or an ``input_request`` on stdin (every other message is skipped)."""
        import zmq

        poller = zmq.Poller()
        sockets = {}
        for name in ("shell", "stdin"):
            sock = getattr(self.client, f"{name}_channel").socket
            poller.register(sock, zmq.POLLIN)
            sockets[sock] = name
        while True:
            ready = dict(poller.poll(1000 * min(1.0, self._time_left())))
            if not ready:
                self._check_alive()
                continue
            for sock in ready:
                name = sockets[sock]
                try:
                    msg = getattr(self.client, f"{name}_channel").get_msg(timeout=0)
                except queue.Empty:
                    continue
                if (msg.get("parent_header") or {}).get("msg_id") != self.msg_id:
                    continue            # not this conversation's: a stale or forged message
                kind = (msg.get("header") or {}).get("msg_type")
                if (name, kind) in (("shell", "execute_reply"), ("stdin", "input_request")):
                    return name, msg

    def _time_left(self) -> float:
        left = self.deadline - monotonic()
        if left <= 0:
            raise JudgeError("timed out: the learner's code ran past the cell's time limit",
                             stopped="timeout")
        return left

    def _check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise JudgeError("the kernel died while the judge waited", stopped="died")

