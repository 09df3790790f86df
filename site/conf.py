"""Sphinx configuration of the course's website (built by `make site`, see site/build.py).

build.py stages this file, the home page, the docs and the 14 release notebooks into
site/_build/src and runs Sphinx there: the notebooks are shown as the learner gets them, never
executed. MathJax is served from the site itself (npm's `mathjax`, copied into _static/mathjax
by build.py): the site needs no network, neither to build nor to read.
"""

project = "Transformers from Scratch"
author = "the course's authors"
copyright = "the course's authors; MIT licence"

extensions = ["myst_nb"]

# The release notebooks have no outputs and are never run here.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "html_image"]
myst_heading_anchors = 3
myst_dmath_double_inline = True

exclude_patterns = ["_readme.md", "_extra", "Thumbs.db", ".DS_Store"]
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type"]

html_theme = "sphinx_book_theme"
html_title = "Transformers from Scratch"
html_static_path = ["_static"]
html_favicon = "_static/figures/favicon.png"   # drawn by figures.py (else a 404 for /favicon.ico)
html_extra_path = ["_extra"]          # the raw release notebooks, downloadable from the site
html_css_files = ["site.css"]
# Without a default mode the theme logs "invalid theme mode" (a console error) on a first visit.
html_context = {"default_mode": "light"}
html_last_updated_fmt = None
html_copy_source = False
html_show_sourcelink = False
html_theme_options = {
    "home_page_in_toc": True,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "search_bar_text": "Search the course…",
}

# MathJax 3 from this site's own _static folder (relative paths are relative to _static).
mathjax_path = "mathjax/tex-chtml.js"
mathjax3_config = {"options": {"enableMenu": False}}
