"""Images per second of ``pdevision predict`` over a folder of images: batched (``--batch-size``, the default 32)
against one image per forward pass (``--batch-size 1 --workers 0``: what ``predict`` did before it batched), and
against timm's own ``inference.py`` on the same model, checkpoint file and images.

Each arm is a fresh Python process, run ``--repeats`` times, the arms interleaved so that a change of load touches
each alike. Every process imports ``pdevision`` (which registers the models with timm), notes the time, runs the
command (``pdevision.cli.main``, or timm's script through ``runpy`` as ``__main__``) and prints the seconds it took
after the imports: model loading, listing and decoding the images, the forward passes and the output are timed,
the interpreter's start and the imports are not (the process's wall time is recorded beside). timm's script is
given by its path (``--timm-inference``, e.g. a checkout of github.com/huggingface/pytorch-image-models); nothing
is downloaded, and without it that arm is left out. The images are ``--images`` real digits at 64 px
(``pdevision.data.DigitsDataset``), written as an ImageFolder tree ``<class>/<i>.png`` that both read.

Run: ``PYTHONPATH=src python -m benchmarks.predict_speed.predict_speed --checkpoint RUN --timm-inference
PATH/inference.py --threads 2``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.records import (
    add_report_only,
    load_average,
    machine_line,
    rewrite_report,
    save_study,
)

from pdevision.data import DigitsDataset
from pdevision.engine import validators as V
from pdevision.engine.checkpoint import label_names, read_meta, resolve

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")
SRC = Path(__file__).resolve().parents[2] / "src"

# the process of each arm: the imports, then the timed command; the seconds on the last line of stderr
PDEVISION = (
    "import sys, time, pdevision.cli; t = time.perf_counter(); code = pdevision.cli.main({argv!r}); "
    "print('SECONDS', time.perf_counter() - t, file=sys.stderr); sys.exit(code)"
)
TIMM = (
    "import runpy, sys, time, pdevision; sys.argv = {argv!r}; t = time.perf_counter(); "
    "runpy.run_path({script!r}, run_name='__main__'); print('SECONDS', time.perf_counter() - t, file=sys.stderr)"
)


def write_images(root: Path, count: int) -> Path:
    """``count`` real digits at 64 px as an ImageFolder tree under ``root``."""
    digits = DigitsDataset("val", img_size=64)
    for i in range(count):
        image, label = digits[i % len(digits)]
        (root / str(label)).mkdir(parents=True, exist_ok=True)
        image.save(root / str(label) / f"{i:04d}.png")
    return root


def checkpoint_file(checkpoint: Path) -> tuple[Path, dict[str, Any]]:
    """The weights file of a run folder or checkpoint folder, and its metadata (what timm's script is told)."""
    folder = resolve(str(checkpoint))
    return folder / "model.safetensors", read_meta(folder)


def arms(args: argparse.Namespace, images: Path, results: Path) -> dict[str, str]:
    """The code each arm's process runs."""
    predict = ["predict", "--checkpoint", str(args.checkpoint), "--threads", str(args.threads), str(images)]
    out = {
        f"pdevision predict --batch-size {args.batch_size}": PDEVISION.format(
            argv=[*predict, "--batch-size", str(args.batch_size)]
        ),
        "pdevision predict --batch-size 1 --workers 0 (one image per call)": PDEVISION.format(
            argv=[*predict, "--batch-size", "1", "--workers", "0"]
        ),
    }
    if args.timm_inference is not None:
        weights, meta = checkpoint_file(args.checkpoint)
        size = int(meta["img_size"])
        argv = [
            "inference.py",
            str(images),
            "--model",
            meta["model"],
            "--checkpoint",
            str(weights),
            "--num-classes",
            str(len(label_names(meta))),
            "--img-size",
            str(size),
            "--model-kwargs",
            f"img_size={size}",
            "--batch-size",
            str(args.batch_size),
            "--device",
            "cpu",
            "--topk",
            "5",
            "--no-console-results",
            "--results-dir",
            str(results),
        ]
        out[f"timm inference.py --batch-size {args.batch_size}"] = TIMM.format(
            argv=argv, script=str(args.timm_inference)
        )
    return out


def run_arm(code: str, threads: int) -> tuple[float, float]:
    """The seconds after the imports and the process's wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"predict_speed: an arm failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    seconds = [line for line in done.stderr.splitlines() if line.startswith("SECONDS ")]
    return float(seconds[-1].split()[1]), wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, help="a classification run folder or checkpoint folder")
    parser.add_argument("--timm-inference", type=Path, help="timm's inference.py (a checkout of the timm repository)")
    parser.add_argument("--images", type=V.positive_int, default=200)
    parser.add_argument("--batch-size", type=V.batch, default=32)
    parser.add_argument("--threads", type=V.count, default=2)
    parser.add_argument("--repeats", type=V.repeats, default=3)
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(RECORD, OUT)
        return 0
    if args.checkpoint is None:
        parser.error("--checkpoint is required (a classification run, e.g. the one `make demo` trains)")
    if args.timm_inference is not None and not args.timm_inference.is_file():
        parser.error(f"--timm-inference {args.timm_inference} is not a file")
    load_before = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        images = write_images(Path(tmp) / "images", args.images)
        codes = arms(args, images, Path(tmp) / "timm-results")
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in codes}
        for _ in range(args.repeats):
            for name, code in codes.items():
                times[name].append(run_arm(code, args.threads))
                print(f"{name}: {times[name][-1][0]:.2f} s", file=sys.stderr, flush=True)
    load_after = load_average()
    data = {
        name: {"seconds": [s for s, _ in runs], "wall_seconds": [w for _, w in runs]} for name, runs in times.items()
    }
    base = statistics.median(data[next(iter(data))]["seconds"])
    rows = []
    for name, d in data.items():
        median = statistics.median(d["seconds"])
        rows.append(
            f"| {name} | {args.images / median:.1f} | {median:.2f} | {min(d['seconds']):.2f} | "
            f"{statistics.median(d['wall_seconds']):.2f} | {median / base:.2f} |"
        )
    weights_meta = checkpoint_file(args.checkpoint)[1]
    text = "\n".join(
        [
            "# predict: images per second",
            "",
            f"Made by `python -m {__spec__.name} {_public(argv)}` (the paths of this machine left out).",
            f"Model: `{weights_meta['model']}` at {weights_meta['img_size']} px, {args.images} PNG digits at 64 px in "
            f"an ImageFolder tree; {args.repeats} runs of each arm, interleaved; each a fresh process, timed after its "
            "imports (model loading, reading the images, the forward passes, the output).",
            f"Machine: {machine_line(args.threads)}; shared with other jobs (load average {load_before} before, "
            f"{load_after} after): the times are noisy.",
            "",
            "| arm | images/s (median) | median s | min s | process wall s (median) | time / batched |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )
    save_study(RECORD, OUT, text, f"python -m {__spec__.name} {_public(argv)}", data)
    print(text)
    return 0


def _public(argv: list[str] | None) -> str:
    """The arguments without the paths of this machine (the checkpoint's and the script's names kept)."""
    words = list(sys.argv[1:] if argv is None else argv)
    return " ".join(
        Path(w).name if i and words[i - 1] in ("--checkpoint", "--timm-inference") else w for i, w in enumerate(words)
    )


if __name__ == "__main__":
    sys.exit(main())
