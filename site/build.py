"""Build the course's website into site/_build/html (what `make site` runs).

1. Stage the sources in site/_build/src: this folder's conf.py, index.md and _static/; the
   README (the home page includes most of it); docs/*.md; the 14 notebooks of release/ (the
   exercises as the learner gets them; never source/ or solutions/), each with a box that links
   to its file in the repository and to "Open a day in JupyterLab"; the raw notebooks, served
   as files of the site; MathJax from site/node_modules (npm ci).
2. Draw the course's figures with site/figures.py.
3. Run Sphinx (myst-nb, sphinx-book-theme). The notebooks are not executed.

Environment:
  SITE_REPO_URL  the repository's URL for a file, without the trailing slash, e.g.
                 https://github.com/ORG/REPO/blob/main (set where the site is published).
                 Unset: each day links to the copy of its notebook served by the site itself.

Usage: python site/build.py [--out DIR]
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SITE = Path(__file__).resolve().parent
ROOT = SITE.parent
MATHJAX = SITE / "node_modules" / "mathjax" / "es5"
# What the site's MathJax (tex-chtml.js) may load on demand; the rest of es5/ is left out.
MATHJAX_KEEP = ["tex-chtml.js", "input", "output/chtml", "ui", "a11y", "sre", "adaptors"]



# README sections the home page leaves out: the developers' commands and the file layout (the
# site's "Start here" says how a learner begins).
HOME_SKIPS = ("Two commands", "Layout")


def readme_sections(readme: str) -> tuple[str, dict[str, str]]:
    """The README's text before its first ``## `` heading (less the title), and each
    ``## `` section by its title, in order."""
    parts = re.split(r"(?m)^(?=## )", readme)
    intro = "\n".join(parts[0].splitlines()[1:]).strip() + "\n"
    sections = {}
    for part in parts[1:]:
        title = part.splitlines()[0][3:].strip()
        if title not in HOME_SKIPS:
            sections[title] = part.rstrip() + "\n"
    return intro, sections

def day_notebooks() -> list[Path]:
    days = sorted(p for p in (ROOT / "release").glob("day[0-9][0-9]_*/day[0-9][0-9]_*.ipynb")
                  if p.parent.name == p.stem)
    if len(days) != 14:
        raise SystemExit(f"expected the 14 release notebooks, found {len(days)} in release/")
    return days


def repo_link(rel: str, depth: int) -> str:
    """The href of a repository file ``rel`` from a page ``depth`` folders below the root."""
    base = os.environ.get("SITE_REPO_URL", "").strip().rstrip("/")
    return f"{base}/{rel}" if base else "../" * depth + rel


def notebook_box(rel: str) -> str:
    href = html.escape(repo_link(rel, 1), quote=True)
    where = "in the repository" if os.environ.get("SITE_REPO_URL", "").strip() else "on this site"
    return (
        ":::{admonition} This day as a notebook\n"
        ":class: tip site-notebook-box\n"
        f"The notebook file, {where}: <a class=\"site-notebook-link\" href=\"{href}\">"
        f"<code>{html.escape(rel)}</code></a>\n\n"
        "Shown here as the learner gets it: the exercises are blank and nothing has been run. "
        "To work through it, [open it in JupyterLab](../index.md#open-a-day-in-jupyterlab).\n"
        ":::\n")


def stage_notebook(src: Path, dest: Path) -> None:
    """The release notebook, its first cell split after the title, the box in between."""
    nb = json.loads(src.read_text(encoding="utf-8"))
    first = nb["cells"][0]
    text = "".join(first["source"]) if isinstance(first["source"], list) else first["source"]
    rel = src.relative_to(ROOT).as_posix()
    box = {"cell_type": "markdown", "id": "site-notebook-box", "metadata": {},
           "source": notebook_box(rel)}
    if first["cell_type"] == "markdown" and text.startswith("# "):
        title, _, rest = text.partition("\n")
        first["source"] = title
        cells = [first, box]
        if rest.strip():
            cells.append({"cell_type": "markdown", "id": "site-objectives", "metadata": {},
                          "source": rest.strip("\n")})
        nb["cells"] = cells + nb["cells"][1:]
    else:
        nb["cells"].insert(0, box)
    dest.write_text(json.dumps(nb, indent=1, ensure_ascii=False), encoding="utf-8")


def stage(src: Path) -> None:
    if src.exists():
        shutil.rmtree(src)
    src.mkdir(parents=True)
    shutil.copy2(SITE / "conf.py", src / "conf.py")
    shutil.copy2(SITE / "index.md", src / "index.md")
    shutil.copytree(SITE / "_static", src / "_static")

    # The home page includes the README: its opening (what the course is) first, then the
    # site's own "Start here", then the days (their names link to the day pages) and how the
    # course works. The README's commands for developers and its file layout stay out.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    days = day_notebooks()
    for nb in days:
        readme = readme.replace(f"| `{nb.stem}` |", f"| [`{nb.stem}`](days/{nb.stem}.ipynb) |")
    intro, sections = readme_sections(readme)
    (src / "_readme_intro.md").write_text(intro, encoding="utf-8")
    order = ["The 14 days"] + [t for t in sections if t not in HOME_SKIPS + ("The 14 days",)]
    (src / "_readme_rest.md").write_text(
        "\n".join(sections[t] for t in order if t in sections), encoding="utf-8")

    (src / "docs").mkdir()
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text(encoding="utf-8").replace("](../README.md", "](../index.md")
        (src / "docs" / doc.name).write_text(text, encoding="utf-8")

    (src / "days").mkdir()
    for nb in days:
        stage_notebook(nb, src / "days" / nb.name)
        raw = src / "_extra" / nb.relative_to(ROOT)
        raw.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, raw)

    if not (MATHJAX / "tex-chtml.js").is_file():
        raise SystemExit(f"MathJax is missing ({MATHJAX}): run `npm ci` in site/ "
                         "(make site does)")
    for part in MATHJAX_KEEP:
        a, b = MATHJAX / part, src / "_static" / "mathjax" / part
        b.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if a.is_dir() else shutil.copy2)(a, b)

    subprocess.run([sys.executable, str(SITE / "figures.py"), str(src / "_static" / "figures")],
                   check=True, cwd=ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=SITE / "_build" / "html")
    args = ap.parse_args()
    t0 = time.monotonic()
    src = SITE / "_build" / "src"
    stage(src)
    out = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "sphinx", "-b", "html", "-E", "-q", "-j", "auto",
           "-d", str(SITE / "_build" / "doctrees"), str(src), str(out)]
    subprocess.run(cmd, check=True, cwd=src)
    pages = sum(1 for p in out.rglob("*.html") if not p.is_relative_to(out / "_static"))
    print(f"site: {pages} pages in {out} ({time.monotonic() - t0:.0f} s); "
          f"open {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
