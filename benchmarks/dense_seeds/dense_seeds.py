"""Micro backbones vs resnet18 on the embedded segmentation default at an equal step budget, several seeds.

Each run is ``pdevision train --task segment --model NAME --epochs E --seed S`` (UPerNet, the ``light``
recipe, the embedded scenes of generator seed 0: the split is the same for every seed, the seed moves the
initialisation, the batch order and the augmentation). Every model gets the same number of optimiser steps
(``--epochs`` x 250 batches of 8), so the comparison is at equal steps, not equal time; the CPU time of each
run (``time.process_time`` of this process: one torch thread, so it reads as the run's own compute whatever
the load of other jobs) is recorded beside it.

The script resumes: finished runs are read back from ``--out``/dense_seeds.json and skipped. It writes
``dense_seeds.json`` (one record per run) and ``dense_seeds.md`` (mean ± sample std over seeds).

    python -m benchmarks.dense_seeds.dense_seeds --models vheat_micro resnet18 hcnet_micro pderesnet_micro \
        --seeds 0 1 2 --epochs 2 --out benchmarks
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.records import add_report_only, command_line, machine_line, read_record, write_record, write_report

HERE = Path(__file__).resolve().parent


def run_one(model: str, seed: int, epochs: int) -> dict[str, Any]:
    """Train one segmentation run in this process; its summary's numbers and its CPU seconds."""
    from pdevision.engine import RunConfig
    from pdevision.tasks.dense import DenseConfig
    from pdevision.tasks.segment import train as train_dense

    with tempfile.TemporaryDirectory() as tmp:
        config = DenseConfig(model=model, run=RunConfig(epochs=epochs, seed=seed, output=tmp, progress=False))
        cpu0, wall0 = time.process_time(), time.perf_counter()
        summary = train_dense(config)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return {
        "model": model,
        "seed": seed,
        "epochs": epochs,
        "steps": summary["steps"],
        "best_val_miou": summary["best_val_miou"],
        "final_val_miou": summary["final"]["val_miou"],
        "final_val_pixel_acc": summary["final"]["val_pixel_acc"],
        "val_iou_per_class": summary["val_iou_per_class"],
        "cpu_s": cpu,
        "wall_s": wall,
        "load_avg_end": list(os.getloadavg()),
    }


def _mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else "—"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def report(record: dict[str, Any]) -> str:
    """The Markdown of a record: its header and the runs of the header's epochs, seeds and models."""
    header = record["header"]
    models = header["models"]
    records = [r for r in record["runs"] if r["epochs"] == header["epochs"] and r["seed"] in header["seeds"]]
    lines = [
        "# Micro backbones vs resnet18 on the embedded segmentation default",
        "",
        "Written by `python -m benchmarks.dense_seeds.dense_seeds` from `dense_seeds.json`.",
        f"UPerNet (decoder {header['decoder']}), `light` recipe, embedded scenes ({header['data']}), "
        f"{header['epochs']} epochs = {header['steps']} steps of batch 8 for every model (equal steps), "
        "val on the 250 val scenes. Seeds move the initialisation, batch order and augmentation; the scenes are "
        "the same for every seed. mIoU is the last epoch's (the schedule ends there), mean ± sample std over seeds.",
        f"Machine: {header['machine']}, one torch thread per run, runs one after another; CPU s is the run's "
        "process time (its own compute, whatever else runs), wall s depends on the other jobs.",
        "",
        "| backbone | seeds | val mIoU | val pixel acc | digits mean IoU | face IoU | CPU s / run | wall s / run |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for model in models:
        rows = [r for r in records if r["model"] == model]
        if not rows:
            continue
        digits = [statistics.mean(r["val_iou_per_class"][str(d)] or 0.0 for d in range(10)) for r in rows]
        face = [r["val_iou_per_class"]["face"] or 0.0 for r in rows]
        lines.append(
            f"| {model} | {', '.join(str(r['seed']) for r in rows)} | "
            f"{_mean_std([r['final_val_miou'] for r in rows])} | "
            f"{_mean_std([r['final_val_pixel_acc'] for r in rows])} | {_mean_std(digits)} | {_mean_std(face)} | "
            f"{statistics.mean(r['cpu_s'] for r in rows):.0f} | {statistics.mean(r['wall_s'] for r in rows):.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["vheat_micro", "resnet18", "hcnet_micro", "pderesnet_micro"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=str(HERE), help="folder of dense_seeds.json and dense_seeds.md")
    add_report_only(p)
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        write_report(out / "dense_seeds.md", report(read_record(out / "dense_seeds.json")))
        return 0
    import torch

    import pdevision  # noqa: F401  (registers the models)
    from pdevision.data.dense import DENSE_SCENE_KNOBS
    from pdevision.tasks.segment import SEGMENT_RECIPES

    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    store = out / "dense_seeds.json"
    record = read_record(store, empty={"header": {}, "runs": []})
    records: list[dict[str, Any]] = record["runs"]
    done = {(r["model"], r["seed"], r["epochs"]) for r in records}
    for model in args.models:  # models outermost, in the order given: a cut-short study has fewer models, all seeds
        for seed in args.seeds:
            if (model, seed, args.epochs) in done:
                continue
            print(f"{model} seed {seed} ...", file=sys.stderr, flush=True)
            record = run_one(model, seed, args.epochs)
            print(f"  mIoU {record['final_val_miou']:.2f} in {record['cpu_s']:.0f} CPU s", file=sys.stderr, flush=True)
            records.append(record)
            write_record(store, record, sort_keys=False)
    header = {
        "decoder": SEGMENT_RECIPES["light"].decoder_channels,
        "data": ", ".join(f"{k} {v}" for k, v in DENSE_SCENE_KNOBS.items()),
        "epochs": args.epochs,
        "steps": next((r["steps"] for r in records if r["epochs"] == args.epochs), "?"),
        "machine": f"{machine_line(1)} (cores shared with other jobs)",
        "models": args.models,
        "seeds": args.seeds,
        "command": command_line(__spec__.name, argv),
    }
    record["header"] = header
    write_record(store, record, sort_keys=False)
    write_report(out / "dense_seeds.md", report(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
