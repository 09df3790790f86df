"""Does a zip of LMS downloads become the <student>/<day>/ layout the grader reads?"""

from __future__ import annotations

import zipfile

import nbformat

from autograder.grading.collect import unzip_submissions

DAYS = ["day02_queries_keys_values", "day03_self_attention"]


def test_zip_collect_names_and_folder_layout(root, tmp_path):
    """Are nbgrader zip_collect names, plain folders and unsafe paths all handled?"""
    nb = nbformat.read(str(root / "solutions" / DAYS[1] / f"{DAYS[1]}.ipynb"), as_version=4)
    src = tmp_path / "a.ipynb"
    nbformat.write(nb, str(src))
    with zipfile.ZipFile(tmp_path / "lms.zip", "w") as z:
        z.write(src, f"day03_alice_attempt_2026-01-05-10-00-00_{DAYS[1]}.ipynb")
        z.write(src, f"export/bob/{DAYS[1]}/{DAYS[1]} (1).ipynb")
        z.write(src, "day03_carol_attempt_2026-01-05-10-00-00_my_work.ipynb")  # day from cells
        z.write(src, "../escape.ipynb")
    subs = unzip_submissions(tmp_path / "lms.zip", tmp_path / "out", DAYS)
    got = sorted(str(p.relative_to(subs)) for p in subs.rglob("*.ipynb"))
    assert got == [f"alice/{DAYS[1]}/{DAYS[1]}.ipynb", f"bob/{DAYS[1]}/{DAYS[1]} (1).ipynb",
                   f"carol/{DAYS[1]}/my_work.ipynb"]
    assert not (tmp_path / "escape.ipynb").exists()
