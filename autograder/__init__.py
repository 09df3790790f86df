"""The grading pipeline of Transformers from Scratch: build, grade, judge, report.

Importing any part of it first marks the optional package ``rfc3987_syntax`` absent: jsonschema
(imported by nbformat) otherwise builds about 40 parsers at import when it is installed
(jupyter-events asks for it), 0.75 s in every grading process and worker, for IRI formats that
no notebook schema uses.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)
