"""Kernels forked one after another from a worker's fork server: does one leave anything the
next can see, or stop the server for the next?

One worker (``jobs=1``) grades, in order: a submission that leaves files everywhere it may
write, a daemonised child, a poisoned IPython profile and a kernel config, and tries to signal
and read the server; a classmate after it; one that leaves a System V shared memory segment
(the server cannot vouch for a clean sandbox then, and is replaced); and a classmate after
that; then ports in TIME_WAIT and 60,000 files, each followed by a classmate. Each kernel
prints what it sees; the classmates must see nothing of the others and be graded exactly as
alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest

from autograder import sandbox
from autograder.authoring.mutants import load_catalog
from autograder.grading import pipeline
from autograder.sandbox import GiB, Limits, MiB, forkserver

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

LIMITS = Limits(memory=3 * GiB, cell_timeout=60, notebook_timeout=150, processes=64,
                disk=64 * MiB, shm=16 * MiB, output=1 * MiB)

# What every kernel prints: its uid, the server it was forked from (start time of pid 2),
# and everything of another kernel it can find.
LOOK = r'''
import os
def __look():
    skip = {".lib", ".data", ".venv"}
    files = []
    for top in ("/tmp", "/var/tmp", "/dev/shm"):
        for d, dirs, names in os.walk(top):
            if d == "/tmp":
                dirs[:] = [x for x in dirs if x not in skip]
            files += [os.path.join(d, n) for n in names if "LEFT" in n or "poison" in n]
    mine = {os.getpid(), os.getppid()}
    procs = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) > 2 and int(p) not in mine:
            try:
                procs.append(open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ")[:60])
            except OSError:
                pass
    ipc = [ln for k in ("shm", "sem", "msg")
           for ln in open(f"/proc/sysvipc/{k}").read().splitlines()[1:]]
    own = {os.readlink(f"/proc/self/fd/{fd}")[8:-1] for fd in os.listdir("/proc/self/fd")
           if os.path.exists(f"/proc/self/fd/{fd}")}      # "socket:[inode]" -> inode
    net = sum(ln.split()[9] not in own for k in ("tcp", "tcp6", "udp", "udp6")
              for ln in open(f"/proc/net/{k}").read().splitlines()[1:])
    server = open("/proc/2/stat").read().rsplit(")", 1)[1].split()[19]
    print("SEEN", os.getuid(), server, sorted(files), procs, ipc, net)
__look()
'''

LEAVE = r'''
import ctypes, os, signal, subprocess, sys, time
for d in ("/tmp", "/tmp/work", "/tmp/home", "/tmp/.kernel", "/dev/shm", "/tmp/ipython"):
    try:
        open(f"{d}/LEFT-by-leaver", "w").write("x")
    except OSError as exc:
        print("NOWRITE", d, type(exc).__name__)
prof = "/tmp/ipython/profile_default"
open(f"{prof}/ipython_kernel_config.py", "w").write(
    "c.InteractiveShellApp.exec_lines = ['print(\"POISONED\")']\n")
open(f"{prof}/startup/00-poison.py", "w").write("print('POISONED')\n")
# a daemon that outlives the kernel and writes later
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for i in range(300):
            time.sleep(0.1)
            try:
                open(f"/tmp/LEFT-by-daemon-{i}", "w").write("x")
            except OSError:
                pass
    os._exit(0)
os.waitpid(pid, 0)
# the server: signal it, read its memory and environment
for target in (1, 2):
    for how in ("kill", "environ", "mem"):
        try:
            if how == "kill":
                os.kill(target, signal.SIGKILL)
            else:
                open(f"/proc/{target}/{how}", "rb").read(64)
            print("REACHED", how, target)
        except OSError as exc:
            print("BLOCKED", how, target, type(exc).__name__)
'''

# Loopback connections closed by this side: their ports stay in TIME_WAIT for a minute.
NET = r'''
import socket
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(8)
for _ in range(5):
    c = socket.create_connection(srv.getsockname())
    a, _ = srv.accept()
    c.close()
    a.close()
srv.close()
print("NET", sum(len(open(f"/proc/net/{k}").read().splitlines()[1:]) for k in ("tcp", "tcp6")))
'''

# More files (here empty, in a few folders) than the server removes: a new sandbox instead.
FILES = r'''
import os
for d in range(6):
    os.makedirs(f"/tmp/many/{d}")
    for i in range(10_000):
        open(f"/tmp/many/{d}/{i}", "w").close()
print("FILES", sum(len(os.listdir(f"/tmp/many/{d}")) for d in range(6)))
'''

SYSV = r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("SHMID", libc.shmget(0x5446, 4096, 0o1000 | 0o666))
'''


def _text(nb_path: Path) -> str:
    nb = nbformat.read(str(nb_path), as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def _seen(batch, student):
    text = _text(batch["out"] / student / f"{S.DAY}.ipynb")
    line = next(ln for ln in text.splitlines() if ln.startswith("SEEN "))
    _, uid, server, rest = line.split(" ", 3)
    return int(uid), server, rest, text


@pytest.fixture(scope="module")
def batch(root, tmp_path_factory):
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(why)
    if not forkserver.wanted({"sandbox": True}):
        pytest.skip("kernels are forked from a server only when the grader is root")
    tmp = tmp_path_factory.mktemp("forked")
    subs, out = tmp / "submitted", tmp / "grading" / "results"
    ref = S.reference(root)
    S.put(subs, "a-leaver", S.with_cell(S.with_cell(ref, LOOK), LEAVE))
    S.put(subs, "b-classmate", S.with_cell(ref, LOOK))
    S.put(subs, "c-sysv", S.with_cell(S.with_cell(ref, LOOK), SYSV))
    S.put(subs, "d-classmate", S.with_cell(ref, LOOK))
    mutant = next(m for m in load_catalog() if m.day == S.DAY)
    S.put(subs, "e-mutant", mutant.apply(ref))
    S.put(subs, "f-blank", S.release(root))
    S.put(subs, "g-probe", S.with_cell(ref, S.PROBE))
    S.put(subs, "h-net", S.with_cell(S.with_cell(ref, LOOK), NET))
    S.put(subs, "i-classmate", S.with_cell(ref, LOOK))
    S.put(subs, "j-files", S.with_cell(S.with_cell(ref, LOOK), FILES))
    S.put(subs, "k-classmate", S.with_cell(ref, LOOK))
    results = pipeline.grade(root, subs, days=[S.DAY], jobs=1, results_dir=out, sandbox=True,
                             limits=LIMITS)
    return {"by": {r.student: r for r in results}, "out": out, "subs": subs,
            "full": pipeline.max_score(root, S.DAY)}


@pytest.mark.slow
def test_a_kernel_leaves_nothing_for_the_next(batch):
    """Files in every writable folder, a daemon still writing, a poisoned IPython profile:
    does the next kernel of the same server see none of it, under a uid of its own?"""
    uid_a, server_a, _, text_a = _seen(batch, "a-leaver")
    uid_b, server_b, rest_b, text_b = _seen(batch, "b-classmate")
    assert "LEFT-by-leaver" in text_a and "NOWRITE" not in text_a  # the attack did run
    assert server_a == server_b, "the classmate was not forked from the same server"
    assert uid_a != uid_b and 0 not in (uid_a, uid_b)
    assert rest_b == "[] [] [] 0", rest_b
    assert "POISONED" not in text_b
    for r in (batch["by"]["a-leaver"], batch["by"]["b-classmate"]):
        assert (r.status, r.score) == ("graded", batch["full"]), r


@pytest.mark.slow
def test_the_server_is_out_of_a_kernels_reach(batch):
    """Signals to the server and the sandbox's init, its memory and environment: refused?"""
    _, _, _, text = _seen(batch, "a-leaver")
    assert "REACHED" not in text and text.count("BLOCKED") == 6, text[-1500:]


@pytest.mark.slow
def test_a_server_it_cannot_clean_is_replaced(batch):
    """A System V segment outlives its kernel: the next kernel gets a new server (and so a
    new IPC namespace), and is graded as alone."""
    _, server_b, _, _ = _seen(batch, "b-classmate")
    _, server_c, _, text_c = _seen(batch, "c-sysv")
    _, server_d, rest_d, _ = _seen(batch, "d-classmate")
    assert "SHMID -1" not in text_c and "SHMID" in text_c
    assert server_c == server_b and server_d != server_c
    assert rest_d == "[] [] [] 0", rest_d
    for s in ("c-sysv", "d-classmate"):
        r = batch["by"][s]
        assert (r.status, r.score) == ("graded", batch["full"]), r


@pytest.mark.slow
@pytest.mark.parametrize("attacker,word,after", [("h-net", "NET", "i-classmate"),
                                                 ("j-files", "FILES", "k-classmate")])
def test_what_the_server_cannot_clean_gets_a_new_sandbox(batch, attacker, word, after):
    """Ports left in TIME_WAIT in the network namespace the server's kernels share; 60,000
    files: the next kernel gets a new server and sees none of it."""
    _, server_a, _, text_a = _seen(batch, attacker)
    _, server_n, rest_n, _ = _seen(batch, after)
    assert int(next(ln for ln in text_a.splitlines() if ln.startswith(word)).split()[1]) > 0
    assert server_n != server_a and rest_n == "[] [] [] 0", rest_n
    for s in (attacker, after):
        r = batch["by"][s]
        assert (r.status, r.score) == ("graded", batch["full"]), r


@pytest.mark.slow
def test_forked_kernels_grade_as_a_sandbox_per_kernel(batch, root, tmp_path, monkeypatch):
    """A classmate, a mutant, a blank notebook and a probe graded again with a sandbox of its
    own per kernel: the same status, score, and points and message of every test; and in
    both ways no keyring, user namespace or capability for the probe."""
    monkeypatch.setenv("TFS_FORK_SERVER", "0")
    names = ["b-classmate", "e-mutant", "f-blank", "g-probe"]
    again = pipeline.grade(root, batch["subs"], days=[S.DAY], students=names, jobs=1,
                           results_dir=tmp_path / "results", sandbox=True, limits=LIMITS)

    def outcome(r):
        return r.status, r.score, [(t.grade_id, t.points, t.message) for t in r.tests]

    assert {r.student: outcome(r) for r in again} == \
        {s: outcome(batch["by"][s]) for s in names}
    assert batch["by"]["e-mutant"].score < batch["full"] and batch["by"]["f-blank"].score == 0
    for results in (batch["out"], tmp_path / "results"):
        text = _text(results / "g-probe" / f"{S.DAY}.ipynb")
        probes = [ln for ln in text.splitlines() if ln.startswith("PROBE ")]
        assert len(probes) == 3 and all(ln.endswith(" BLOCKED") for ln in probes), probes
