"""Say it before it costs an hour: what ``grade``, ``verify`` and ``demo`` need, checked first.

:func:`check` looks, before the first notebook runs, at what a batch needs from this machine
and stops with one message listing every problem and its fix:

- the datasets the days use (``course.data``), verified by checksum both as the judge loads
  them (here, network allowed: a download fills the cache) and as a kernel sees them (the
  sandbox has no network: its mirror folders and the copy shipped with the course);
- bubblewrap, when the sandbox is required;
- the grading template (nbgrader's generated assignment,
  :func:`autograder.grading.template.template_cache`),
  made once per version of the course.

The same data checks tell a grading machine's fault from the learner's after a notebook ran
(:func:`autograder.grading.score._status_from`): a ``DatasetUnavailable`` that this machine confirms
is an ``environment-error`` (nothing charged, graded again by the next ``grade``).
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from autograder.core.records import Status

#: What fixes a dataset the grading machine lacks.
DATASET_FIX = ("fix: restore the copy shipped with the course (`git checkout -- course/datasets` "
               "in the checkout, or reinstall the course), or set COURSE_DATA_DIR to a folder "
               "holding mnist/t10k-*.gz and tinyshakespeare/input.txt, or run "
               "`python -m autograder fetch-data` on this machine with the network reachable")
#: What to do once an environment fault is fixed.
RERUN = ("then run `python -m autograder grade` again: it grades every environment-error "
         "result again, and nothing was charged meanwhile")

# Names in a day's source notebook or checks that load a dataset of the course's main path.
_USES = {
    ("load_mnist(", "trusted_mnist("): ("mnist-test-images", "mnist-test-labels"),
    ("load_tinyshakespeare(", "trusted_tinyshakespeare("): ("tinyshakespeare",),
}


def needed_datasets(root: Path, days: list[str]) -> list[str]:
    """The registry files (``course.data.SHIPPED``) the days' notebooks or checks load."""
    checks = Path(__file__).parents[1] / "judge" / "checks"
    found: set[str] = set()
    for day in days:
        texts = [p.read_text(encoding="utf-8", errors="replace")
                 for p in sorted((root / "source" / day).glob("*.ipynb"))]
        stem = day.split("_", 1)[0]
        texts += [p.read_text(encoding="utf-8") for p in sorted(checks.glob(f"{stem}*.py"))]
        for calls, names in _USES.items():
            if any(c in t for t in texts for c in calls):
                found.update(names)
    from course.data import SHIPPED

    return [n for n in SHIPPED if n in found]


def fetch_problems(names: list[str], offline: bool = False) -> list[str]:
    """One line per registry file that does not load verified (here, with this process's
    ``COURSE_CACHE_DIR`` and ``COURSE_DATA_DIR``); [] when all do."""
    from course.data import REGISTRY, DatasetError, fetch

    problems = []
    for name in names:
        entry = REGISTRY[name]
        try:
            fetch(name, progressbar=False, offline=offline)
        except DatasetError as exc:
            lines = str(exc).splitlines()
            why = next((ln.strip() for ln in lines if ln.strip().startswith("errors:")),
                       lines[0] if lines else "")
            problems.append(f"dataset {entry.dataset} ({entry.filename}) unavailable: "
                            f"{type(exc).__name__}: {why[:500]}")
        except OSError as exc:  # an unwritable cache folder, a full disk
            problems.append(f"dataset {entry.dataset} ({entry.filename}): cannot write the "
                            f"dataset cache: {type(exc).__name__}: {exc}")
    return problems


@contextlib.contextmanager
def _environ(values: dict[str, str | None]):
    """``os.environ`` with ``values`` set (None: unset) inside the block, restored after."""
    from unittest import mock

    with mock.patch.dict(os.environ):
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield


def kernel_data_problems(names: list[str], sandboxed: bool) -> list[str]:
    """:func:`fetch_problems` for the files as a grading kernel sees them, offline.

    Sandboxed: only the dataset folders :func:`autograder.sandbox.kernel_files.dataset_binds`
    shows it
    (the host's mirror, else its verified cache) and the copy shipped with the course, with
    an empty cache of its own. Unsandboxed: this machine's cache and mirror, as the kernel gets
    them (:func:`autograder.sandbox.kernel_files.unsandboxed_data_environment`).
    """
    from course.data import CACHE_ENV, MIRROR_ENV

    if not names:
        return []
    if not sandboxed:
        from autograder.sandbox.kernel_files import unsandboxed_data_environment

        env = unsandboxed_data_environment()
        with _environ({MIRROR_ENV: env.get(MIRROR_ENV), CACHE_ENV: env.get(CACHE_ENV)}):
            return fetch_problems(names, offline=True)
    from autograder.sandbox.kernel_files import dataset_binds

    binds, _ = dataset_binds()
    with tempfile.TemporaryDirectory(prefix="tfs-kernel-data-") as tmp:
        view = Path(tmp) / "data"
        view.mkdir()
        for source, inner in binds:
            (view / Path(inner).name).symlink_to(source, target_is_directory=True)
        with _environ({MIRROR_ENV: str(view), CACHE_ENV: str(Path(tmp) / "cache")}):
            return fetch_problems(names, offline=True)


def dataset_problems(root: Path, days: list[str], sandboxed: bool) -> list[str]:
    """What of the days' datasets fails to load for the judge (network allowed) or for their
    kernels (offline, as sandboxed or not)."""
    names = needed_datasets(root, days)
    problems = fetch_problems(names)
    return problems or kernel_data_problems(names, sandboxed)


def check(root: Path, days: list[str], sandbox: bool | str, template: bool = True) -> bool:
    """Check what grading ``days`` needs; return whether kernels will be sandboxed.

    Raises:
        PipelineError: one message naming every problem found and its fix.
    """
    from autograder import sandbox as sb
    from autograder.core.course import PipelineError

    problems = []
    sandboxed = False
    if sandbox == "auto":
        sandboxed = sb.available()[0]
    elif sandbox:
        ok, why = sb.available()
        sandboxed = ok
        if not ok:
            problems.append(f"the sandbox cannot run: {why}; fix: `apt-get install bubblewrap` "
                            "(with util-linux's setpriv), or pass --no-sandbox to grade only "
                            "notebooks you trust")
    data = dataset_problems(root, days, sandboxed)
    if data:
        days_using = ", ".join(d.split("_", 1)[0] for d in days if needed_datasets(root, [d]))
        problems += data
        problems.append(f"{DATASET_FIX} (or grade the other days: --day; these need the "
                        f"data: {days_using})")
    if template and not problems:
        from autograder.grading import template

        try:
            template.template_cache(root, days)
        except Exception as exc:  # noqa: BLE001 - whatever stops nbgrader, said once
            problems.append(f"the grading template cannot be built (nbgrader generate_assignment"
                            f" of source/): {type(exc).__name__}: {str(exc)[:800]}; fix: "
                            "`python -m autograder build` shows which notebook fails")
    if problems:
        raise PipelineError("nothing was graded; before the first notebook:\n"
                            + "\n".join(f"  - {p}" for p in problems))
    return sandboxed


# How course.data's errors name a dataset: "the 'mnist' dataset file", "mnist: the copy from".
_DATASET_WORD = re.compile(r"'(\w+)' dataset|\b(\w+): the copy from")


def named_files(text: str) -> list[str]:
    """The registry files an error of ``course.data`` names (its file, registry name, or
    dataset); every shipped file when it names none."""
    from course.data import REGISTRY, SHIPPED

    files = [n for n, e in REGISTRY.items() if n in text or e.filename in text]
    if files:
        return files
    datasets = {m.group(1) or m.group(2) for m in _DATASET_WORD.finditer(text)}
    named = [n for n, e in REGISTRY.items() if e.dataset in datasets]
    return [n for n in named if n in SHIPPED] or ([] if named else list(SHIPPED))


# --------------------------------------------------------------------------- the control
# When nbgrader, the judge or a grading process fails on a submission, the machine is asked
# first: the day's answer key (else its blank notebook) is graded the same way, once per
# process while it grades. If it grades, the failure was the submission's doing (``rejected``,
# ``kernel-died`` for a grading process it killed, or the checks it tripped failed); only when
# the control fails too is it ``environment-error``.

CONTROL_STUDENT = "tfs-control"
_CONTROL_OK: set[tuple[str, str]] = set()   # (day, settings) whose control graded here


def control_job(day: str, settings: dict) -> dict:
    """A grading job for the day's control notebook under ``settings`` (the worker finds it
    itself: ``control`` set, no path)."""
    return {"student": CONTROL_STUDENT, "day": day, "path": None, "control": True, "key": "",
            "total": 0.0, "settings": settings, "seed": ""}


def control_failure(result: dict | None) -> str:
    """"" when a control's result (a Result as JSON; None: its grading process died or hung)
    shows the machine grades, else what failed, in words."""
    if result is None:
        return "the day's answer key could not be graded either (its grading process died)"
    if result.get("status") == Status.GRADED:
        return ""
    return (f"the day's answer key did not grade either ({result.get('status')}: "
            f"{one_line(result.get('detail', ''), 400)})")


def confirm_machine(day: str, settings: dict, grade) -> str:
    """Grade the control with ``grade(job) -> Result JSON`` unless it already graded in this
    process for these settings; "" when the machine grades, else what failed."""
    import json

    key = (day, json.dumps(settings, sort_keys=True, default=str))
    if key in _CONTROL_OK:
        return ""
    try:
        why = control_failure(grade(control_job(day, settings)))
    except Exception as exc:  # noqa: BLE001 - a control that crashes is the machine failing
        why = f"the day's answer key could not be graded either: {one_line(repr(exc))}"
    if not why:
        _CONTROL_OK.add(key)
    return why


def whose_failure(job: dict, what: str, grade) -> tuple[str, str]:
    """(status, detail) when grading ``job`` failed with ``what`` (nbgrader raised, wrote
    nothing readable...): ``rejected`` with the reason on one line when the control grades
    (:func:`confirm_machine`), else ``environment-error``. A control's own failure is the
    machine's."""
    what = one_line(what, 400)
    why = ("this was the machine's control" if job.get("control") else
           confirm_machine(job["day"], job["settings"], grade))
    if why:
        return Status.ENVIRONMENT_ERROR, f"{what}; {why}; {RERUN}"
    return Status.REJECTED, (f"this notebook could not be graded ({what}), while the day's answer "
                        "key grades on this machine: something in it (its cells, their "
                        "metadata or outputs) is the cause")


def after_death(job: dict, why: str, control: dict | None) -> dict:
    """The result (Result JSON) of ``job`` whose grading process died twice (``why``), given
    the control graded afterwards in another process (``control``: its result, None if it
    died or hung too): ``kernel-died`` with 0 when the control grades, else
    ``environment-error``."""
    from autograder.core.records import Result

    failure = control_failure(control)
    status, detail = (Status.ENVIRONMENT_ERROR, f"{why}; {failure}; {RERUN}") if failure else (
        Status.KERNEL_DIED, f"{why}, while the day's answer key grades in a fresh one: this "
                       "notebook stops its grading process (a crash, a limit, or its code)")
    return Result.failed(job, status, detail,
                         sandboxed=bool(job["settings"].get("sandbox"))).to_json()


def one_line(text: str, n: int = 300) -> str:
    """``text`` on one line, at most ``n`` characters (for a status's detail)."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"
