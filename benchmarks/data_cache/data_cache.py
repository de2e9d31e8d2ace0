"""Drawing an embedded set against loading it from the disk cache (``PDEVISION_DATA_CACHE``).

    python -m benchmarks.data_cache.data_cache [--sets pathfinder:train:32 pathx:val:128 scenes:val:64] [--rounds 3]

For each ``NAME:SPLIT:SIZE``, in this one process: the seconds to draw the split without the cache (once: it is the
same work each time), to draw and write it with an empty cache folder, and to load it from that folder (the median of
``--rounds``, the in-process cache cleared before each), whether the loaded arrays equal the drawn ones, and the
file's size. Wall clock; the machine's other load is printed, not controlled. Writes ``data_cache.md`` beside this
script unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study

from pdevision.data.cache import ENV
from pdevision.data.embedded import (
    PATHFINDER_SETS,
    SCENE_SETS,
    check_embedded_size,
    pathfinder_arrays,
    scene_arrays,
)
from pdevision.data.errors import DataError

HERE = Path(__file__).resolve().parent


def arrays(name: str, split: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    if name in SCENE_SETS:
        scene_arrays.cache_clear()
        return scene_arrays(name, split, size)
    pathfinder_arrays.cache_clear()
    return pathfinder_arrays(name, split, size)


def timed(name: str, split: str, size: int) -> tuple[float, tuple[np.ndarray, np.ndarray]]:
    start = time.perf_counter()
    out = arrays(name, split, size)
    return time.perf_counter() - start, out


def measure(name: str, split: str, size: int, rounds: int, folder: Path) -> dict[str, float | bool | int]:
    """One set's row: draw, draw and write, load (median of ``rounds``), same arrays, file size."""
    os.environ.pop(ENV, None)
    draw, drawn = timed(name, split, size)
    os.environ[ENV] = str(folder)
    try:
        write, _ = timed(name, split, size)
        loads = [timed(name, split, size) for _ in range(rounds)]
    finally:
        os.environ.pop(ENV, None)
    same = all(np.array_equal(a, b) for _, got in loads for a, b in zip(drawn, got, strict=True))
    size_bytes = sum(p.stat().st_size for p in folder.glob(f"{name}-{split}-{size}px-*.npz"))
    return {
        "draw": draw,
        "write": write,
        "load": statistics.median(t for t, _ in loads),
        "same": same,
        "bytes": size_bytes,
        "images": len(drawn[1]),
    }


def parse_set(text: str) -> tuple[str, str, int]:
    parts = text.split(":")
    known = {*SCENE_SETS, *PATHFINDER_SETS}
    splits = ("train", "val") if parts[0] in SCENE_SETS else ("train", "val", "test")
    if len(parts) != 3 or parts[0] not in known or parts[1] not in splits or not parts[2].isdigit():
        raise argparse.ArgumentTypeError(
            f"{text!r}: give NAME:SPLIT:SIZE, NAME one of {', '.join(sorted(known))}, SPLIT one of train, val "
            f"(and test for Pathfinder), e.g. pathfinder:train:32"
        )
    try:
        check_embedded_size(parts[0], int(parts[2]))
    except DataError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    return parts[0], parts[1], int(parts[2])


def report(rows: list[tuple[tuple[str, str, int], dict]], rounds: int, command: str) -> str:
    lines = [
        "# Drawing an embedded set against loading it from the disk cache",
        "",
        f"`{command}` on {machine_line()}, load average "
        f"{os.getloadavg()[0]:.1f} at the end (other work on the machine was not stopped). Seconds, wall clock; load: "
        f"the median of {rounds}.",
        "",
        "| set | split | px | images | draw s | draw + write s | load s | draw / load | same arrays | file MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for (name, split, size), r in rows:
        lines.append(
            f"| {name} | {split} | {size} | {r['images']:,} | {r['draw']:.1f} | {r['write']:.1f} | {r['load']:.3f} | "
            f"{r['draw'] / r['load']:.0f}x | {'yes' if r['same'] else 'NO'} | {r['bytes'] / 1e6:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sets", nargs="+", type=parse_set, default=[("pathfinder", "train", 32), ("pathx", "val", 128)])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=HERE / "data_cache.md", help="the report; its record: same name, .json")
    add_report_only(p)
    args = p.parse_args(argv)
    if args.report_only:
        rewrite_report(args.out.with_suffix(".json"), args.out)
        return 0
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    rows = []
    for name, split, size in args.sets:
        with tempfile.TemporaryDirectory() as folder:
            rows.append(((name, split, size), measure(name, split, size, args.rounds, Path(folder))))
        print(name, split, size, rows[-1][1], flush=True)
    command = command_line(__spec__.name, argv)
    data = [{"set": list(key), **values} for key, values in rows]
    save_study(args.out.with_suffix(".json"), args.out, report(rows, args.rounds, command), command, data=data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
