"""The host's review of a submission's own code for reaches into the course's internals.

A graded kernel holds no stand-in of its own day or a later one (:mod:`course.standins`), but
it must hold what the judge makes there: probes such as ``ReferenceSoftmax`` (PyTorch's softmax
as a callable), ``ReferenceRNNForward``, ``FeedForwardBlock`` or ``ReferenceSequenceClassifier``
(:mod:`course.probes`), and the agent that answers the judge. A learner's cell could hand one of
them back as its answer, or patch the kernel-side helpers (``course.checking.forbid``) so that a
forbidden built-in goes unnoticed. The kernel's word about this is worth nothing, so the judge
reads the submitted source here, in the grading process, and:

- an own-code cell that imports or reaches into ``course.standins``, ``course.probes``,
  ``course.checking``, ``course.agent`` or ``course.wire``, names one of their objects
  (``ReferenceSoftmax``, ``FeedForwardBlock``, ``STANDINS``...), reaches modules dynamically
  (``importlib``, ``__import__``, ``sys.modules``, ``gc.get_objects``/``get_referrers``,
  ``__globals__``, frames) or holds a string that names a course module, earns nothing for
  the names it defines, nor does a cell that uses one of those names (to a fixpoint): every
  hidden test that judges one of them is withheld;
- a cell that assigns to an attribute of a course module (``course.checking.forbid = ...``,
  ``setattr(checking, ...)``) replaces a course function: every hidden test is withheld;
- a cell that uses ``course.previous`` is reported only: while grading it returns an earlier
  day's stand-in or fails, since the kernel holds no other;
- each finding is a ``review:`` flag for the instructor, with its cell and line.

The course's own answers never import anything (``tests/test_internals.py`` holds it against
every answer key), so a correct submission is never touched.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

INTERNAL = ("course.standins", "course.probes", "course.references", "course.checking",
            "course.agent", "course.wire")
# Reported, never withheld: a graded kernel holds no stand-in of its own day or a later one,
# so what these return while grading is an earlier day's stand-in, which the notebook may use.
LOADERS = ("course.previous",)
# Objects of those modules a cell might name once imported under another name elsewhere.
OBJECTS = re.compile(r"\b(ReferenceSoftmax|ReferenceRNNForward|ReferenceSequenceClassifier|"
                     r"ReferenceTinyGPT|FeedForwardBlock|GlobalSwapped|STANDINS|JudgeContext|"
                     r"in_kernel|reference_fit)\b")
DYNAMIC = re.compile(r"\b(importlib|__import__|get_objects|get_referrers|get_referents)\b|"
                     r"\bsys\s*\.\s*modules\b|__subclasses__|__globals__|f_globals|f_back")
# Modules that load or run code found at run time, or reach objects by search: an answer
# never needs one, and each is a way to the course's files or the kernel's memory that no
# name-based review could follow (runpy.run_module("cour" + "se.references")).
CODE_MODULES = ("course", "runpy", "importlib", "pkgutil", "inspect", "marshal", "pickle",
                "dill", "imp", "zipimport", "linecache", "gc", "ctypes", "builtins", "code",
                "codeop")
# sys itself is allowed (print(..., file=sys.stderr)); these of its attributes are not, under
# any name sys is bound to, nor is sys reached as another module's attribute (os.sys).
SYS_ROUTES = ("modules", "meta_path", "path_hooks", "path_importer_cache", "_getframe",
              "settrace", "setprofile", "exc_info", "last_traceback")
# Builtins that run code or reach a namespace: the same, by name.
CODE_CALLS = ("exec", "eval", "compile", "__import__", "open", "globals", "vars", "locals",
              "breakpoint")
# Attributes that lead to a module's files, a function's globals or code.
CODE_ATTRS = ("__path__", "__file__", "__spec__", "__loader__", "__code__", "__globals__",
              "__builtins__", "__dict__", "__subclasses__", "__closure__", "f_globals",
              "f_back", "f_locals", "gi_frame", "tb_frame")
# What in a reaching cell defines names no review can list: then nothing is paid.
DYNAMIC_DEFS = re.compile(r"\b(globals|vars|locals|exec|setattr)\s*\(|__dict__|__builtins__|"
                          r"\bsys\s*\.\s*modules\b")
# A string assembled from pieces that names what a review looks for.
JOINED = re.compile(r"course|standins|probes|references|Reference|FeedForwardBlock|importlib|"
                    r"__\w+__|\bsys\b|\bmodules\b|\bgc\b|runpy|marshal|pickle|builtins")
NAMED = re.compile(r"[\"'][^\"']*(\bcourse\s*\.\s*\w+|\b(standins|probes|references)\b)[^\"']*"
                   r"[\"']")


@dataclass
class Review:
    """What :func:`review` found: flags, the names that earn nothing, and whether a course
    function was replaced (then nothing is paid)."""

    flags: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    replaced: bool = False


def _internal(module: str, kinds: tuple[str, ...] = INTERNAL) -> bool:
    return any(module == m or module.startswith(m + ".") for m in kinds)


def _defined(tree: ast.Module) -> set[str]:
    """The names a cell binds at its top level (functions, classes, assignments, imports)."""
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def _aliases(trees: list[ast.Module | None]) -> set[str]:
    """Names bound anywhere in own code to a course module or one of its internal objects."""
    out = set()
    for tree in trees:
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                out |= {(a.asname or a.name).split(".")[0] for a in node.names
                        if a.name == "course" or a.name.startswith("course.")}
                out.discard("course")  # the package: its helpers are public
            elif isinstance(node, ast.ImportFrom) and node.module and (
                    node.module == "course" or node.module.startswith("course.")):
                for a in node.names:
                    if _internal(f"{node.module}.{a.name}") or _internal(node.module):
                        out.add(a.asname or a.name)
    return out - {"course"}


def _sys_names(trees: list[ast.Module | None]) -> frozenset[str]:
    """Every name own code binds to the sys module: ``import sys as S``, ``from x import sys``,
    ``S = sys`` (to a fixpoint)."""
    names = {"sys"}
    for tree in trees:
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.Import):
                names |= {a.asname or a.name for a in node.names if a.name == "sys"}
            elif isinstance(node, ast.ImportFrom):
                names |= {a.asname or a.name for a in node.names if a.name == "sys"}
    while True:
        more = {t.id for tree in trees for node in (ast.walk(tree) if tree else ())
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                and node.value.id in names for t in node.targets
                if isinstance(t, ast.Name)} - names
        if not more:
            return frozenset(names)
        names |= more


def _why(node: ast.AST, aliases: set[str], kinds: tuple[str, ...] = INTERNAL) -> str:
    if isinstance(node, ast.Import):
        hit = [a.name for a in node.names if _internal(a.name, kinds)]
        return f"imports {', '.join(hit)}" if hit else ""
    if isinstance(node, ast.ImportFrom) and node.module:
        if _internal(node.module, kinds) or any(_internal(f"{node.module}.{a.name}", kinds)
                                                for a in node.names):
            return f"imports from {node.module}"
    if isinstance(node, ast.Attribute) and _dotted(node) and _internal(_dotted(node), kinds):
        return f"uses {_dotted(node)}"
    if kinds is INTERNAL and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("getattr", "setattr", "delattr", "vars") and node.args \
            and _dotted(node.args[0]).split(".")[0] in (aliases | {"course"}):
        return f"uses {node.func.id} on a course module"
    if kinds is INTERNAL and isinstance(node, ast.Name) and node.id in aliases:
        return f"uses {node.id}, a course internal"
    return ""


def _runs_code(node: ast.AST, sys_names: frozenset[str] = frozenset({"sys"})) -> str:
    """A route to code or objects found at run time (see CODE_MODULES, CALLS, ATTRS)."""
    if isinstance(node, ast.Import):
        # the course's public helpers may be imported (the package itself may not: its
        # __path__ leads to every file of it)
        hit = [a.name for a in node.names if a.name == "course"
               or (a.name.split(".")[0] in CODE_MODULES and a.name.split(".")[0] != "course")]
        return f"imports {', '.join(hit)}, which loads or finds code at run time" if hit else ""
    if isinstance(node, ast.ImportFrom) and node.module \
            and node.module.split(".")[0] in CODE_MODULES[1:]:
        return f"imports from {node.module}, which loads or finds code at run time"
    if isinstance(node, ast.ImportFrom) and any(a.name in CODE_MODULES for a in node.names):
        return f"imports {', '.join(a.name for a in node.names if a.name in CODE_MODULES)} " \
               f"from {node.module}, which loads or finds code at run time"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in CODE_CALLS:
        return f"calls {node.func.id}(), which runs or reaches code found at run time"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("getattr", "hasattr", "setattr", "delattr") \
            and len(node.args) >= 2:
        name = node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return f"calls {node.func.id}() with a name computed at run time"
        if name.value.startswith("__") or name.value in CODE_MODULES + CODE_ATTRS + SYS_ROUTES \
                or name.value == "sys":
            return f"calls {node.func.id}(..., {name.value!r})"
    if isinstance(node, ast.Attribute) and (node.attr in CODE_ATTRS or node.attr == "sys" or (
            node.attr in CODE_MODULES and node.attr != "course")):
        return f"uses .{node.attr}"
    if isinstance(node, ast.Attribute) and node.attr in SYS_ROUTES \
            and isinstance(node.value, ast.Name) and node.value.id in sys_names:
        return f"uses {node.value.id}.{node.attr}"
    joined = _joined(node)
    if joined is not None and JOINED.search(joined):
        return f"builds the string {joined[:60]!r}"
    return ""


def _joined(node: ast.AST) -> str | None:
    """The value of a string built from constant pieces ('cour' + 'se', f-strings of
    constants, ''.join of constants), None for anything else or a plain constant."""
    def value(n: ast.AST) -> str | None:
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            return n.value
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mod)):
            a, b = value(n.left), value(n.right)
            return a + b if a is not None and b is not None else None
        if isinstance(n, ast.JoinedStr):
            parts = [value(v.value if isinstance(v, ast.FormattedValue) else v)
                     for v in n.values]
            return "".join(parts) if all(p is not None for p in parts) else None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                and n.func.attr == "join" and len(n.args) == 1 \
                and isinstance(n.args[0], (ast.List, ast.Tuple)):
            sep = value(n.func.value)
            parts = [value(e) for e in n.args[0].elts]
            return sep.join(parts) if sep is not None and all(p is not None for p in parts) \
                else None
        return None

    if isinstance(node, (ast.BinOp, ast.JoinedStr, ast.Call)):
        return value(node)
    return None


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else ""


def _replaces(node: ast.AST, aliases: set[str]) -> bool:
    """An assignment to an attribute of a course module, or setattr/delattr on one."""
    def rooted(expr: ast.AST) -> bool:
        while isinstance(expr, ast.Attribute):
            expr = expr.value
        return isinstance(expr, ast.Name) and expr.id in (aliases | {"course"})

    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete))
                   else [node.target])
        return any(isinstance(t, ast.Attribute) and rooted(t) for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id in ("setattr", "delattr") and node.args:
        return rooted(node.args[0])
    return False


def review(sources: list[str]) -> Review:
    """Read the learner's own cells (``sources``, in notebook order) as the module doc says."""
    trees: list[ast.Module | None] = []
    for src in sources:
        try:
            trees.append(ast.parse(_without_magics(src)))
        except (SyntaxError, ValueError):
            trees.append(None)
    aliases = _aliases(trees)
    sys_names = _sys_names(trees)
    out = Review()
    taints: list[list[tuple[int, str]]] = []
    for src, tree in zip(sources, trees, strict=True):
        whys: list[tuple[int, str]] = []
        notes: list[tuple[int, str]] = []
        for node in ast.walk(tree) if tree is not None else ():
            if _replaces(node, aliases):
                out.replaced = True
                whys.append((node.lineno, "replaces a function of the course"))
            why = _why(node, aliases) or _runs_code(node, sys_names)
            if why:
                whys.append((getattr(node, "lineno", 0), why))
            note = _why(node, aliases, LOADERS)
            if note:
                notes.append((getattr(node, "lineno", 0), note))
        for lineno, line in enumerate(src.splitlines(), 1):
            code = line.split("#", 1)[0]
            hit = DYNAMIC.search(code) or NAMED.search(code) or OBJECTS.search(code)
            if hit:
                whys.append((lineno, f"uses {hit.group(0).strip()}"))
        taints.append(whys)
        out.flags += _flags(len(out.flags), src, notes, "reaches course.previous (reported only)")
    # A name defined in a tainted cell taints every cell that uses it (a helper in one cell
    # that fetches a probe, the answer in another), until nothing changes.
    defined = [_defined(t) if t is not None else set() for t in trees]
    used = [{n.id for n in ast.walk(t) if isinstance(n, ast.Name)} if t is not None else set()
            for t in trees]
    tainted = {i for i, w in enumerate(taints) if w}
    while True:
        names = set().union(*(defined[i] for i in tainted)) if tainted else set()
        more = {i for i in range(len(sources)) if i not in tainted and used[i] & names}
        if not more:
            break
        for i in more:
            taints[i].append((0, "uses " + ", ".join(sorted(used[i] & names))
                              + ", defined by a cell that reaches the course's internals"))
        tainted |= more
    out.names = set().union(*(defined[i] for i in tainted)) if tainted else set()
    for i in tainted:
        code = "\n".join(line.split("#", 1)[0] for line in sources[i].splitlines())
        dyn = sorted({m.group(0).strip("( ") for m in DYNAMIC_DEFS.finditer(code)})
        if dyn or trees[i] is None:
            # Names made by globals()/exec/setattr (or a cell that does not even parse) are
            # not in ``defined``: nothing is paid.
            out.replaced = True
            taints[i].append((0, f"defines names dynamically ({', '.join(dyn) or 'unparsed'})"))
    for i in sorted(tainted):
        out.flags += _flags(i, sources[i], taints[i], "the course's internals are not an answer")
    return out


def _flags(i: int, src: str, whys: list[tuple[int, str]], why_all: str) -> list[str]:
    lines = src.splitlines()
    out = []
    for lineno, why in sorted(set(whys))[:3]:
        text = lines[lineno - 1].strip()[:100] if 0 < lineno <= len(lines) else ""
        out.append(f"cell {i + 1} of your own code, line {lineno}, {why} ({why_all}): {text}")
    return out


def withheld(verdicts: dict[str, dict], found: Review) -> dict[str, str]:
    """``{grade_id: why}`` of the judged tests that earn nothing after :func:`review`."""
    out = {}
    for gid, v in verdicts.items():
        names = set(v.get("names") or [])
        if found.replaced:
            out[gid] = ("not awarded: your code replaces a function of the course's grading "
                        "helpers; write the exercise yourself")
        elif names & found.names:
            out[gid] = (f"not awarded: {', '.join(sorted(names & found.names))} comes from a "
                        "cell that reaches into the course's internals (stand-ins, probes, "
                        "grading helpers); write it yourself")
    return out


def _without_magics(src: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in src.splitlines())
