"""The course author's tools: build the course and prove its hidden tests.

- :mod:`~autograder.authoring.build`: release/ and solutions/ from source/, and the check
  that the committed ones are in sync;
- :mod:`~autograder.authoring.author`: a source notebook from a plain-text file;
- :mod:`~autograder.authoring.verify`: answer keys 100%, blanks 0, every mutant of
  :mod:`~autograder.authoring.mutants` caught with its words, every alternative of
  :mod:`~autograder.authoring.alternatives` at 100%; :mod:`~autograder.authoring.stated`:
  the numbers the notebooks state against what the answer keys print;
- :mod:`~autograder.authoring.measure`, :mod:`~autograder.authoring.timing`: the record of
  measured figures and each day's stated time.

It may import :mod:`autograder.selfcheck`, :mod:`autograder.grading` (and what they may),
:mod:`autograder.core` and :mod:`course`; only the classroom and the CLI are above it.
"""
