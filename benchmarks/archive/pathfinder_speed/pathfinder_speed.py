"""The Pathfinder generator against an earlier revision of itself: the same images, and the time each takes.

    python -m benchmarks.archive.pathfinder_speed.pathfinder_speed --against REV [--images 500] [--rounds 3]

``REV`` is a git revision; its ``src/pdevision/data/pathfinder.py`` is imported beside the current one. For each
embedded Pathfinder set (``pathfinder-6``, ``pathfinder-9``, ``pathfinder`` of 14 dashes, ``pathx`` at 128 px), both
draw the first ``--images`` validation images, ``--rounds`` times in turn, in this one process; the table gives the
median seconds of each, their ratio, and whether every field of every image is identical (a generator change made
while a study runs must keep them so: the study's images are drawn from the seed). Wall clock; the machine's other
load is printed, not controlled.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from types import ModuleType

import numpy as np
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study

from pdevision.data import pathfinder as current
from pdevision.data.embedded import PATHFINDER_SETS

ROOT = Path(__file__).resolve().parents[3]
OUT = Path(__file__).with_suffix(".md")

SETS = ("pathfinder-6", "pathfinder-9", "pathfinder", "pathx")


def generator_at(rev: str, folder: Path) -> ModuleType:
    """``pdevision.data.pathfinder`` as it was at git revision ``rev``, imported as its own module."""
    source = subprocess.run(
        ["git", "show", f"{rev}:src/pdevision/data/pathfinder.py"], cwd=ROOT, capture_output=True, text=True
    )
    if source.returncode:
        raise SystemExit(f"pathfinder_speed: no generator at revision {rev!r}: {source.stderr.strip()}")
    path = folder / "pathfinder_at_rev.py"
    path.write_text(source.stdout)
    spec = importlib.util.spec_from_file_location("pathfinder_at_rev", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  (dataclasses look their module up)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def same(a: object, b: object) -> bool:
    return all(np.array_equal(getattr(a, f.name), getattr(b, f.name)) for f in fields(a))  # type: ignore[arg-type]


def compare(old: ModuleType, name: str, n: int, rounds: int) -> dict[str, float | bool]:
    spec = PATHFINDER_SETS[name]
    old_cfg = old.PathfinderConfig(**{f.name: getattr(spec.config, f.name) for f in fields(spec.config)})
    times: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(rounds):
        t = time.perf_counter()
        a = old.make_pathfinder(spec.seed, "val", n, old_cfg)
        times["old"].append(time.perf_counter() - t)
        t = time.perf_counter()
        b = current.make_pathfinder(spec.seed, "val", n, spec.config)
        times["new"].append(time.perf_counter() - t)
    old_s, new_s = statistics.median(times["old"]), statistics.median(times["new"])
    return {"old": old_s, "new": new_s, "ratio": new_s / old_s, "same": same(a, b)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="git revision of the generator to compare with (needed to measure)")
    parser.add_argument("--images", type=int, default=500, help="validation images per set (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each, median reported (default 3)")
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--md", type=Path, default=OUT, help="the report; its record: the same name, .json")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(args.md.with_suffix(".json"), args.md)
        return 0
    if args.against is None:
        parser.error("--against REV is needed to measure (or --report-only)")
    if args.images < 1 or args.rounds < 1:
        parser.error(f"--images and --rounds must be 1 or more, got {args.images} and {args.rounds}")
    with tempfile.TemporaryDirectory() as tmp:
        old = generator_at(args.against, Path(tmp))
        lines = [
            f"# The Pathfinder generator against {args.against}",
            "",
            f"`{command_line(__spec__.name, argv)}`; load average at the start {os.getloadavg()[0]:.1f}, "
            f"{machine_line()}.",
            "",
            f"| set | {args.against} s | now s | now / then | identical |",
            "|---|---:|---:|---:|---|",
        ]
        for name in args.sets:
            r = compare(old, name, args.images, args.rounds)
            lines.append(
                f"| `{name}` | {r['old']:.1f} | {r['new']:.1f} | {r['ratio']:.2f} | {'yes' if r['same'] else 'NO'} |"
            )
            print(lines[-1], flush=True)
    save_study(args.md.with_suffix(".json"), args.md, "\n".join(lines), command_line(__spec__.name, argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
