"""nbgrader configuration for the course: a short list of decisions.

The CLI (``python -m autograder``) loads this file and sets ``CourseDirectory.root`` and the
gradebook URL itself, so the same config serves the build, grading in temporary course
folders, and an instructor running ``nbgrader`` by hand with ``--config``.
"""

from nbgrader.preprocessors import (
    ClearHiddenTests,
    ClearMarkScheme,
    ClearOutput,
    IncludeHeaderFooter,
    LockCells,
)

c = get_config()  # noqa: F821 - provided by traitlets when this file is loaded

c.CourseDirectory.course_id = "transformers-from-scratch"
c.CourseDirectory.source_directory = "source"
c.CourseDirectory.release_directory = "release"
# Answer keys live in solutions/ (nbgrader's default is "solution").
c.CourseDirectory.solution_directory = "solutions"

# Solutions are answer keys for instructors and stuck learners: no hidden tests in them, and
# they are not executed at build time (nbgrader's default list ends with Execute, which would
# train the models of Days 9-13 on every build). Hidden tests are cleared last.
c.GenerateSolution.preprocessors = [
    IncludeHeaderFooter,
    LockCells,
    ClearOutput,
    ClearMarkScheme,
    ClearHiddenTests,
]

# Every graded day runs "Restart & Run All" in seconds in the grading profile; a cell that
# takes longer than this is a hanging submission, not a slow one.
c.Execute.timeout = 180
c.Execute.allow_errors = True
c.Execute.interrupt_on_timeout = True

# nbgrader scores a test cell that wrote anything to stderr as failed. The grading library
# silences warnings inside checks; this removes the rest (a PyTorch UserWarning printed by a
# learner's correct code in the test cell) so a warning never zeroes a right answer.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"^[^\n]*\b\w*Warning: "

# Student ids are folder names; the course does not use nbgrader's exchange.
c.Exchange.root = "/tmp/transformers-from-scratch-exchange"
