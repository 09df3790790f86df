"""The code's layout holds: packages by role whose imports point one way, no import circle,
files that read as one step of the design.

Imports are read from the source (every ``import`` statement, those inside functions too), so
a lazy import that runs back up counts like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Lower layers first. A module may import its own package and the layers below it; packages
# on one layer (the judge and the sandbox) do not import each other.
LAYERS = (
    ("course",),
    ("autograder.core",),
    ("autograder.judge", "autograder.sandbox"),
    ("autograder.grading",),
    ("autograder.cohort",),    # similarity, LMS export: read grading's results
    ("autograder.selfcheck",),
    ("autograder.authoring",),
    ("autograder.classroom",),
    ("autograder",),           # the CLI: __main__, benchmark, console
)
# Files allowed past 450 lines, each with its reason (none today).
LONG: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("autograder", "course"):
        for path in (ROOT / top).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports (a package's ``__init__`` counts as the package)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(name, path, known) for name, path in known.items()}


def _layer(module: str) -> tuple[int, str]:
    best = (-1, "")
    for rank, packages in enumerate(LAYERS):
        for pkg in packages:
            if (module == pkg or module.startswith(pkg + ".")) and len(pkg) > len(best[1]):
                best = (rank, pkg)
    return best


def test_imports_point_down_the_layers():
    """Does every import go to the module's own package or a lower layer (the CLI and the
    classroom above grading, grading above the judge and the sandbox, all above core and
    course)?"""
    wrong = []
    for module, deps in _graph().items():
        rank, pkg = _layer(module)
        for dep in deps:
            dep_rank, dep_pkg = _layer(dep)
            if dep_pkg != pkg and dep_rank >= rank:
                wrong.append(f"{module} -> {dep}")
    assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (Tarjan's strongly connected components of 2 or more)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle():
    """Is the module import graph free of circles?"""
    circles = _circles(_graph())
    assert not circles, f"import circles: {circles}"


def test_files_read_as_one_step():
    """Is every module of autograder/ and course/ at most about 400 lines (450 at most), but
    the listed exceptions (each with its reason)?"""
    long = {str(p.relative_to(ROOT)): n for p in _modules().values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    unexplained = {f: n for f, n in long.items() if f not in LONG}
    assert not unexplained, f"files over 450 lines: {unexplained}"


def test_every_package_says_what_it_is_and_what_it_may_import():
    """Does each package of autograder/ open with a docstring naming what it may import?"""
    for init in sorted((ROOT / "autograder").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if init.parent.name == "checks":
            continue
        assert "may import" in " ".join(doc.split()), \
            f"{init.relative_to(ROOT)} does not say what it may import"


def test_the_layout_test_sees_a_circle_and_an_upward_import(tmp_path, monkeypatch):
    """Would the tests above fail on a circle and on an import that runs back up?"""
    graph = {"autograder.core.a": {"autograder.grading.b"}, "autograder.grading.b": set()}
    rank_a, _ = _layer("autograder.core.a")
    rank_b, _ = _layer("autograder.grading.b")
    assert rank_b > rank_a   # core importing grading runs back up: reported
    known = {"autograder.x": tmp_path / "x.py", "autograder.y": tmp_path / "y.py"}
    (tmp_path / "x.py").write_text("def f():\n    from autograder import y\n")
    (tmp_path / "y.py").write_text("import autograder.x\n")
    assert _imports("autograder.x", known["autograder.x"], known) == {"autograder.y"}
    assert _imports("autograder.y", known["autograder.y"], known) == {"autograder.x"}
    planted = {m: _imports(m, p, known) for m, p in known.items()}
    assert _circles(planted) == [["autograder.x", "autograder.y"]]
    assert _circles(graph) == []


def test_every_blind_except_says_why():
    """ruff selects BLE: a blind `except Exception` needs its noqa marker; does each such
    marker also give its reason (`... - why`)?"""
    import re

    marker = "noqa: " + "BLE001"
    bare = []
    for folder in ("autograder", "course", "tests", "site"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if marker in line and not re.search(marker + r" - \S", line):
                    bare.append(f"{path.relative_to(ROOT)}:{n}")
    assert not bare, f"blind excepts without a reason: {bare}"
    assert '"BLE"' in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
