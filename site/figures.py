"""The course's own figures for the website, drawn by the course's code (run by `make site`).

Usage: python site/figures.py OUT_DIR

- ``positional_encoding.png``: Day 5's positional-encoding explorer (``course.explorers``), in
  its static mode, over the course's sinusoidal encoding (``course.standins``, the stand-in with
  Day 5's contract);
- ``model_families.png``: Day 12's "who attends to whom" in the three Transformer families
  (``course.plots.plot_model_families``);
- ``favicon.png``: the site's icon, the decoder-only (causal) mask of ``course.plots.family_masks``.

Nothing is trained and nothing is downloaded; it takes a few seconds on a CPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.pop("NBGRADER_EXECUTION", None)   # the course draws nothing while nbgrader grades
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the checkout's `course`


def main(out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course.explorers.positional import positional_encoding_explorer
    from course.plots import family_masks, plot_model_families
    from course.standins import SinusoidalPositionalEncoding

    out.mkdir(parents=True, exist_ok=True)
    written = []

    explorer = positional_encoding_explorer(SinusoidalPositionalEncoding(d_model=64, max_len=64),
                                            max_len=64, position=10, dim=6, interactive=False)
    path = out / "positional_encoding.png"
    explorer.figure.savefig(path, dpi=90)
    written.append(path)

    fig = plot_model_families(4, 4)
    path = out / "model_families.png"
    fig.savefig(path, dpi=80)
    written.append(path)

    mask = family_masks(3, 3)["decoder-only (GPT)"].float().numpy()
    path = out / "favicon.png"
    plt.imsave(path, mask, cmap="viridis", vmin=0, vmax=1)   # 6 x 6 pixels, the browser scales
    written.append(path)

    plt.close("all")
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    for p in main(Path(sys.argv[1])):
        print(f"figure: {p}")
