"""What runs inside the grading kernel before any notebook cell: the IPython start-up script.

The script (:data:`STARTUP`) loads the hidden grading modules from the file descriptor the
launcher passed (the bundle itself is never visible in the sandbox), caps what the kernel can
print or display at the source, and installs the grading guard (:data:`GUARD_EXPR`), which the
executor calls before each hidden test cell. The launcher binds this script read-only into the
kernel's IPython folder, fresh for every kernel.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# Written into the kernel's IPython startup folder: runs before any notebook cell.
STARTUP = r'''
# autograder start-up: load the hidden grading modules from memory, snapshot what tests rely on.
def __tfs_setup():
    import builtins, importlib.abc, importlib.util, json, os, sys
    fd = os.environ.pop("TFS_HIDDEN_FD", None)
    if fd is not None:
        with os.fdopen(int(fd), "r", encoding="utf-8") as f:
            sources = json.load(f)

        class _HiddenFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path=None, target=None):
                if name in sources:
                    is_pkg = sources[name][0]
                    spec = importlib.util.spec_from_loader(name, self, is_package=is_pkg)
                    return spec
                if name == "autograder" or name.startswith("autograder."):
                    return None
                return None

            def create_module(self, spec):
                return None

            def exec_module(self, module):
                is_pkg, code = sources[module.__name__]
                if is_pkg:
                    module.__path__ = []
                module.__file__ = "<hidden>/" + module.__name__.replace(".", "/") + ".py"
                exec(compile(code, module.__file__, "exec"), module.__dict__)

        sys.meta_path.insert(0, _HiddenFinder())
    cap = int(os.environ.get("TFS_MAX_OUTPUT") or 0)
    if cap:
        # cap what the kernel prints at the source, while it streams
        state = {"left": cap, "told": False}

        def _tell(stream):
            if not state["told"]:
                state["told"] = True
                stream.write(f"\n[output truncated: more than {cap // 1024} KiB of output]\n")

        class _Capped:
            def __init__(self, inner):
                self._inner = inner

            def write(self, text):
                if state["left"] <= 0:
                    _tell(self._inner)
                    return len(text)
                state["left"] -= len(text)
                return self._inner.write(text[:max(0, state["left"] + len(text))])

            def __getattr__(self, name):
                return getattr(self._inner, name)

        _stdout = sys.stdout
        sys.stdout = _Capped(sys.stdout)
        sys.stderr = _Capped(sys.stderr)

        def _cap_rich(msg):
            # display() and a cell's result share the budget; a bundle that does not fit
            # is dropped whole (an image cannot be cut)
            data = (msg.get("content") or {}).get("data") or {}
            size = sum(len(v) if isinstance(v, str) else len(repr(v)) for v in data.values())
            if size > state["left"]:
                state["left"] = 0
                _tell(_stdout)
                return None
            state["left"] -= size
            return msg

        for _owner in (get_ipython().display_pub, get_ipython().displayhook):
            if hasattr(_owner, "register_hook"):
                _owner.register_hook(_cap_rich)
    day = os.environ.get("TFS_DAY", "")
    import torch, torch.testing
    import torch.nn.functional as F
    mods = {}
    for name in ("course.checking", "autograder.checks", f"autograder.checks.{day}",
                 f"course.checks.{day}"):
        try:
            mods[name] = importlib.import_module(name)
        except Exception:
            pass
    ip = get_ipython()
    snap = {}
    for owner, attrs in ((torch, ("allclose", "equal", "isclose", "all", "testing")),
                         (torch.testing, ("assert_close",)),
                         (torch.Tensor, ("__eq__", "__ne__", "allclose", "equal", "isclose",
                                         "__bool__", "all", "item", "tolist")),
                         (F, ("scaled_dot_product_attention", "softmax", "layer_norm"))):
        for a in attrs:
            if hasattr(owner, a):
                snap[(owner, a)] = getattr(owner, a)
    for name, mod in mods.items():
        for a, v in list(vars(mod).items()):
            if callable(v) and not a.startswith("__"):
                snap[(mod, a)] = v
    cls = type(ip)
    for a in ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell",
              "run_cell_async", "run_code", "run_ast_nodes"):
        if hasattr(cls, a):
            snap[(cls, a)] = cls.__dict__.get(a, getattr(cls, a))
    _MISSING = object()
    inst = {a: ip.__dict__.get(a, _MISSING) for a in
            ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell", "run_cell_async",
             "run_code", "run_ast_nodes", "custom_exceptions", "CustomTB", "InteractiveTB",
             "SyntaxTB")}
    lists = {name: list(getattr(ip, name)) for name in
             ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")}
    _TRUSTED = ("matplotlib", "matplotlib_inline", "IPython", "ipykernel", "ipywidgets",
                "tqdm", "torch", "course")
    events = {e: list(ip.events.callbacks.get(e, [])) for e in
              ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell")}
    modrefs = {name: mod for name, mod in mods.items()}
    real_import = builtins.__import__

    def guard():
        """Undo known cheats before a test cell; return what had been changed."""
        found = []
        for (owner, a), v in snap.items():
            if getattr(owner, a, None) is not v:
                found.append(f"{getattr(owner, '__name__', owner)}.{a} was replaced")
                try:
                    setattr(owner, a, v)
                except Exception:
                    pass
        for a, v in inst.items():
            if ip.__dict__.get(a, _MISSING) is not v:
                found.append(f"IPython's {a} was patched")
                if v is _MISSING:
                    ip.__dict__.pop(a, None)
                else:
                    ip.__dict__[a] = v
        if ip.custom_exceptions:
            found.append("a custom exception handler hides errors")
            ip.set_custom_exc((), None)
        for name, want in lists.items():
            if list(getattr(ip, name)) != want:
                found.append(f"IPython's {name} were changed")
                getattr(ip, name)[:] = want
        for e, want in events.items():
            extra = [cb for cb in ip.events.callbacks.get(e, []) if cb not in want
                     and not getattr(cb, "__module__", "").startswith(_TRUSTED)]
            if extra:
                found.append(f"an IPython {e} callback was registered")
                ip.events.callbacks[e][:] = [cb for cb in ip.events.callbacks[e]
                                             if cb not in extra]
        for name, mod in modrefs.items():
            if sys.modules.get(name) is not mod:
                found.append(f"sys.modules[{name!r}] was replaced")
                sys.modules[name] = mod
        if builtins.__import__ is not real_import:
            found.append("builtins.__import__ was replaced")
            builtins.__import__ = real_import
        return found

    builtins.__tfs_guard__ = guard


__tfs_setup()
del __tfs_setup
'''

GUARD_EXPR = "__import__('builtins').__tfs_guard__()"


def hidden_bundle(course_root: Path, target: Path) -> Path:
    """Write the grading library (autograder/__init__.py, autograder/checks/) as JSON."""
    sources: dict[str, tuple[bool, str]] = {}
    pkg = course_root / "autograder"
    sources["autograder"] = (True, (pkg / "__init__.py").read_text(encoding="utf-8")
                             if (pkg / "__init__.py").is_file() else "")
    checks = pkg / "checks"
    for py in sorted(checks.rglob("*.py")):
        rel = py.relative_to(pkg).with_suffix("")
        parts = ["autograder", *rel.parts]
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        sources[".".join(parts)] = (is_pkg, py.read_text(encoding="utf-8"))
    target.write_text(json.dumps(sources), encoding="utf-8")
    os.chmod(target, 0o600)
    return target
