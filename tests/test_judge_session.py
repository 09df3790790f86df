"""The judge's conversation with a real kernel (``autograder.grading.judge_session``): answers
arrive as input requests, stray and forged messages are skipped, a conversation always ends
with the kernel free again, a hanging call times out and an interrupt frees the kernel."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.manager import KernelManager
from traitlets.config import Config

from autograder.grading.judge_session import Session
from autograder.judge import remote
from autograder.judge.remote import JudgeError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def kernel():
    config = Config()
    config.KernelManager.transport = "ipc"
    km = KernelManager(kernel_name="python3", config=config)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get(
        "PYTHONPATH", "")])}
    km.kernel_cmd = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    km.start_kernel(env=env, cwd=str(ROOT))
    setup = km.client()
    setup.start_channels()
    setup.wait_for_ready(timeout=60)
    # the judge's client: its own connection, shell and stdin only (as in grading)
    judge = BlockingKernelClient()
    judge.load_connection_info(km.get_connection_info(session=False))
    judge.start_channels(shell=True, iopub=False, stdin=True, hb=False, control=False)
    judge.kernel_info(reply=True, timeout=30)

    def run(code: str) -> None:
        reply = setup.execute_interactive(code, timeout=30, output_hook=lambda msg: None)
        assert reply["content"]["status"] == "ok", reply["content"]

    yield km, judge, run
    judge.stop_channels()
    setup.stop_channels()
    km.shutdown_kernel(now=True)


def _session(km, judge, seconds: float = 10.0) -> Session:
    return Session(judge, time.monotonic() + seconds, km.provisioner.process)


def test_a_conversation_answers_like_the_agent_and_frees_the_kernel(kernel):
    km, judge, run = kernel
    run("import torch\ndef double(x):\n    return 2 * x")
    session = _session(km, judge)
    conn = remote.Conn(session)
    x = torch.arange(4.0)
    assert torch.equal(conn.get("double")(x), 2 * x)
    assert torch.equal(conn.get("double")(x + 1), 2 * x + 2)
    assert conn.requests == 4 and session.waiting
    assert session.close() and session.msg_id is None
    run("assert 1 + 1 == 2")                        # the kernel is free for the next cell
    assert _session(km, judge).close()              # a conversation never opened


def test_stray_and_forged_messages_are_skipped(kernel):
    """Input requests the kernel sent before the conversation (another parent) are not read
    as answers."""
    km, judge, run = kernel
    run("import torch\ndef double(x):\n    return 2 * x")
    # Ask for input under a parent of the kernel's choosing, addressed to the judge's
    # identity: what a cell could forge if it knew where to send it.
    run(f"""
k = get_ipython().kernel
for _ in range(3):
    k.session.send(k.stdin_socket, "input_request", {{"prompt": "Zm9yZ2Vk", "password": False}},
                   {{"header": {{"msg_id": "forged"}}}}, ident=[{judge.session.bsession!r}])
""")
    assert judge.stdin_channel.socket.poll(2000)    # they reached the judge's socket
    session = _session(km, judge)
    conn = remote.Conn(session)
    assert torch.equal(conn.get("double")(torch.ones(2)), torch.full((2,), 2.0))
    assert session.close()


@pytest.mark.parametrize("patch, error", [
    ("serve = lambda request: None", "stopped before answering"),     # ends it at once
    ("handle = lambda request: 'not base64!'", "not a base64 string"),
])
def test_a_broken_agent_fails_the_request_and_the_conversation_still_ends(kernel, patch,
                                                                        error):
    km, judge, run = kernel
    name = patch.split(" ")[0]
    run(f"import course.agent as _a\n_saved = _a.{name}\n_a.{patch}")
    try:
        session = _session(km, judge)
        with pytest.raises(JudgeError, match=error):
            remote.Conn(session).get("print")
        assert session.close()
    finally:
        run(f"_a.{name} = _saved")


def test_a_hanging_call_times_out_and_an_interrupt_frees_the_kernel(kernel):
    """The learner's code hangs and swallows the interrupt: the conversation still ends."""
    km, judge, run = kernel
    run("import time\ndef hang():\n    try:\n        time.sleep(3600)\n"
        "    except KeyboardInterrupt:\n        return 'woke'")
    session = _session(km, judge, seconds=1.0)
    conn = remote.Conn(session)
    hang = conn.get("hang")
    with pytest.raises(JudgeError) as info:
        hang()
    assert info.value.stopped == "timeout" and conn.stopped is info.value
    km.interrupt_kernel()
    assert session.close()
    run("assert 1 + 1 == 2")
