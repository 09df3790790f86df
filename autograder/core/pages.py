"""The HTML pages the grader writes (feedback, class report, similarity), from templates.

Jinja2 (installed with JupyterLab and nbgrader), templates in ``autograder/core/templates/``,
autoescaping on for every page: everything a submission can put on a page (its code, its
outputs, its student id, a diagnosis quoting its values) is escaped by the template, never by
hand. ``StrictUndefined``: a name a template lacks is an error, not an empty cell.
"""

from __future__ import annotations

from functools import cache

from markupsafe import Markup

__all__ = ["Markup", "render"]


@cache
def _environment():
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("autograder.core", "templates"),
                              autoescape=True, undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True)


def render(template: str, **context) -> str:
    """The page ``template`` (a file name under ``templates/``) filled with ``context``."""
    return _environment().get_template(template).render(**context)
