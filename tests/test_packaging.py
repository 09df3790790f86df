"""Is the project installable the way the README says, with one source of truth for versions?"""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet


def _pyproject(root):
    return tomllib.loads((root / "pyproject.toml").read_text())


def _environment_pip_lines(root):
    text = (root / "environment.yml").read_text()
    pip_block = text.split("- pip:", 1)[1]
    return [m.group(1).strip() for m in re.finditer(r"^\s+- (.+)$", pip_block, re.M)]


def test_environment_python_matches_pyproject(root):
    """Does environment.yml ask for a Python that pyproject.toml accepts?"""
    m = re.search(r"^\s+- python=(\S+)$", (root / "environment.yml").read_text(), re.M)
    assert m, "environment.yml must pin python=3.x"
    requires = SpecifierSet(_pyproject(root)["project"]["requires-python"])
    assert f"{m.group(1)}.0" in requires


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
