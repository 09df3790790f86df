"""The interactive explorers behind :mod:`course.widgets`, one module per step.

- :mod:`~course.explorers.handle`: the :class:`Explorer` handle every explorer returns
  (widgets or one static figure) and :func:`interactive_frontend`, which picks the mode.
- :mod:`~course.explorers.shared`: small helpers they share (colours, figures, eval mode).
- :mod:`~course.explorers.capture`: :func:`capture_attention`, which collects a model's
  attention weights in one run.
- :mod:`~course.explorers.attention`, :mod:`~course.explorers.scaling`,
  :mod:`~course.explorers.positional`, :mod:`~course.explorers.sampling`: the four explorers.

Notebooks import them from :mod:`course.widgets`, which re-exports every public name; this
package imports nothing itself, so each module loads only what it needs.
"""
