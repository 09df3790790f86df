"""``python -m autograder record``: run every answer key and write the course's measured record.

For each profile asked for (``cpu``, ``grading``, ``gpu``) and each day, the answer key from
``solutions/`` runs top to bottom in a fresh kernel, in a temporary copy of ``solutions/`` (so
later days load earlier days' answer keys, as a learner's folder does, and nothing is written
into the repository), with ``COURSE_PROFILE`` set. The figures its cells pass to
:func:`course.record.report` and the wall time of the whole notebook (kernel start included) go
into ``course/record.json``; the table of ``docs/record.md`` between ``<!-- record -->`` and
``<!-- /record -->`` is rewritten from it. Days and profiles not run keep their earlier entries.

Measure on an idle machine: two runs at once slow each other. Data comes from the public URLs,
or from ``COURSE_DATA_DIR``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from autograder.core.course import PipelineError, notebook_name, resolve_days
from course.profile import PROFILES
from course.record import FORMATS, RECORD_FILE, describe

README_START, README_END = "<!-- record -->", "<!-- /record -->"
# The page that holds the record's table, between those markers (relative to the course root)
RECORD_PAGE = Path("docs") / "record.md"
# A notebook of the cpu profile must run in this many seconds on 2 cores (docs/record.md,
# course/profile.py)
CPU_NOTEBOOK_LIMIT_S = 600


def machine() -> dict:
    """What measured: CPU model, cores, GPU, PyTorch and Python versions."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }


def run_day(folder: Path, day: str, profile: str, timeout: int) -> dict:
    """Execute ``folder/day/day.ipynb`` in ``profile``; its figures and whole-notebook seconds.

    Raises:
        PipelineError: when a cell fails (the message names the cell and the error).
    """
    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    path = folder / day / notebook_name(day)
    nb = nbformat.read(path, as_version=4)
    figures_file = folder / f".{day}-{profile}.jsonl"
    figures_file.unlink(missing_ok=True)
    # COURSE_STOP_ON_ERROR: a failed check or any error stops the run, as a record needs (a
    # learner's Run All goes on to the end instead: course.checks.install_learner_display).
    env = {"COURSE_PROFILE": profile, "COURSE_RECORD_OUT": str(figures_file),
           "COURSE_SELFCHECK_STANDBY": "0", "COURSE_STOP_ON_ERROR": "1", "MPLBACKEND": "Agg"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        # ipc: a local kernel needs no TCP port (and ipykernel then does not warn about one)
        km = KernelManager(kernel_name="python3", transport="ipc",
                           connection_file=str(folder / f".{day}-kernel.json"))
        client = NotebookClient(nb, km=km, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        start = time.perf_counter()
        try:
            client.execute()
        except CellExecutionError as exc:
            raise PipelineError(f"{day} failed in the {profile} profile:\n{exc}") from None
        finally:
            if km.has_kernel:       # a kernel manager handed to nbclient is ours to stop
                km.shutdown_kernel(now=True)
        seconds = time.perf_counter() - start
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    figures = {}
    if figures_file.exists():
        for line in figures_file.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if item["day"] != day.split("_")[0] or item["name"] not in FORMATS:
                raise PipelineError(f"{day} reported {item['day']}/{item['name']}, which the "
                                    "record does not know (course/record.py FORMATS)")
            figures[item["name"]] = round(item["value"], 6)
    return {"notebook_seconds": round(seconds, 1), "figures": figures}


def _seconds(entry: dict) -> str:
    return f"{entry['notebook_seconds']:.0f} s" if entry else "not measured"


def render_table(record: dict) -> str:
    """The record's table: per day, the cpu profile's figures and both profiles' times."""
    cpu = record["profiles"].get("cpu", {}).get("days", {})
    grading = record["profiles"].get("grading", {}).get("days", {})
    gpu = record["profiles"].get("gpu", {})
    m = record["machine"]
    lines = [
        f"Measured on {m['cores']} cores of an idle {m['cpu']}, PyTorch {m['torch']} "
        f"(`course/record.json`, written by `python -m autograder record`; "
        f"`cpu` profile measured {record['profiles'].get('cpu', {}).get('measured')}). "
        "The `gpu` profile: "
        + (f"measured {gpu['measured']} on {gpu.get('machine', {}).get('gpu')}."
           if gpu.get("measured") else "not measured yet."),
        "",
        "| day | what the `cpu` profile's run reports | whole notebook, `cpu` "
        "| `grading` profile |",
        "|---|---|---|---|",
    ]
    for day in sorted(set(cpu) | set(grading)):
        figures = cpu.get(day, {}).get("figures", {})
        said = "; ".join(describe(name, figures[name]) for name in FORMATS
                         if name in figures) or "—"

        lines.append(f"| {day} | {said} | {_seconds(cpu.get(day, {}))} | "
                     f"{_seconds(grading.get(day, {}))} |")
    return "\n".join(lines)


def update_readme(readme: Path, record: dict) -> None:
    """Rewrite the page's text between the record markers with :func:`render_table`."""
    text = readme.read_text(encoding="utf-8")
    if README_START not in text or README_END not in text:
        raise PipelineError(f"{readme} has no {README_START} ... {README_END} block")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{render_table(record)}\n{README_END}{tail}",
                      encoding="utf-8")


def record(root: Path, profiles: list[str], days: list[str] | None = None,
           timeout: int = 900, path: Path = RECORD_FILE) -> dict:
    """Measure ``days`` (default: all) in each of ``profiles``; write the record and its table."""
    for name in profiles:
        if name not in PROFILES:
            raise PipelineError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}")
    if "gpu" in profiles:
        import torch

        if not torch.cuda.is_available():
            raise PipelineError("the gpu profile needs a CUDA device")
    days = resolve_days(root, days)
    saved = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    result = {"about": "Written by `python -m autograder record`; do not edit by hand.",
              "machine": saved.get("machine", {}),
              "profiles": saved.get("profiles", {})}
    for name in PROFILES:   # a profile never measured is there, and says so
        result["profiles"].setdefault(name, {"measured": None, "days": {}})
    here = machine()
    with tempfile.TemporaryDirectory(prefix="tfs-record-") as tmp:
        folder = Path(tmp) / "course"
        shutil.copytree(root / "solutions", folder)
        for name in profiles:
            entry = result["profiles"][name]
            for day in days:
                print(f"{name:>8} {day} ...", end=" ", flush=True)
                entry["days"][day] = run_day(folder, day, name, timeout)
                print(f"{entry['days'][day]['notebook_seconds']:.0f} s "
                      f"{entry['days'][day]['figures']}", flush=True)
            entry["measured"] = datetime.date.today().isoformat()
            entry["machine"] = here
            if name == "cpu":
                result["machine"] = here
    if not result["machine"]:
        result["machine"] = here
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    update_readme(root / RECORD_PAGE, result)
    return result


def main(args) -> int:
    result = record(args.root, args.profile or ["cpu", "grading"], args.day)
    slow = [day for day, entry in result["profiles"].get("cpu", {}).get("days", {}).items()
            if entry["notebook_seconds"] > CPU_NOTEBOOK_LIMIT_S]
    print(f"wrote {RECORD_FILE} and the table of {RECORD_PAGE}")
    if slow:
        print(f"over {CPU_NOTEBOOK_LIMIT_S} s in the cpu profile: {', '.join(slow)}",
              file=sys.stderr)
        return 1
    return 0
