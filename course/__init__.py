"""Transformers from Scratch: the helpers learners import (data, plots, device, visible checks).

This package never contains solutions: the learner writes every graded function in the
notebooks, and the checks here compare their code with PyTorch's own modules.
"""

__version__ = "0.1.0"
