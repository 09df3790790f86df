"""Interactive explorers that run the learner's own code (ipywidgets 8 + matplotlib).

Four explorers, each one line in a notebook:

- :func:`attention_explorer` — a sentence, a text or a digit goes through *your* model; sliders
  pick the layer and the head; you see the attention heatmap and, for every token, the tokens it
  attends to most (Days 3, 4, 7, 11, 12).
- :func:`scaling_explorer` — a slider for d_k shows how unscaled dot products saturate *your*
  softmax, and how dividing by sqrt(d_k) prevents it (Day 2).
- :func:`positional_encoding_explorer` — the PE heatmap, one dimension's wave and how similar a
  chosen position is to all others, for *your* positional encoding (Day 5).
- :func:`sampling_explorer` — sliders for temperature, top-k and top-p around *your*
  ``generate`` and a trained TinyGPT: the next-token distribution as bars and a fresh sample
  (Day 13).

Every explorer shows itself when it is created and returns an :class:`Explorer` handle
(``explorer.update(head=2)`` moves a slider from code). Each update takes well under a second on
a CPU: models run once per new input, slider moves only redraw.

Without a widget front end — in CI (``CI``), outside Jupyter, or with ``COURSE_WIDGETS=static`` —
an explorer draws one static matplotlib figure with its default settings instead.
``COURSE_WIDGETS=interactive`` forces the widgets. While nbgrader executes the notebook
(``NBGRADER_EXECUTION``) an explorer draws nothing and returns None
(:func:`course.profile.not_drawn_while_grading`).

Figures follow the course's habits: a title, axis labels with units, viridis/cividis colours.
This module holds no exercise answers: it only calls the functions and modules it is given.
It only re-exports: the code lives in :mod:`course.explorers`, one module per explorer, one
for the attention capture and one for the :class:`Explorer` handle.
"""

from course.explorers.attention import attention_explorer, word_vectors
from course.explorers.capture import capture_attention
from course.explorers.handle import Explorer, interactive_frontend
from course.explorers.positional import positional_encoding_explorer
from course.explorers.sampling import sampling_explorer
from course.explorers.scaling import scaling_explorer
from course.explorers.shared import BLUE, PURPLE, TEAL, YELLOW

__all__ = [
    "Explorer",
    "attention_explorer",
    "capture_attention",
    "interactive_frontend",
    "positional_encoding_explorer",
    "sampling_explorer",
    "scaling_explorer",
    # also public before the split: the word vectors of a typed sentence, the course's colours
    "word_vectors",
    "BLUE",
    "PURPLE",
    "TEAL",
    "YELLOW",
]

