"""Sample images of the embedded Pathfinder sets for docs/pathfinder.md, and the generator's measured speed.

    python -m benchmarks.pathfinder_samples.pathfinder_samples   # writes pathfinder_samples.png beside it

Rows: ``pathfinder-6``, ``pathfinder-9``, ``pathfinder`` (14 dashes) at 32 px and ``pathx`` (128 px); the first
8 validation images of each (label 0, 1, 0, 1, ...). Prints the time to generate 1,000 validation images of each
set at its own size (wall clock, one process; the machine's other load is not controlled).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from pdevision.data.embedded import PATHFINDER_SETS
from pdevision.data.pathfinder import make_pathfinder

OUT = Path(__file__).with_name("pathfinder_samples.png")
SETS = ("pathfinder-6", "pathfinder-9", "pathfinder", "pathx")


def main() -> None:
    fig, axes = plt.subplots(len(SETS), 8, figsize=(12, 6.4))
    for row, name in enumerate(SETS):
        spec = PATHFINDER_SETS[name]
        drawn = make_pathfinder(spec.seed, "val", 8, spec.config)
        for col in range(8):
            ax = axes[row, col]
            ax.imshow(drawn.images[col], cmap="gray", vmin=0, vmax=255, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title("joined" if drawn.labels[col] else "apart", fontsize=8)
        axes[row, 0].set_ylabel(f"{name}\n{spec.config.size} px", fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT, dpi=80)
    for name in SETS:
        spec = PATHFINDER_SETS[name]
        start = time.perf_counter()
        drawn = make_pathfinder(spec.seed, "val", 1000, replace(spec.config))
        seconds = time.perf_counter() - start
        print(
            f"{name}: 1,000 images of {spec.config.size} px in {seconds:.1f} s, "
            f"mean distractors drawn {drawn.n_distractors.mean():.2f} of {spec.config.n_distractors}"
        )


if __name__ == "__main__":
    main()
