"""What runs inside the grading kernel before any notebook cell: the IPython start-up script.

The script (:data:`STARTUP`) caps what the kernel can print or display at the source, so that
a notebook that floods its output stops early instead of filling memory (the executor also
counts every message, see ``autograder.grading.execute``). Nothing of the grading library enters the
kernel: hidden tests are judged outside it (``autograder.judge``). The launcher binds this
script read-only into the kernel's IPython folder, fresh for every kernel.
"""

from __future__ import annotations

# Written into the kernel's IPython startup folder: runs before any notebook cell.
STARTUP = r'''
# autograder start-up: cap what the kernel prints or displays at the source.
def __tfs_setup():
    import os, sys
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
    # A kernel started ahead of time (a self-check's standby) imports heavy libraries now,
    # before its notebook exists; into sys.modules only, never into the notebook's namespace.
    import importlib
    for name in filter(None, os.environ.pop("TFS_PREIMPORT", "").split(",")):
        try:
            importlib.import_module(name)
        except Exception:
            pass

__tfs_setup()
del __tfs_setup
'''
