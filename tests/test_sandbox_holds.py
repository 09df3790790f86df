"""Can one hostile submission damage another's grade, read the instructor's files, escape the
limits, or be paid for tampering?

One batch of Day 3 submissions is graded in the sandbox: hostile submissions (each is the
reference notebook plus attack cells, or the blank notebook plus attack cells) beside untouched
classmates, whose notebooks, results and scores must come out unchanged. Each attack prints
lines the tests read back from the attacker's graded notebook.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest

from autograder import sandbox
from autograder.core import acceptance
from autograder.grading import pipeline
from autograder.grading.collect import parse_lms_name, unzip_submissions
from autograder.sandbox import GiB, Limits, MiB

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

LIMITS = Limits(memory=3 * GiB, cell_timeout=60, notebook_timeout=150, processes=64,
                disk=64 * MiB, shm=16 * MiB, output=1 * MiB)

# Replace every file the kernel can see in its folders with links to a classmate's files,
# /dev/zero and a host file, and try to write or chmod those directly.
LINKS = r'''
import glob, os
VICTIM_NB, VICTIM_RESULT, SENTINEL = @ARGS@
dirs = {os.getcwd(), os.path.expanduser("~"), os.environ.get("TMPDIR", "/tmp"),
        os.environ.get("IPYTHONDIR", ""), os.environ.get("JUPYTER_RUNTIME_DIR", ""), "/tmp"}
linked = 0
for d in filter(None, dirs):
    names = {os.path.basename(p) for p in glob.glob(os.path.join(d, "*"))}
    names |= {"day03_self_attention.ipynb", "kernel.log", "gradebook.db", "exit.json",
              "sandbox.json", "timestamp.txt", "day03_self_attention.json"}
    for i, name in enumerate(sorted(names)):
        p = os.path.join(d, name)
        try:
            if os.path.lexists(p) and not os.path.isdir(p):
                os.remove(p)
            os.symlink([VICTIM_NB, VICTIM_RESULT, SENTINEL, "/dev/zero"][i % 4], p)
            linked += 1
        except OSError:
            pass
print("LINKED", linked)
for target in (VICTIM_NB, VICTIM_RESULT, SENTINEL):
    for how in ("write", "chmod"):
        try:
            if how == "write":
                open(target, "w").write("{}")
            else:
                os.chmod(target, 0o777)
            print("ESCAPED", how, target)
        except OSError as exc:
            print("BLOCKED", how, type(exc).__name__)
'''

# Count what the limits let through; the last cells trip the disk and process limits.
LIMITS_CELL = r'''
import os, threading, time
COURSE_ROOT = @ARGS@
print("UID", os.getuid())
print("ENVLEAK", [k for k, v in os.environ.items() if COURSE_ROOT in v])
pids = []
try:
    for _ in range(400):
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        pids.append(pid)
except OSError as exc:
    print("FORK_STOPPED", type(exc).__name__)
print("PROCS", len(pids))
for pid in pids:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
def fill(path):
    n = 0
    try:
        with open(path, "wb") as f:
            for _ in range(5000):
                f.write(b"\0" * (1 << 20))
                f.flush()
                n += 1 << 20
    except OSError as exc:
        print("FILL_STOPPED", path, type(exc).__name__)
    os.remove(path)
    return n
print("SHM", fill("/dev/shm/fill"))
written = []  # many files of 8 MiB: only the total is limited
try:
    for i in range(200):
        with open(f"part{i}.bin", "wb") as f:
            f.write(b"\0" * (8 << 20))
        written.append(i)
except OSError as exc:
    print("DISK_STOPPED", type(exc).__name__)
print("DISK", len(written) * (8 << 20))
'''
TRIP_DISK = "with open('trip.bin', 'wb') as f:\n    f.write(b'\\0' * (128 << 20))"
TRIP_PROCS = ("import threading, time\nts = []\nfor _ in range(400):\n"
              "    t = threading.Thread(target=time.sleep, args=(5,), daemon=True)\n"
              "    t.start()\n    ts.append(t)")

# Look everywhere for the instructor's material and run any answer cell found.
READS = r'''
import json, os
hits = []
for top, dirs, files in os.walk("/"):
    system = ("/proc", "/sys", "/dev", "/usr", "/etc", "/lib", "/bin", "/sbin", "/var/lib")
    if top.startswith(system) or "site-packages" in top or "/lib/python3" in top:
        dirs[:] = []
        continue
    for f in files:
        p = os.path.join(top, f)
        if f in ("gradebook.db", "hidden.json") or "grading" in top:
            hits.append(p)
        elif f.endswith((".ipynb", ".json", ".py")):
            try:
                text = open(p, errors="replace").read(2_000_000)
            except OSError:
                continue
            if "BEGIN HIDDEN TESTS" in text or "BEGIN SOLUTION" in text:
                hits.append(p)
                if f.endswith(".ipynb"):
                    for c in json.loads(text)["cells"]:
                        if c.get("metadata", {}).get("nbgrader", {}).get("solution"):
                            exec("".join(c["source"]).replace("### BEGIN SOLUTION", ""))
print("HIDDEN", hits[:20])
'''

# Send 100 x 1 MB straight on the kernel's IOPub socket (past the print cap), plus errors
# and displays of 1 MB each.
IOPUB = r'''
k = get_ipython().kernel
parent = k.get_parent("shell")
for _ in range(100):
    k.session.send(k.iopub_socket, "stream", {"name": "stdout", "text": "x" * 1_000_000},
                   parent=parent)
for _ in range(20):
    k.session.send(k.iopub_socket, "error", {"ename": "E", "evalue": "y" * 1_000_000,
                   "traceback": ["z" * 1_000_000]}, parent=parent)
for _ in range(30):
    k.session.send(k.iopub_socket, "display_data", {"data": {"text/plain": "w" * 1_000_000},
                   "metadata": {}, "transient": {"display_id": "d"}}, parent=parent)
    k.session.send(k.iopub_socket, "update_display_data", {"data": {"text/plain": "v" * 1_000_000},
                   "metadata": {}, "transient": {"display_id": "d"}}, parent=parent)
print("SENT")
'''


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _text(nb_path: Path) -> str:
    nb = nbformat.read(str(nb_path), as_version=4)
    return "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))


def _line(text: str, word: str) -> str:
    return next((ln for ln in text.splitlines() if ln.startswith(word + " ")), "")


@pytest.fixture(scope="module")
def batch(root, tmp_path_factory):
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("holds")
    subs, out = tmp / "submitted", tmp / "grading" / "results"
    ref, blank = S.reference(root), S.release(root)
    victim_nb = S.put(subs, "victim", ref)
    S.put(subs, "victim-2", ref)
    S.put(subs, "blank-peer", blank)
    # a classmate's result from an earlier run, and a host file: neither may change
    old = out / "earlier" / f"{S.DAY}.json"
    old.parent.mkdir(parents=True)
    old.write_text(f'{{"student": "earlier", "day": "{S.DAY}", "status": "graded"}}')
    sentinel = tmp / "host-file.txt"
    sentinel.write_text("instructor's file")
    os.chmod(sentinel, 0o600)
    S.put(subs, "links", S.with_cell(ref, LINKS.replace(
        "@ARGS@", repr((str(victim_nb), str(old), str(sentinel))))))
    lim = S.with_cell(ref, LIMITS_CELL.replace("@ARGS@", repr(str(root))))
    lim.cells.append(nbformat.v4.new_code_cell(TRIP_DISK))
    lim.cells.append(nbformat.v4.new_code_cell(TRIP_PROCS))
    S.put(subs, "limits", lim)
    S.put(subs, "reads", S.with_cell(blank, READS))
    S.put(subs, "iopub", S.with_cell(ref, IOPUB))
    before = {p: (_sha(p), p.stat().st_mode) for p in (victim_nb, old, sentinel)}
    results = pipeline.grade(root, subs, days=[S.DAY], jobs=2, results_dir=out, sandbox=True,
                             limits=LIMITS)
    return {"by": {r.student: r for r in results}, "out": out, "before": before,
            "full": pipeline.max_score(root, S.DAY)}


def _classmates_untouched(batch):
    for path, (sha, mode) in batch["before"].items():
        assert _sha(path) == sha and path.stat().st_mode == mode, path
    for s in ("victim", "victim-2"):
        r = batch["by"][s]
        assert (r.status, r.score, r.flags) == ("graded", batch["full"], []), r
    assert batch["by"]["blank-peer"].score == 0


@pytest.mark.slow
def test_links_written_by_the_kernel_reach_nothing(batch):
    """The kernel links its notebook, kernel.log and result files to a classmate's notebook,
    a classmate's result, a host file and /dev/zero: are all of them untouched, and is the
    attacker graded normally (no worker killed, no classmate's score in its detail)?"""
    text = _text(batch["out"] / "links" / f"{S.DAY}.ipynb")
    assert int(_line(text, "LINKED").split()[1]) > 0  # the attack did run
    assert "ESCAPED" not in text and text.count("BLOCKED") == 6, text[-2000:]
    r = batch["by"]["links"]
    assert r.status == "graded" and r.score == batch["full"], r
    assert "victim" not in r.detail and "earlier" not in r.detail
    _classmates_untouched(batch)


@pytest.mark.slow
def test_limits_bite(batch):
    """Processes, /dev/shm, total bytes written: does each stop at its limit, with a flag
    for the limits that tripped, as an unprivileged uid with nothing of the checkout's path
    in its environment?"""
    text = _text(batch["out"] / "limits" / f"{S.DAY}.ipynb")
    assert int(_line(text, "UID").split()[1]) != 0
    assert _line(text, "ENVLEAK") == "ENVLEAK []"
    assert 0 < int(_line(text, "PROCS").split()[1]) < LIMITS.processes, text[-1500:]
    assert int(_line(text, "SHM").split()[1]) <= LIMITS.shm
    assert 0 < int(_line(text, "DISK").split()[1]) <= LIMITS.disk
    r = batch["by"]["limits"]
    assert r.status == "graded" and r.score == batch["full"], r
    assert any("disk limit" in f for f in r.flags), r.flags
    assert any("process limit" in f for f in r.flags), r.flags
    _classmates_untouched(batch)


@pytest.mark.slow
def test_instructor_files_are_out_of_reach(batch):
    """Walking the whole file system, does a blank submission find any gradebook, grading
    cache, source notebook or hidden test, and so earn anything?"""
    text = _text(batch["out"] / "reads" / f"{S.DAY}.ipynb")
    assert _line(text, "HIDDEN") == "HIDDEN []", text[-2000:]
    assert batch["by"]["reads"].score == 0


@pytest.mark.slow
def test_iopub_flood_is_capped(batch):
    """100 MB of streams, errors and displays sent straight on the IOPub socket: is the
    graded notebook bounded and flagged as truncated, with the tests still scored?"""
    nb_path = batch["out"] / "iopub" / f"{S.DAY}.ipynb"
    assert nb_path.stat().st_size < 3 * LIMITS.output, nb_path.stat().st_size
    r = batch["by"]["iopub"]
    assert r.status == "graded" and r.score == batch["full"], r
    assert any("truncated" in f for f in r.flags), r.flags
    _classmates_untouched(batch)


def test_lms_names_are_filed_only_when_unambiguous(root, tmp_path):
    """A student uploads a file named ``x_victim_attempt_<time>_day03...``: is it never
    filed under the victim, is the victim's own file kept, and is the odd name reported?"""
    days = ["day02_queries_keys_values", S.DAY]
    ref = S.reference(root)
    good, evil = tmp_path / "good.ipynb", tmp_path / "evil.ipynb"
    nbformat.write(ref, str(good))
    nbformat.write(S.release(root), str(evil))
    stamp = "2026-01-05-10-00-00"
    with zipfile.ZipFile(tmp_path / "lms.zip", "w") as z:
        z.write(good, f"day03_victim_attempt_{stamp}_{S.DAY}.ipynb")
        z.write(evil, f"day03_mallory_attempt_{stamp}_x_victim_attempt_2026-09-09-09-09-09_"
                      f"{S.DAY}.ipynb")
        z.write(evil, f"homework_3_victim_attempt_{stamp}_{S.DAY}.ipynb")
        z.write(good, f"{S.DAY}_john_smith_attempt_{stamp}_{S.DAY}.ipynb")
    problems: list[str] = []
    subs = unzip_submissions(tmp_path / "lms.zip", tmp_path / "out", days, problems)
    got = sorted(str(p.relative_to(subs)) for p in subs.rglob("*.ipynb"))
    assert got == [f"john_smith/{S.DAY}/{S.DAY}.ipynb", f"victim/{S.DAY}/{S.DAY}.ipynb"]
    assert _sha(subs / "victim" / S.DAY / f"{S.DAY}.ipynb") == _sha(good)
    assert len(problems) == 2 and all("victim" in p for p in problems), problems
    assert isinstance(parse_lms_name("a_b_c_attempt_1_x.ipynb", days), str)
    assert parse_lms_name("day03_bob_attempt_1_x.ipynb", days) == ("bob", S.DAY, "1",
                                                                    "x.ipynb")


def test_tampered_pays_nothing_until_accepted(root, tmp_path, capsys):
    """Does a tampered result pay 0 in grades.csv, show its evidence to the instructor, and
    pay its points once accepted (for that very submission only)?"""
    from autograder.__main__ import main

    out = tmp_path / "grading"
    cheat = pipeline.Result("mallory", S.DAY, "tampered", 7.0, 7.0, key="k1",
                            flags=["cell 3 line 1: replaces a torch comparison function"])
    honest = pipeline.Result("alice", S.DAY, "graded", 5.0, 7.0, key="k2")
    for r in (cheat, honest):
        pipeline._atomic_write_json(out / "results" / r.student / f"{r.day}.json",
                                    r.to_json())
    pipeline.write_csv([cheat, honest], [S.DAY], out / "grades.csv")
    rows = (out / "grades.csv").read_text().splitlines()
    assert rows[1:] == ["alice,5,5,7", "mallory,0,0,7"]
    args = ["accept", "mallory", "3", "--output", str(out), "--root", str(root)]
    assert main(args) == 0
    assert "replaces a torch comparison" in capsys.readouterr().out
    assert "mallory,0,0,7" in (out / "grades.csv").read_text()  # not without --yes
    assert main([*args, "--yes"]) == 0
    assert "mallory,7,7,7" in (out / "grades.csv").read_text()
    assert acceptance.load(out / "accepted.json") == {("mallory", S.DAY, "k1")}
    # a new submission (another key) is not covered by the old acceptance
    again = pipeline.Result("mallory", S.DAY, "tampered", 7.0, 7.0, key="k3")
    assert acceptance.paid(again, acceptance.load(out / "accepted.json")) == 0.0


UNPRIVILEGED = r'''
import sys
sys.path.insert(0, {fixtures!r})
from pathlib import Path
import submissions as S
from autograder.grading import pipeline
from autograder.sandbox import GiB, Limits

HOOK = """
import os
for d in (os.path.expanduser("~/.ipython/profile_default/startup"),
          os.path.join(os.environ.get("IPYTHONDIR", "/tmp/ipython"), "profile_default/startup"),
          "/tmp/ipython/profile_default/startup", os.getcwd()):
    try:
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, "00-auto" + "grader.py" if "startup" in d else "x.py")
        if os.path.exists(p):
            os.remove(p)
        with open(p, "w") as f:
            f.write("raise SystemExit(1)")
        os.chmod(p, 0o444)
        os.chmod(d, 0o555)
    except OSError:
        pass
print("UID", os.getuid())
"""
# the kernel's uid is the grader's: a key left in its keyring would reach every later kernel
HOOK += S.PROBE

def main():
    root, tmp = Path({root!r}), Path({tmp!r})
    ref = S.reference(root)
    S.put(tmp / "subs", "attacker", S.with_cell(ref, HOOK))
    for i in range(3):
        S.put(tmp / "subs", f"peer{{i}}", ref)
    res = pipeline.grade(root, tmp / "subs", days=[S.DAY], jobs=1, results_dir=tmp / "out",
                         sandbox=True, limits=Limits(memory=3 * GiB, cell_timeout=60,
                                                     notebook_timeout=150))
    for r in res:
        print("RESULT", r.student, r.status, r.score, r.flags)
    nb = (tmp / "out" / "attacker" / (S.DAY + ".ipynb")).read_text()
    print("KEYRING", "PROBE keyring BLOCKED" in nb and "PROBE keyring ESCAPED" not in nb)

if __name__ == "__main__":
    main()
'''


@pytest.fixture
def shared_tmp():
    """A folder under /tmp that another uid can reach (pytest's tmp_path is 0700 above)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="tfs-unprivileged-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.slow
def test_unprivileged_grader_keeps_kernels_apart(root, shared_tmp):
    """Graded by an unprivileged user, one worker, the attacker first: does a read-only
    IPython start-up file it leaves behind reach the next three students (it must not)?"""
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(why)
    if os.geteuid() == 0:
        # CI runs as root: run the grader as uid 4242 (no account needed: setpriv sets the
        # ids) with root's 0700 home replaced by one that shows only the Python install.
        uid, home = 4242, os.path.expanduser("~")
        run_as = [sandbox.bwrap_path(), "--dev-bind", "/", "/", "--perms", "0755",
                  "--tmpfs", home]
        for p in dict.fromkeys([sys.prefix, sys.base_prefix]):
            if p.startswith(home + os.sep):
                for parent in reversed(Path(p).parents):
                    if str(parent).startswith(home + os.sep):
                        run_as += ["--perms", "0755", "--dir", str(parent)]
                run_as += ["--ro-bind", p, p]
        run_as += ["--", "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                   "--"]
        os.chown(shared_tmp, uid, uid)
    else:
        run_as = []
    script = shared_tmp / "run.py"
    script.write_text(UNPRIVILEGED.format(fixtures=str(Path(__file__).parent / "fixtures"),
                                          root=str(root), tmp=str(shared_tmp)))
    env = {k: v for k, v in os.environ.items() if k not in ("TFS_GRADING_CACHE",)}
    env.update(HOME=str(shared_tmp), TFS_GRADING_CACHE=str(shared_tmp / "cache"))
    proc = subprocess.run([*run_as, sys.executable, str(script)], capture_output=True,
                          text=True, timeout=900, env=env, cwd=str(shared_tmp))
    assert "KEYRING True" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = [ln.split(" ", 4) for ln in proc.stdout.splitlines() if ln.startswith("RESULT")]
    assert len(lines) == 4, proc.stdout[-2000:] + proc.stderr[-3000:]
    full = pipeline.max_score(root, S.DAY)
    for _, student, status, score, flags in lines:
        assert (status, float(score)) == ("graded", full), (student, status, score, flags)
        if student != "attacker":
            assert flags == "[]", (student, flags)
