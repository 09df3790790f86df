"""What every package of the autograder shares, below all of them.

- :mod:`~autograder.core.course`: where the course lives, its days, their notebooks, and the
  error a user can fix (``PipelineError``);
- :mod:`~autograder.core.nbgrader`: nbgrader driven with the course's configuration
  (``nbgrader_config.py``): generate an assignment, run a converter;
- :mod:`~autograder.core.records`: a graded result, its key, its files and tables;
- :mod:`~autograder.core.acceptance`: which flagged results an instructor accepted.

It may import :mod:`course` only; every other package of ``autograder`` may import it.
"""
