"""vHeatIR against DnCNN- and SwinIR-style nets (equal parameters, equal training time) and BM3D / NLM,
then inference time and memory against image size (the heat operator against window attention).

Run: ``python benchmarks/restoration.py`` (CPU-small defaults; ``--device cuda`` and a larger
``--train-seconds`` for a GPU). Writes ``benchmarks/restoration.md``, ``benchmarks/restoration.json``
and ``benchmarks/restoration_<setting>.png`` (before/after crops of a held-out photo).

Quality: the embedded photographs (grey), each network trained from scratch through the one fit loop
for the same wall-clock budget, evaluated once on the held-out photos at full size (PSNR/SSIM as in
``pdevision.data.restoration``). Cost: one grey image of side ``s``, forward only, median of repeats;
peak memory is CUDA's allocator peak on a GPU, and on the CPU the growth of the process's peak
resident set during the forward, measured in a fresh subprocess per (model, size).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pdevision.data.restoration import classical_baselines, psnr
from pdevision.engine.loop import LoopConfig, fit
from pdevision.models.restoration import count_params, create_restoration_model, match_params
from pdevision.tasks.restore import HeldOutImages, RestoreConfig, RestoreTask, load_restoration_model, restore_image

HERE = Path(__file__).resolve().parent
SETTINGS = {
    "sigma15": dict(task="denoise", sigma=15.0),
    "sigma25": dict(task="denoise", sigma=25.0),
    "sigma50": dict(task="denoise", sigma=50.0),
    "jpeg10": dict(task="dejpeg", quality=10),
    "jpeg40": dict(task="dejpeg", quality=40),
}
NETS = ("vheatir", "dncnn", "swinir")
CROP = (slice(64, 192), slice(64, 192))  # a 128 px crop of the first held-out photo as evaluated (camera)


def _net_args(patch: int) -> dict[str, dict]:
    """Model arguments at equal parameters: the baselines' widths matched to vHeatIR-Micro."""
    target = count_params(create_restoration_model("vheatir", "micro", 1, img_size=patch))
    args = {"vheatir": {"img_size": patch}}
    for arch in ("dncnn", "swinir"):
        cfg = match_params(arch, target, "micro", 1)
        cfg.pop("in_chans")
        args[arch] = {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}
    return args


def quality(args: argparse.Namespace, out: Path) -> dict:
    results: dict = {}
    net_args = _net_args(args.patch_size)
    for setting in args.settings:
        spec = SETTINGS[setting]
        results[setting] = {"nets": {}}
        crops: dict[str, np.ndarray] = {}
        for i, arch in enumerate(NETS):
            cfg = RestoreConfig(
                model=f"{arch}_micro",
                model_args=net_args[arch],
                patch_size=args.patch_size,
                patches_per_epoch=10**6,  # one epoch; the time budget ends it
                baselines=("noisy", "nlm", "bm3d") if i == 0 else (),
                eval_crop=args.eval_crop or None,
                **spec,
            )
            task = RestoreTask(cfg)
            with tempfile.TemporaryDirectory() as tmp:
                loop = LoopConfig(
                    output=tmp, epochs=1, batch_size=args.batch_size, lr=args.lr, weight_decay=0.0,
                    time_budget=args.train_seconds, device=args.device, progress=False, seed=0, rank_seed=True,
                )  # fmt: skip
                summary = fit(task, loop)
                model, _ = load_restoration_model(f"{tmp}/last", args.device)
            n_params = count_params(model)
            results[setting]["nets"][arch] = {
                "params": n_params,
                "steps": summary["steps"],
                "train_seconds": summary["seconds"],
                "psnr": summary["best_val_psnr"],
                "ssim": summary["best_val_ssim"],
            }
            if i == 0:
                results[setting]["baselines"] = {
                    k: {"psnr": summary["baselines"][k], "ssim": summary["baselines_ssim"][k]}
                    for k in summary["baselines"]
                }
                val: HeldOutImages = task.val_set
                degraded, clean = val.pair(0)
                crops["clean"], crops["input"] = clean, degraded
                for name, img in classical_baselines(clean, degraded, task.deg, which=("nlm", "bm3d")).items():
                    crops[name] = img
            crops[arch] = restore_image(model, task.val_set.pair(0)[0], device=args.device)
            print(setting, arch, results[setting]["nets"][arch], flush=True)
        _save_crops(crops, out / f"restoration_{setting}.png", setting)
    return results


def _save_crops(crops: dict[str, np.ndarray], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clean = crops["clean"]
    names = [n for n in ("clean", "input", "nlm", "bm3d", *NETS) if n in crops]
    fig, axes = plt.subplots(1, len(names), figsize=(2.2 * len(names), 2.6))
    for ax, name in zip(axes, names, strict=True):
        img = np.clip(crops[name][CROP], 0, 1)[..., 0]
        ax.imshow(img, cmap="gray", vmin=0, vmax=1)
        label = name if name == "clean" else f"{name}\n{psnr(clean[CROP], crops[name][CROP]):.2f} dB"
        ax.set_title(label, fontsize=8)
        ax.axis("off")
    fig.suptitle(f"{title}: held-out 'camera', a 128 px crop (PSNR of the crop)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_COST_CHILD = r"""
import json, os, statistics, sys, threading, time, torch
from pdevision.models.restoration import create_restoration_model
arch, size, device, repeats = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
args = json.loads(sys.argv[5])
model = create_restoration_model(arch, "micro", 1, **args).to(device).eval()
x = torch.rand(1, 1, size, size, device=device)
cuda = device.startswith("cuda")
sync = torch.cuda.synchronize if cuda else (lambda: None)
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
peak, done = [0], threading.Event()
def poll():  # the CPU has no allocator statistics: sample the resident set every millisecond
    while not done.is_set():
        peak[0] = max(peak[0], rss()); time.sleep(0.001)
with torch.no_grad():
    if cuda:
        torch.cuda.reset_peak_memory_stats(); start_mem = torch.cuda.memory_allocated()
    base = rss()
    thread = threading.Thread(target=poll, daemon=True); thread.start()
    model(x); sync()
    done.set(); thread.join()
    used = (torch.cuda.max_memory_allocated() - start_mem) if cuda else max(peak[0] - base, 0)
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); model(x); sync(); times.append(time.perf_counter() - t)
print(json.dumps({"seconds": statistics.median(times), "peak_mib": used / 2**20}))
"""


def cost(args: argparse.Namespace) -> dict:
    net_args = _net_args(args.patch_size)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    rows: dict = {}
    for size in args.sizes:
        for arch in ("vheatir", "swinir"):
            cmd = [sys.executable, "-c", _COST_CHILD, arch, str(size), args.device, str(args.repeats),
                   json.dumps(net_args[arch])]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                reason = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]
                rows.setdefault(arch, {})[size] = {"error": reason}
            else:
                rows.setdefault(arch, {})[size] = json.loads(proc.stdout.strip().splitlines()[-1])
            print("cost", arch, size, rows[arch][size], flush=True)
    return rows


def _markdown(args: argparse.Namespace, q: dict, c: dict, seconds: float, qargs: argparse.Namespace) -> str:
    """``qargs``: the arguments of the run that measured the quality (``args`` unless ``--skip-quality``)."""
    command = " ".join(["python benchmarks/restoration.py", *sys.argv[1:]])
    machine = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads"
    lines = [
        "# Image restoration: vHeatIR against DnCNN-/SwinIR-style nets and BM3D/NLM",
        "",
        f"Made by `{command}` in {seconds / 60:.0f} min on {args.device} ({machine}"
        + (", 2 cores shared with other jobs" if args.device == "cpu" else "")
        + f"), torch {torch.__version__}.",
        "",
        "## Quality at equal parameters and equal training time",
        "",
        (
            ""
            if qargs is args
            else f"Measured by an earlier run of this script (without --skip-quality) on {qargs.device}. "
        )
        + f"Each network trained from scratch for {qargs.train_seconds:.0f} s of training steps (grey "
        f"{qargs.patch_size} px patches, batch {qargs.batch_size}, AdamW lr {qargs.lr}, L1, cosine over the budget) "
        "on the embedded training photographs, evaluated once at the end on the 4 held-out photographs "
        + ("at full size" if not qargs.eval_crop else f"(their {qargs.eval_crop} px centre crops)")
        + " (grey; PSNR dB / SSIM). "
        + (getattr(qargs, "note", "") + " " if getattr(qargs, "note", "") else "")
        + "This is a CPU-small run: the networks are far from converged, so the numbers "
        "compare what each learns in a small fixed budget, not the architectures' final quality. Classical methods "
        "are given the true noise level.",
        "",
    ]
    nets = NETS
    header = "| setting | " + " | ".join(
        f"{n} ({q[next(iter(q))]['nets'][n]['params'] / 1e3:.0f}k, steps)" for n in nets
    )
    header += " | input | NLM | BM3D |"
    lines += [header, "|---|" + "---:|" * (len(nets) + 3)]
    for setting, r in q.items():
        cells = [f"{r['nets'][n]['psnr']:.2f} / {r['nets'][n]['ssim']:.3f} ({r['nets'][n]['steps']})" for n in nets]
        b = r["baselines"]
        inp = b.get("noisy", b.get("jpeg"))
        cells.append(f"{inp['psnr']:.2f} / {inp['ssim']:.3f}")
        for k in ("nlm", "bm3d"):
            cells.append(f"{b[k]['psnr']:.2f} / {b[k]['ssim']:.3f}" if k in b else "-")
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    lines += ["", "Crops: " + ", ".join(f"`restoration_{s}.png`" for s in q), ""]
    if c:
        lines += [
            "## Inference cost against image size",
            "",
            f"One grey image, forward only, median of {args.repeats} after one warm-up, on {args.device}; memory: "
            + (
                "CUDA allocator peak above the model."
                if args.device.startswith("cuda")
                else "growth of the resident set during the first forward, sampled every millisecond (a fresh "
                "process per model and size)."
            ),
            "",
            "| side (px) | vheatir s | vheatir peak MiB | swinir s | swinir peak MiB |",
            "|---:|---:|---:|---:|---:|",
        ]
        for size in args.sizes:
            cells = []
            for arch in ("vheatir", "swinir"):
                r = c[arch][size]
                cells += ["error", r["error"]] if "error" in r else [f"{r['seconds']:.3f}", f"{r['peak_mib']:.0f}"]
            lines.append(f"| {size} | " + " | ".join(cells) + " |")
        if max(args.sizes) < 2048:
            lines += ["", f"Sides above {max(args.sizes)} px were not run here; `--sizes 256 512 1024 2048` runs them."]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--train-seconds", type=float, default=60.0, help="training budget per network and setting")
    p.add_argument("--patch-size", type=int, default=32)
    p.add_argument("--eval-crop", type=int, default=256, help="centre crop of the held-out photos (0: full size)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--sizes", nargs="+", type=int, default=[256, 512, 1024, 2048])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-cost", action="store_true")
    p.add_argument("--skip-quality", action="store_true", help="reuse the quality results in restoration.json")
    p.add_argument("--out", default=str(HERE))
    args = p.parse_args()
    torch.manual_seed(0)
    out = Path(args.out)
    start = time.perf_counter()
    qargs = args
    if args.skip_quality:  # keep the recorded quality results, measure the cost again
        stored = json.loads((out / "restoration.json").read_text())
        q, qargs = stored["quality"], argparse.Namespace(**stored["args"])
        qargs.note = stored.get("note", "")
    else:
        q = quality(args, out)
        (out / "restoration.json").write_text(json.dumps({"quality": q, "args": vars(args)}, indent=1))
    c = {} if args.skip_cost else cost(args)
    seconds = time.perf_counter() - start
    record = {"quality": q, "cost": c, "args": vars(qargs), "cost_args": vars(args)}
    (out / "restoration.json").write_text(json.dumps(record, indent=1))
    (out / "restoration.md").write_text(_markdown(args, q, c, seconds, qargs))
    print((out / "restoration.md").read_text())


if __name__ == "__main__":
    main()
