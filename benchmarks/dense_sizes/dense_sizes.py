"""Backbones alone at the dense-task input sizes: time and peak memory against the same peers (issue 15).

Detection and segmentation run a backbone on larger, often non-square inputs: 800x1280 (the COCO Mask R-CNN
resize) and 512x512 (the ADE20K crop). This script times ``forward_features`` (the backbone without its
classification head) of each model folded as ``pdevision bench`` folds it, at each size and batch, interleaved in
one process with the steady allocator, in fp32 and bf16 autocast, and measures the peak memory of one fp32
forward in a fresh process per model and size. Writes ``benchmarks/dense_sizes/dense_sizes.md`` (and ``.json``).

Run: ``PYTHONPATH=src python -m benchmarks.dense_sizes.dense_sizes --threads 2``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
from benchmarks.records import REPOSITORY, add_report_only, command_line, read_record, write_record, write_report

from pdevision.bench.measure import machine_description
from pdevision.engine.validators import positive_int  # the CLI's check: a clear argparse error

HERE = Path(__file__).resolve().parent
MODELS = ("vheat_tiny", "hcnet_tiny", "convnext_tiny", "swin_tiny_patch4_window7_224")
SIZES = ((800, 1280), (512, 512))
DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def parse_size(text: str) -> tuple[int, int]:
    """``"800x1280"`` -> ``(800, 1280)`` (height x width)."""
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size is HEIGHTxWIDTH, for example 800x1280, got {text!r}") from None
    if h < 32 or w < 32:
        raise argparse.ArgumentTypeError(f"a size needs both sides of at least 32 px, got {text!r}")
    return h, w


def backbone(name: str, size: tuple[int, int]) -> Any:
    """The folded model's ``forward_features``, built for ``size``."""
    from pdevision.bench.models import create_for_bench
    from pdevision.models.factory import ModelNameError

    try:
        model = create_for_bench(name, size, torch.device("cpu"))
    except ModelNameError as exc:
        raise SystemExit(f"dense_sizes: {exc}") from None
    if not hasattr(model, "forward_features"):
        raise SystemExit(f"dense_sizes: {name} has no forward_features after folding; choose a backbone without one")
    return model.forward_features


def probe_memory(name: str, size: tuple[int, int], batch: int) -> float:
    """Peak resident-set growth (MiB) of one fp32 forward in a fresh process."""
    cmd = [sys.executable, "-m", __spec__.name, "--probe", json.dumps([name, list(size), batch])]
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False, timeout=900, cwd=REPOSITORY)
    if out.returncode != 0:
        raise RuntimeError(f"memory probe of {name} at {size} failed: {out.stderr.strip()[-500:]}")
    return float(out.stdout.strip().splitlines()[-1])


def _probe(spec: str) -> None:
    from pdevision.bench.measure import _release_and_reset_peak, _rss_status

    name, size, batch = json.loads(spec)
    fn = backbone(name, tuple(size))
    x = torch.randn(batch, 3, *size)
    with torch.inference_mode():
        fn(x[:1])  # caches (decay factors, DCT bases) built once, as in a running process
        base = _release_and_reset_peak()
        fn(x)
    print((_rss_status()["VmHWM"] - base) / 2**20)


def measure(models: list[str], sizes: list[tuple[int, int]], batches: list[int], repeats: int) -> list[dict]:
    from pdevision.bench.measure import inference_fn, interleaved_medians

    rows = []
    for size in sizes:
        fns = {name: backbone(name, size) for name in models}
        for batch in batches:
            x = torch.randn(batch, 3, *size)
            memory = {name: probe_memory(name, size, batch) for name in models}
            for dt, autocast in DTYPES.items():
                calls = {n: inference_fn(f, x, autocast) for n, f in fns.items()}
                times = interleaved_medians(calls, torch.device("cpu"), repeats=repeats)
                for name in models:
                    rows.append(
                        {
                            "model": name,
                            "size": f"{size[0]}x{size[1]}",
                            "batch": batch,
                            "dtype": dt,
                            "ms": 1000 * times[name]["median"],
                            "peak_mib": memory[name],
                        }
                    )
                    print(rows[-1], flush=True)
    return rows


def report(record: dict[str, Any]) -> str:
    """Markdown: one table per size, batch and dtype, each model's time as a multiple of the first model's."""
    rows, repeats, seconds = record["rows"], record["repeats"], record["seconds"]
    lines = [
        "# Backbones alone at dense-task input sizes",
        "",
        "Written by `python -m benchmarks.dense_sizes.dense_sizes`.",
        "",
        f"- CPU, {record['threads']} threads, torch {record['torch']}, steady allocator; `forward_features` of each "
        f"folded model (no classification head); median of {repeats} interleaved repeats after warm-up; "
        f"{seconds:.0f} s in all. Peak MiB: resident-set growth of one fp32 forward in a fresh process (caches built "
        "by a first one-image forward).",
        "- Throughput relative to the first model: its time over the model's (above 1: faster than it).",
        "",
        "| size (HxW) | batch | dtype | model | ms | relative throughput | peak MiB |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    first = {}
    for r in rows:
        key = (r["size"], r["batch"], r["dtype"])
        first.setdefault(key, r["ms"])
        lines.append(
            f"| {r['size']} | {r['batch']} | {r['dtype']} | {r['model']} | {r['ms']:.0f} | "
            f"{first[key] / r['ms']:.2f} | {r['peak_mib']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS), help="the first is the reference of the ratios")
    p.add_argument("--sizes", nargs="+", type=parse_size, default=list(SIZES), help="HEIGHTxWIDTH")
    p.add_argument("--batches", nargs="+", type=positive_int, default=[1, 2])
    p.add_argument("--repeats", type=positive_int, default=5)
    p.add_argument("--threads", type=positive_int, default=None)
    p.add_argument("--md", type=Path, default=HERE / "dense_sizes.md", help="the report; its record: same name, .json")
    p.add_argument("--probe", help=argparse.SUPPRESS)
    add_report_only(p)
    args = p.parse_args(argv)
    if args.report_only:
        write_report(args.md, report(read_record(args.md.with_suffix(".json"))))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.probe:
        _probe(args.probe)
        return 0
    from pdevision.bench.measure import steady_allocator

    steady_allocator()
    start = time.perf_counter()
    rows = measure(args.models, args.sizes, args.batches, args.repeats)
    seconds = time.perf_counter() - start
    record = {
        "command": command_line(__spec__.name, argv),
        "machine": machine_description(torch.device("cpu")),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "repeats": args.repeats,
        "seconds": seconds,
        "rows": rows,
    }
    write_record(args.md.with_suffix(".json"), record, sort_keys=False)
    write_report(args.md, report(record))
    print(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
