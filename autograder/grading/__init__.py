"""Grading a batch of submissions: collect → pool/worker (or Dask) → score → records.

- :mod:`~autograder.grading.pipeline`: the batch (``python -m autograder grade``);
- :mod:`~autograder.grading.collect`: submissions found in folders and LMS zips;
- :mod:`~autograder.grading.pool`, :mod:`~autograder.grading.distributed`: where the work runs
  (local worker processes, or a Dask cluster);
- :mod:`~autograder.grading.worker`: one submission: admission checks, then nbgrader's
  autograde with the notebook run by :mod:`~autograder.grading.execute` in a sandboxed kernel,
  whose hidden test cells the judge decides, asking the kernel through
  :mod:`~autograder.grading.judge_session`;
- :mod:`~autograder.grading.score`: points from the judge's verdicts;
- :mod:`~autograder.grading.preflight`: what must hold before a batch starts;
- :mod:`~autograder.grading.feedback`, :mod:`~autograder.grading.report`: what the learners
  and the instructor read afterwards.

It may import :mod:`autograder.judge`, :mod:`autograder.sandbox`, :mod:`autograder.core` and
:mod:`course`; the learner's self-check, the authoring tools, the classroom and the CLI are
above it.
"""
