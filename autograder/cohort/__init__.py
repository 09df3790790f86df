"""After a batch is graded: what an instructor of a cohort does with the results.

- :mod:`~autograder.cohort.similarity`: ``python -m autograder similarity``: pairs of
  submissions whose own code is alike, ranked, with a side-by-side HTML report (it never
  changes a grade);
- :mod:`~autograder.cohort.export`: ``python -m autograder export``: the grades in an LMS's own
  import layout (Canvas, Moodle, plain CSV), mapped through the LMS's exported roster.

It may import :mod:`autograder.grading`, :mod:`autograder.core` and :mod:`course`; the
learner's self-check, the authoring tools, the classroom and the CLI are above it.
"""
