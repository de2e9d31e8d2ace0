"""The same `pdevision bench` command run several times, each in a fresh process: how far its ratios move.

Within one run the models are interleaved and each figure is a median of 5, but a fresh process lays out its
memory differently, and on the development machine the bf16 ratio of vHeat-T to ConvNeXt-T moved by several
percent from one run to the next. This reads the ``results.json`` of each run given and writes, per ratio, every
run's value and their minimum, median and maximum (``reruns.md`` beside this script).

Run: ``python benchmarks/bench_cpu_perf/reruns.py RUN_DIR [RUN_DIR ...]`` (each a ``pdevision bench --out`` folder)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

OUT = Path(__file__).with_name("reruns.md")
PAIRS = (
    ("vheat_tiny", "convnext_tiny"),
    ("vheat_tiny", "swin_tiny_patch4_window7_224"),
    ("hcnet_tiny", "convnext_tiny"),
    ("pderesnet50", "resnet50"),
)


def load_ratios(folder: Path) -> dict[tuple[str, str, str, int], float]:
    """``(model, peer, dtype, img_size) -> ratio`` of one run folder; a clear error for a folder without a run."""
    file = folder / "results.json"
    try:
        data = json.loads(file.read_text())
        return {(r["model"], r["peer"], r["dtype"], int(r["img_size"])): float(r["ratio"]) for r in data["ratios"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"reruns: {file} is not the results.json of a `pdevision bench` run ({exc})") from None


def table(runs: list[dict[tuple[str, str, str, int], float]], names: list[str]) -> list[str]:
    sizes = sorted({k[3] for run in runs for k in run})
    lines = [
        "| model | vs | dtype | px | " + " | ".join(names) + " | min | median | max |",
        "|---|---|---|---:|" + "---:|" * (len(names) + 3),
    ]
    for dtype in ("fp32", "bf16"):
        for model, peer in PAIRS:
            for px in sizes:
                values = [run.get((model, peer, dtype, px)) for run in runs]
                if any(v is None for v in values):
                    continue
                cells = " | ".join(f"{v:.3f}" for v in values)
                lo, mid, hi = min(values), statistics.median(values), max(values)  # type: ignore[type-var]
                lines.append(f"| {model} | {peer} | {dtype} | {px} | {cells} | {lo:.3f} | {mid:.3f} | {hi:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="folders written by `pdevision bench --out`")
    parser.add_argument("--names", nargs="+", help="a column name per run (default: the folder names)")
    parser.add_argument("--note", default="", help="a line about how the runs were made")
    parser.add_argument("--md", type=Path, default=OUT)
    args = parser.parse_args(argv)
    names = args.names or [p.name for p in args.runs]
    if len(names) != len(args.runs):
        raise SystemExit(f"reruns: {len(args.runs)} runs but {len(names)} names")
    runs = [load_ratios(p) for p in args.runs]
    lines = ["# The same bench command, run in fresh processes: throughput ratios per run", ""]
    lines += [args.note, ""] if args.note else []
    lines += table(runs, names)
    args.md.write_text("\n".join(lines) + "\n")
    print(f"written to {args.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
