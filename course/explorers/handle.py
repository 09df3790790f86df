"""The :class:`Explorer` handle that every explorer returns, and the choice of front end.

:func:`interactive_frontend` says whether widgets can be shown (a Jupyter kernel, not nbgrader,
not CI; ``COURSE_WIDGETS`` overrides the guess). An :class:`Explorer` draws through the
``draw(values, static)`` function it is given: as ipywidgets controls above a PNG image that
redraws when a control moves or :meth:`Explorer.update` is called, or as one static matplotlib
figure. It shows itself once, in the cell that made it.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Explorer", "interactive_frontend"]


def interactive_frontend() -> bool:
    """True when widgets can be shown: a Jupyter kernel, not nbgrader, not CI.

    ``COURSE_WIDGETS=static`` or ``=interactive`` overrides the guess.
    """
    forced = os.environ.get("COURSE_WIDGETS", "").strip().lower()
    if forced in ("static", "0", "off", "no"):
        return False
    if os.environ.get("NBGRADER_EXECUTION"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - both are course dependencies
        return False
    if forced in ("interactive", "1", "on", "yes"):
        return True
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false"):
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _execution_count() -> int | None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return None
    shell = get_ipython()
    return getattr(shell, "execution_count", None) if shell is not None else None


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    return get_ipython() is not None


def _png(fig, dpi: int = 80) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


class Explorer:
    """A handle on one explorer: its current values, its last figure and its widgets.

    Args:
        name: shown in the repr.
        draw: ``draw(values, static) -> (figure, caption_html)``.
        values: the starting value of every control.
        controls: ipywidgets control per value name (those without one stay fixed).
        interactive: show widgets (True) or one static figure (False); default: guessed by
            :func:`interactive_frontend`.
        on_change: optional ``on_change(name, values)`` called before a redraw (to recompute
            cached model outputs when an input changes).
        extra: more widgets to show above the figure (buttons, text boxes).

    Attributes:
        values: dict of the current settings.
        figure: the last matplotlib Figure drawn.
        caption: the last caption (HTML): what the figure shows, in words.
        seconds: how long the last update took (model runs and drawing), in seconds.
        widget: the ipywidgets box, or None in static mode.
    """

    def __init__(self, name: str, draw: Callable[[dict, bool], tuple[Any, str]],
                 values: dict, controls: dict | None = None, interactive: bool | None = None,
                 on_change: Callable[[str, dict], None] | None = None,
                 extra: Sequence = ()) -> None:
        self.name = name
        self._draw = draw
        self._on_change = on_change
        self.values = dict(values)
        self.interactive = interactive_frontend() if interactive is None else interactive
        self.controls = dict(controls or {}) if self.interactive else {}
        self.figure = None
        self.caption = ""
        self.seconds = 0.0
        self.widget = None
        self._image = self._html = None
        self._busy = False
        self._shown_at = None
        self._layouts: dict = {}
        if self.interactive:
            import ipywidgets as w

            self._image = w.Image(format="png", layout=w.Layout(
                max_width="100%", width="auto", height="auto", align_self="flex-start"))
            self._html = w.HTML()
            for key, control in self.controls.items():
                control.observe(self._observer(key), names="value")
            rows = list(self.controls.values()) + list(extra)
            self.widget = w.VBox([w.HBox(rows[i:i + 3]) for i in range(0, len(rows), 3)]
                                 + [self._image, self._html])
            self.widget.add_class("course-explorer")
        self.redraw()
        self._show()

    # -- drawing
    def _observer(self, key: str):
        def handler(change) -> None:
            if self._busy:
                return
            self.values[key] = change["new"]
            if self._on_change is not None:
                self._on_change(key, self.values)
            self.redraw()
        return handler

    def redraw(self):
        """Draw the figure for the current values; return it."""
        t0 = time.perf_counter()
        fig, caption = self._draw(self.values, not self.interactive)
        self.figure, self.caption = fig, caption
        if self.interactive:
            # The layout engine costs more than the drawing: run it on the first figure of
            # each shape, then reuse its axes positions (the panels also stop jumping around).
            longest = max((len(t.get_text()) for ax in fig.axes
                           for t in (*ax.get_xticklabels(), *ax.get_yticklabels())), default=0)
            key = (tuple(round(float(v), 2) for v in fig.get_size_inches()), len(fig.axes),
                   longest)
            cached = self._layouts.get(key)
            if cached is not None:
                fig.set_layout_engine("none")
                for ax, pos in zip(fig.axes, cached, strict=True):
                    ax.set_position(pos)
            self._image.value = _png(fig)
            if cached is None:
                self._layouts[key] = [ax.get_position() for ax in fig.axes]
            self._html.value = caption
        self.seconds = time.perf_counter() - t0
        return fig

    def update(self, **changes):
        """Set some values (moving the sliders when they exist), redraw once, return the figure.

        Raises:
            KeyError: for a name that is not one of :attr:`values`.
        """
        for key in changes:
            if key not in self.values:
                raise KeyError(f"{self.name} has no setting {key!r}; it has "
                               f"{', '.join(self.values)}")
        t0 = time.perf_counter()
        self._busy = True
        try:
            for key, value in changes.items():
                if key in self.controls:
                    self.controls[key].value = value
                    value = self.controls[key].value     # the slider may round or clip
                self.values[key] = value
                if self._on_change is not None:
                    self._on_change(key, self.values)
        finally:
            self._busy = False
        fig = self.redraw()
        self.seconds = time.perf_counter() - t0
        return fig

    # -- display
    def _show(self) -> None:
        if not _in_ipython():
            return
        self._shown_at = _execution_count()
        if self.interactive:
            from IPython.display import display

            display(self.widget)
        elif self.caption:
            from IPython.display import HTML, display

            display(HTML(self.caption))

    def _ipython_display_(self) -> None:
        # The explorer already showed itself in the cell that created it; show it again only
        # when the handle is displayed from a later cell.
        if self._shown_at is not None and self._shown_at == _execution_count():
            return
        self._show()

    def __repr__(self) -> str:
        mode = "widgets" if self.interactive else "static figure"
        vals = ", ".join(f"{k}={v!r}" for k, v in self.values.items())
        return f"<{self.name} ({mode}): {vals}>"
