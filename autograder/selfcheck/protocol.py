"""The lines a standby prints for its caller (the notebook's kernel, or the warm helper).

Lines that start with ``\\x1e`` are the protocol's, not the report's: :data:`READY` once the
standby is ready to grade, :data:`SENTINEL` followed by the exit status after the report.
A module of its own, so that the command line's client reads them without importing the
grading pipeline.
"""

READY = "\x1eready"
SENTINEL = "\x1eexit "
