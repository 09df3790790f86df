"""Is the project installable the way the README and docs/learners.md say, with one source of
truth for versions?"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet


def _pyproject(root):
    return tomllib.loads((root / "pyproject.toml").read_text())


def _environment_pip_lines(root):
    text = (root / "environment.yml").read_text()
    pip_block = text.split("- pip:", 1)[1]
    return [m.group(1).strip() for m in re.finditer(r"^\s+- (.+)$", pip_block, re.M)]


def _pythons(root) -> list[str]:
    """The minor versions pyproject.toml's requires-python accepts ("3.11", ...)."""
    requires = SpecifierSet(_pyproject(root)["project"]["requires-python"])
    return [f"3.{m}" for m in range(30) if f"3.{m}.0" in requires]


def test_environment_python_matches_pyproject(root):
    """Does environment.yml ask for exactly the Pythons pyproject.toml accepts?"""
    m = re.search(r"^\s+- python([<>=!~][^\s#]*)", (root / "environment.yml").read_text(),
                  re.M)
    assert m, "environment.yml must name python>=...,<..."
    assert SpecifierSet(m.group(1)) == SpecifierSet(
        _pyproject(root)["project"]["requires-python"])


def _make_var(root, name: str) -> str:
    m = re.search(rf"^{name}\s*:=\s*(.*)$", (root / "Makefile").read_text(), re.M)
    assert m, f"the Makefile sets no {name}"
    return m.group(1).strip()


def test_makefile_looks_for_the_pythons_pyproject_accepts(root):
    """Do the Makefile's PY_MIN..PY_MAX and candidates (newest first) match requires-python,
    with no recipe calling a fixed interpreter?"""
    pythons = _pythons(root)
    assert pythons and pythons[0] == "3.11", pythons
    assert (_make_var(root, "PY_MIN"), _make_var(root, "PY_MAX")) == (pythons[0], pythons[-1])
    assert _make_var(root, "PY_CANDIDATES").split() == [
        f"python{v}" for v in reversed(pythons)] + ["python3"]
    text = (root / "Makefile").read_text()
    assert not re.search(r"^\t.*\bpython3\.\d+", text, re.M), "a recipe names a python3.x"
    for page in ("README.md", "docs/learners.md"):   # the front page and the install guide
        assert f"Python {pythons[0]} to {pythons[-1]}" in (root / page).read_text(), page


def _fake_python(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_does_make_find_a_python_or_say_what_to_install(root, tmp_path):
    """Does `make python` pass over a command that does not run (a pyenv shim of another
    version), take the next one in range, and say what to install when none is?"""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    _fake_python(bin_, "python3.13", "echo 'pyenv: python3.13: command not found' >&2; exit 127")
    _fake_python(bin_, "python3.12", f'exec {sys.executable} "$@"')
    _fake_python(bin_, "python3.10", "echo 'Python 3.10.13'; exit 1")
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHON", None)

    def make(*args):
        return subprocess.run(["make", "-s", "--no-print-directory", "-C", str(root), "python",
                               *args], capture_output=True, text=True, env=env, timeout=60)

    done = make("PY_CANDIDATES=python3.13 python3.12")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Python: {bin_ / 'python3.12'} (Python 3.")
    done = make("PY_CANDIDATES=python3.13 python3.10")
    assert done.returncode != 0
    assert "no Python 3.11 to" in done.stderr and "apt-get install python3" in done.stderr
    assert "make PYTHON=" in done.stderr
    done = make(f"PYTHON={bin_ / 'python3.10'}")
    assert done.returncode != 0 and "is not a Python 3.11 to" in done.stderr
    assert "Python 3.10.13" in done.stderr


def test_package_data_ships_the_datasets(root):
    """Does a non-editable install carry course/datasets/ (package-data globs)?"""
    globs = _pyproject(root)["tool"]["setuptools"]["package-data"]["course"]
    files = [p.relative_to(root / "course").as_posix()
             for p in (root / "course" / "datasets").rglob("*") if p.is_file()]
    assert files
    for f in files:
        assert any(fnmatch.fnmatch(f, g) for g in globs), f


def test_environment_installs_the_project_and_pins_nothing_else(root):
    """Does environment.yml install the project through pip, pinning only what pyproject allows?"""
    lines = _environment_pip_lines(root)
    assert "-e ." in lines or "." in lines, "environment.yml must install the project itself"
    reqs = [Requirement(d) for d in _pyproject(root)["project"]["dependencies"]]
    deps = {r.name: r for r in reqs}
    for line in lines:
        if line in ("-e .", "."):
            continue
        req = Requirement(line)
        assert req.name in deps, f"environment.yml lists {req.name}, which pyproject lacks"
        for spec in req.specifier:
            if spec.operator == "==":
                assert deps[req.name].specifier.contains(spec.version), (
                    f"environment.yml pins {line}, outside pyproject's {deps[req.name]}")


def test_torch_range_admits_the_cached_cpu_build(root):
    """Does pyproject's torch range accept 2.13.0, the CPU build the Makefile installs?"""
    deps = [Requirement(d) for d in _pyproject(root)["project"]["dependencies"]]
    torch_req = next(r for r in deps if r.name == "torch")
    assert torch_req.specifier.contains("2.13.0")
    assert "torch==2.13.0" in (root / "Makefile").read_text()


def test_ci_runs_the_readme_test_command(root):
    """Does .ci/run call `make test`, the command the README opens with?"""
    assert "make test" in (root / ".ci" / "run").read_text()
    readme = (root / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme


def test_every_package_the_code_imports_is_declared(root):
    """Is every third-party package that autograder/ or course/ imports a declared dependency
    of the project (not one that happens to come with another)?"""
    import ast
    import importlib.metadata as md

    imported = set()
    for path in [*(root / "autograder").rglob("*.py"), *(root / "course").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third = sorted(m for m in imported - set(sys.stdlib_module_names)
                   if m not in ("autograder", "course"))
    dists = md.packages_distributions()
    project = _pyproject(root)["project"]
    extras = [r for reqs in project["optional-dependencies"].values() for r in reqs]
    declared = {re.sub(r"[-_.]+", "-", Requirement(r).name).lower()
                for r in [*project["dependencies"], *extras]}
    missing = {m: dists.get(m) for m in third
               if not {re.sub(r"[-_.]+", "-", d).lower() for d in dists.get(m, [m])} & declared}
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
    assert "ipython" in declared and "jupyter-client" in declared   # the check sees both


def test_a_learners_install_needs_none_of_the_instructors_packages(root, tmp_path):
    """Without the `instructor` and `classroom` extras (Dask, copydetect, JupyterHub), do the
    learner's commands and the course package work, and do the instructor's commands that
    need them say which extra to install?"""
    code = f"""
import sys
for m in ("distributed", "dask", "copydetect", "jupyterhub"):
    sys.modules[m] = None
import course.progress, course.widgets, course.training, course.textgen, course.checking
import autograder.selfcheck.check, autograder.selfcheck.workspace
from autograder.__main__ import main
assert main(["workspace", "--dir", {str(tmp_path / "nb")!r}]) == 0
for argv in (["similarity", {str(tmp_path)!r}], ["classroom", "start"]):
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code not in (0, None), argv
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    said = out.stdout + out.stderr
    assert "pip install -e '.[instructor]'" in said and "pip install -e '.[classroom]'" in said
    deps = {Requirement(r).name for r in _pyproject(root)["project"]["dependencies"]}
    assert not deps & {"distributed", "copydetect", "jupyterhub"}


# The private methods of nbclient/nbgrader and jupyter_client the grader overrides. An upgrade
# that renames one would leave the override unused and silently drop its guard (the notebook
# budget, the dead-kernel stop, the sandboxed launch): this list fails first.
PRIVATE_HOOKS = {
    "autograder.grading.execute:GuardedExecute": [
        "_async_cleanup_kernel", "_cleanup_kernel", "_get_timeout", "_async_handle_timeout"],
    "autograder.sandbox.kernel_manager:GradingKernelManager": [
        "_ip_default", "_async_launch_kernel"],
}


def test_every_private_hook_the_grader_overrides_still_exists_upstream():
    """Does each private method the grader overrides still exist in the installed base
    classes, and is the list above the whole list?"""
    import importlib

    for target, hooks in PRIVATE_HOOKS.items():
        module, name = target.split(":")
        cls = getattr(importlib.import_module(module), name)
        overridden = sorted(n for n, v in vars(cls).items() if callable(v)
                            and n.startswith("_") and not n.startswith("__")
                            and any(hasattr(b, n) for b in cls.__mro__[1:]))
        assert overridden == sorted(hooks), f"{target} overrides {overridden}: update the list"
        for hook in hooks:
            assert any(hook in vars(b) for b in cls.__mro__[1:]), \
                f"{hook} is gone from {name}'s bases: the override no longer runs"
