"""Does the sandbox stop student code from reading, writing or reaching what it must not?

The escape attempts run as one extra cell of a Day 3 submission, graded in the sandbox next
to another student's submission; each attempt prints ESCAPED or BLOCKED.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import threading
from pathlib import Path

import nbformat
import pytest

from autograder import sandbox
from autograder.grading import pipeline
from autograder.grading import template as grading_template
from autograder.grading.pipeline import PipelineError
from autograder.sandbox import GiB, Limits, kernel_startup

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import submissions as S  # noqa: E402

ESCAPES = r'''
import glob, os, socket, subprocess
def attempt(name, fn):
    try:
        got = fn()
    except Exception as exc:
        print(f"BLOCKED {name}: {type(exc).__name__}")
        return
    print(f"ESCAPED {name}: {str(got)[:200]}" if got else f"BLOCKED {name}: nothing")

ROOT, SUBS, OUT, PORT = @ARGS@
attempt("read source/", lambda: os.listdir(os.path.join(ROOT, "source")))
attempt("read solutions/", lambda: os.listdir(os.path.join(ROOT, "solutions")))
attempt("read hidden test file", lambda: open(os.path.join(ROOT, "autograder", "judge", "checks",
                                                             "day03.py")).read())
attempt("find hidden tests on disk", lambda: [p for top in ("/work", "/tmp", "/root", "/home",
        "/srv", "/opt", "/mnt") for p in glob.glob(top + "/**/checks/day03.py", recursive=True)
        if "/course/" not in p])
attempt("read the gradebook", lambda: [p for p in glob.glob("/tmp/**/gradebook.db",
        recursive=True) + glob.glob(os.path.join(ROOT, "**", "gradebook.db"), recursive=True)
        if "site-packages" not in p])  # nbgrader ships a test gradebook of its own
attempt("read hidden module source", lambda: __import__("inspect").getsource(
        __import__("autograder.judge.checks.day03", fromlist=["x"])))
attempt("other students", lambda: os.listdir(SUBS))
attempt("other students via /proc", lambda: [p for p in glob.glob("/proc/[0-9]*/cwd")
        if os.path.realpath(p) != os.getcwd() and os.listdir(p)])
attempt("results folder", lambda: os.listdir(OUT))
def write_outside():
    with open(os.path.join(ROOT, "HACKED"), "w") as f:
        f.write("x")
    return "wrote " + ROOT
attempt("write in the course", write_outside)
def write_system():
    with open("/usr/HACKED", "w") as f:
        f.write("x")
    return "wrote /usr"
attempt("write the system", write_system)
attempt("network to the host", lambda: socket.create_connection(("127.0.0.1", PORT), 3))
attempt("network outside", lambda: socket.create_connection(("1.1.1.1", 53), 3))
attempt("home folder", lambda: [p for p in os.listdir(os.path.expanduser("~"))])
'''


@pytest.fixture(scope="module")
def escaped(root, tmp_path_factory):
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("sandbox")
    subs = tmp / "submitted"
    out = tmp / "out"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    hits = []
    server.settimeout(0.5)

    def accept():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                hits.append(conn)
            except OSError:
                continue

    stop = threading.Event()
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    code = ESCAPES.replace("@ARGS@", repr((str(root), str(subs), str(out),
                                           server.getsockname()[1])))
    ref = S.reference(root)
    S.put(subs, "attacker", S.with_cell(ref, code))
    S.put(subs, "victim", ref)
    results = pipeline.grade(root, subs, days=[S.DAY], jobs=2, results_dir=out, sandbox=True,
                             limits=Limits(memory=3 * GiB, cell_timeout=30,
                                           notebook_timeout=90))
    stop.set()
    server.close()
    nb = nbformat.read(str(out / "attacker" / f"{S.DAY}.ipynb"), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    return {"text": text, "hits": hits, "by": {r.student: r for r in results}, "root": root}


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "read source/", "read solutions/", "read hidden test file", "find hidden tests on disk",
    "read the gradebook", "read hidden module source", "other students",
    "other students via /proc", "results folder", "write in the course", "write the system",
    "network to the host", "network outside", "home folder"])
def test_escape_is_blocked(escaped, name):
    """Is this escape attempt blocked inside the sandbox?"""
    line = next((ln for ln in escaped["text"].splitlines() if f" {name}:" in ln), None)
    assert line is not None, escaped["text"][:2000]
    assert line.startswith("BLOCKED"), line


@pytest.mark.slow
def test_sandboxed_grading_still_scores(escaped):
    """Do both submissions still grade in full, with nothing left outside the sandbox?"""
    full = pipeline.max_score(escaped["root"], S.DAY)
    assert escaped["by"]["victim"].status == "graded"
    assert escaped["by"]["victim"].score == full and escaped["by"]["victim"].sandboxed
    assert escaped["by"]["attacker"].score == full
    assert not (escaped["root"] / "HACKED").exists()
    assert not escaped["hits"]


def test_grade_refuses_without_bubblewrap(root, tmp_path, monkeypatch):
    """Without bubblewrap, does grade refuse (and say to install it or pass --no-sandbox)?"""
    monkeypatch.setattr(sandbox, "available", lambda: (False, "bubblewrap is not installed"))
    (tmp_path / "s" / S.DAY).mkdir(parents=True)
    with pytest.raises(PipelineError, match="--no-sandbox.*|.*Install bubblewrap"):
        pipeline.grade(root, tmp_path / "s", days=[S.DAY], sandbox=True)
    assert pipeline.sandbox_mode("auto") is False
    assert pipeline.sandbox_mode(False) is False


def test_cli_refuses_without_bubblewrap(root, tmp_path, monkeypatch, capsys):
    """Does `grade` exit with status 2 and explain, instead of running untrusted code?"""
    from autograder.__main__ import main

    monkeypatch.setattr(sandbox, "available", lambda: (False, "bubblewrap is not installed"))
    (tmp_path / "s" / "alice" / S.DAY).mkdir(parents=True)
    rc = main(["grade", str(tmp_path / "s"), "--day", "3", "--output", str(tmp_path / "o"),
               "--root", str(root)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "nothing was graded" in err and "the sandbox cannot run" in err
    assert "--no-sandbox" in err


def test_bwrap_command_hides_and_binds(tmp_path):
    """Does the bwrap command line hide the course, bind back course/ read-only, cap the
    kernel's tmpfs, cut the network, and bind no host folder writable?"""
    course = tmp_path / "course-root"
    (course / "course").mkdir(parents=True)
    spec = sandbox.Spec(sandbox=True, limits=Limits().to_json(), private=str(tmp_path / "p"),
                        hide=[str(course)],
                        ro_bind=[[str(course / "course"), "/tmp/.lib/course"]])
    argv = sandbox.bwrap_argv(spec, "bwrap")
    joined = " ".join(argv)
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--cap-drop" in argv
    assert f"--size {Limits().disk} --perms 1777 --tmpfs /tmp" in joined
    assert f"--size {Limits().shm} --perms 1777 --tmpfs /dev/shm" in joined
    assert f"--ro-bind {course / 'course'} /tmp/.lib/course" in joined
    assert "--bind " not in joined  # nothing of the host is writable
    assert "--clearenv" in argv


def test_nothing_of_the_grading_library_reaches_the_kernel(root, tmp_path):
    """The kernel's start-up script carries no grading code, and the grading template holds
    no bundle of hidden modules: the hidden tests are judged outside the kernel."""
    assert "autograder" not in kernel_startup.STARTUP.replace("# autograder start-up", "")
    rest = kernel_startup.STARTUP.split("import os, sys", 1)[1]
    # importlib: a standby's kernel imports the libraries named in TFS_PREIMPORT, which only
    # a self-check's standby sets
    assert re.findall(r"^\s*(?:import|from)\s+(\S+)", rest, re.M) == ["importlib"]
    template = tmp_path / "template"
    grading_template.prepare_template(root, [S.DAY], template)
    files = [p for p in template.rglob("*") if p.is_file()]
    assert files and not [p for p in files if p.suffix == ".py" or b"def check_" in p.read_bytes()]


def test_folders_made_for_binds_are_read_only(tmp_path):
    """With a folder bound back inside a hidden one (a .venv inside the course), can the kernel
    write next to it? bwrap creates the parents in the tmpfs; they must not be writable."""
    ok, why = sandbox.available()
    if not ok:
        pytest.skip(why)
    import subprocess

    course = tmp_path / "course-root"
    (course / ".venv").mkdir(parents=True)
    spec = sandbox.Spec(sandbox=True, limits=Limits().to_json(), private=str(tmp_path / "p"),
                        hide=[str(course)], ro_bind=[[str(course / ".venv")] * 2])
    as_root = os.geteuid() == 0  # as in grading: bwrap as root, the kernel as its own uid
    argv = sandbox.bwrap_argv(spec, sandbox.bwrap_path(), as_root)
    script = (f"touch {course}/HACKED 2>/dev/null && echo WROTE-COURSE; "
              f"touch {course}/.venv/HACKED 2>/dev/null && echo WROTE-VENV; "
              "touch /tmp/work/ok && echo WROTE-WORK")
    cmd = sandbox.kernel_command(["sh", "-c", script], 200_123 if as_root else None)
    out = subprocess.run([*argv, "--", *cmd], capture_output=True, text=True,
                         timeout=60).stdout
    assert out.split() == ["WROTE-WORK"], out
    assert not (course / "HACKED").exists()


def test_kernels_find_the_datasets_without_the_graders_home(monkeypatch, tmp_path):
    """A kernel's HOME is its own: is the user's dataset cache named for an unsandboxed kernel,
    and bound folder by folder (never the cache's parent) for a sandboxed one?"""
    from autograder.sandbox import kernel_files

    (tmp_path / "cache" / "mnist").mkdir(parents=True)
    (tmp_path / "cache" / "grading").mkdir()  # something else in the cache folder
    monkeypatch.delenv("COURSE_DATA_DIR", raising=False)
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    assert kernel_files.unsandboxed_data_environment() == {
        "COURSE_CACHE_DIR": str(tmp_path / "cache")}
    binds, env = kernel_files.dataset_binds()
    assert binds == [[str(tmp_path / "cache" / "mnist"), "/tmp/.data/mnist"]]
    assert env["COURSE_DATA_DIR"] == "/tmp/.data"
    monkeypatch.delenv("COURSE_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert "COURSE_CACHE_DIR" in kernel_files.unsandboxed_data_environment()
