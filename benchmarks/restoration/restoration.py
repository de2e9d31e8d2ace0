"""vHeatIR against DnCNN- and SwinIR-style nets at equal parameters and equal training time, against the
classical denoisers (NLM, BM3D) and the degraded input; and (``--cost``) inference time and memory against
image size (the heat operator against window attention).

Quality (the default): grey, the embedded training photographs, each network trained from scratch through
the one fit loop for a fixed number of steps, then evaluated once on the held-out photographs at full size
(PSNR/SSIM of :mod:`pdevision.data.restoration`). Equal training time on a shared, loaded CPU: one
interleaved timing of a training step of every net (one torch thread, the same batch, rounds of a few
steps per net in turn; the median over rounds of the process CPU time per step) converts a budget of
single-thread CPU seconds into a step budget per net. With one thread, CPU time is what the step would
take on a quiet core; wall time on a crowded machine is not comparable between runs. Every run's result
goes into the JSON at once, and a rerun skips the runs it holds (and reuses its timing), so killing the
script loses at most the run in progress.

Run: ``python -m benchmarks.restoration.restoration`` (writes ``restoration.json``, ``restoration.md``,
``restoration_<setting>.png`` beside it); ``python -m benchmarks.restoration.restoration --cost --sizes 256 512 1024``
prints the inference cost table (recorded in ``restoration_cost_quiet.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from benchmarks.records import machine_line, write_record, write_report

from pdevision.data.restoration import classical_baselines, embedded_images, psnr, ssim
from pdevision.engine import RunConfig, fit
from pdevision.models.restoration import count_trainable_params, create_restoration_model, match_params
from pdevision.tasks.restore import HeldOutImages, RestoreConfig, RestoreTask, load_restoration_model, restore_image

HERE = Path(__file__).resolve().parent
SETTINGS: dict[str, dict[str, Any]] = {
    "sigma15": dict(task="denoise", sigma=15.0),
    "sigma25": dict(task="denoise", sigma=25.0),
    "sigma50": dict(task="denoise", sigma=50.0),
    "jpeg10": dict(task="dejpeg", quality=10),
    "jpeg40": dict(task="dejpeg", quality=40),
}
NETS = ("vheatir", "dncnn", "swinir")
BASELINES = ("noisy", "nlm", "wavelet", "tv", "bm3d")
CROP = (slice(64, 192), slice(64, 192))  # a 128 px crop of the first held-out photo (camera)
HAND_WRITTEN = "## What this shows"  # a section of restoration.md that the script keeps when it rewrites the file
SWIN_HEADS = 2  # width steps of 2: the SwinIR-style net lands within 0.1% of vHeatIR-Micro's parameters


def net_args(patch: int, swin_heads: int = SWIN_HEADS) -> dict[str, dict[str, Any]]:
    """Model arguments at equal parameters: DnCNN's and SwinIR's widths matched to vHeatIR-Micro with FVEs
    for ``patch`` px patches."""
    target = count_trainable_params(create_restoration_model("vheatir_micro", 1, model_args={"img_size": patch}))
    args: dict[str, dict[str, Any]] = {"vheatir": {"img_size": patch}}
    for arch, extra in (("dncnn", {}), ("swinir", {"num_heads": swin_heads})):
        cfg = match_params(f"{arch}_micro", target, 1, **extra)
        cfg.pop("in_chans")
        args[arch] = {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}
    return args


def _save_json(path: Path, record: dict) -> None:
    write_record(path, record, sort_keys=False)


# -- equal time: one interleaved timing of a training step --------------------------------------------------


def time_steps(args: argparse.Namespace, nargs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per-step CPU and wall seconds of each net (AdamW step on one batch of ``batch_size`` sigma-25 patches),
    interleaved: ``rounds`` rounds, each timing ``steps_per_round`` steps of every net in turn; medians."""
    from timm.optim import create_optimizer_v2

    from pdevision.data.restoration import Degradation, PatchDataset

    torch.manual_seed(0)
    data = PatchDataset(embedded_images("L"), Degradation("noise", sigma=25.0), args.patch_size, args.batch_size)
    pairs = [data[i] for i in range(args.batch_size)]
    deg = torch.stack([p[0] for p in pairs])
    clean = torch.stack([p[1] for p in pairs])
    nets, opts = {}, {}
    for arch in NETS:
        nets[arch] = create_restoration_model(f"{arch}_micro", 1, model_args=nargs[arch]).train()
        opts[arch] = create_optimizer_v2(nets[arch], opt="adamw", lr=args.lr, weight_decay=0.0)

    def step(arch: str) -> None:
        loss = torch.nn.functional.l1_loss(nets[arch](deg), clean)
        opts[arch].zero_grad(set_to_none=True)
        loss.backward()
        opts[arch].step()

    for arch in NETS:  # warm-up
        for _ in range(2):
            step(arch)
    cpu: dict[str, list[float]] = {a: [] for a in NETS}
    wall: dict[str, list[float]] = {a: [] for a in NETS}
    for _ in range(args.timing_rounds):
        for arch in NETS:
            c0, w0 = time.process_time(), time.perf_counter()
            for _ in range(args.timing_steps):
                step(arch)
            cpu[arch].append((time.process_time() - c0) / args.timing_steps)
            wall[arch].append((time.perf_counter() - w0) / args.timing_steps)
    return {
        "rounds": args.timing_rounds,
        "steps_per_round": args.timing_steps,
        "batch_size": args.batch_size,
        "patch_size": args.patch_size,
        "cpu_s_per_step": {a: statistics.median(v) for a, v in cpu.items()},
        "wall_s_per_step": {a: statistics.median(v) for a, v in wall.items()},
        "cpu_s_per_step_rounds": cpu,
        "load_average": os.getloadavg(),
    }


# -- quality -------------------------------------------------------------------------------------------


def _baselines(setting: str, work: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Classical methods once per setting (deterministic: the held-out degradations are seeded)."""
    cfg = RestoreConfig(**SETTINGS[setting])
    val = HeldOutImages(embedded_images("L"), cfg.degradation(), args.eval_crop or None)
    which = ("jpeg",) if cfg.task == "dejpeg" else BASELINES
    scores: dict[str, list[tuple[float, float]]] = {}
    for i in range(len(val)):
        degraded, clean = val.pair(i)
        outs = classical_baselines(clean, degraded, cfg.degradation(), which=which)
        for name, out in outs.items():
            scores.setdefault(name, []).append((psnr(clean, out), ssim(clean, out)))
        if i == 0:
            np.save(work / f"{setting}_clean.npy", clean[CROP])
            for name, out in outs.items():
                np.save(work / f"{setting}_{'input' if name in ('noisy', 'jpeg') else name}.npy", out[CROP])
    return {
        k: {"psnr": float(np.mean([p for p, _ in v])), "ssim": float(np.mean([s for _, s in v]))}
        for k, v in scores.items()
    }


def _train_one(
    setting: str, arch: str, seed: int, steps: int, nargs: dict[str, Any], work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    cfg = RestoreConfig(
        model=f"{arch}_micro",
        model_args=nargs,
        patch_size=args.patch_size,
        patches_per_epoch=steps * args.batch_size,
        baselines=("noisy",),  # the classical ones run once per setting
        eval_crop=args.eval_crop or None,
        **SETTINGS[setting],
    )
    task = RestoreTask(cfg)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        loop = RunConfig(
            output=tmp, epochs=1, batch_size=args.batch_size, lr=args.lr, weight_decay=0.0, min_lr=1e-5,
            max_train_batches=steps, device="cpu", progress=False, seed=seed, rank_seed=True,
        )  # fmt: skip
        c0, w0 = time.process_time(), time.perf_counter()
        summary = fit(task, loop)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        model, _ = load_restoration_model(f"{tmp}/last")
    if seed == args.seeds[0]:
        out = restore_image(model, task.val_set.pair(0)[0])
        np.save(work / f"{setting}_{arch}.npy", out[CROP])
    return {
        "params": count_trainable_params(model),
        "steps": summary["steps"],
        "train_wall_s": summary["seconds"],
        "run_cpu_s": cpu,
        "run_wall_s": wall,
        "load_average_at_start": load,
        "psnr": summary["best_val_psnr"],
        "ssim": summary["best_val_ssim"],
    }


def quality(args: argparse.Namespace) -> dict:
    path = Path(args.json)
    record = json.loads(path.read_text()) if path.exists() and not args.fresh else {}
    if record.get("kind") != "quality-v2":
        record = {"kind": "quality-v2"}
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    nargs = net_args(args.patch_size)
    record["net_args"] = nargs
    vheatir = create_restoration_model("vheatir_micro", 1, model_args=nargs["vheatir"])
    record["fve_params"] = sum(p.numel() for n, p in vheatir.named_parameters() if "freq_embed" in n)
    record["args"] = {k: v for k, v in vars(args).items() if k not in ("fresh", "json", "out")}  # no machine paths
    record["machine"] = f"{machine_line(1)} (one torch thread)"
    if "timing" not in record:
        print("timing a training step of each net, interleaved ...", flush=True)
        record["timing"] = time_steps(args, nargs)
        _save_json(path, record)
    timing = record["timing"]
    steps = {a: max(1, round(args.budget_seconds / timing["cpu_s_per_step"][a])) for a in NETS}
    record["budget_seconds"] = args.budget_seconds
    record["steps"] = steps
    print("per-step CPU s:", timing["cpu_s_per_step"], "steps:", steps, flush=True)
    results = record.setdefault("results", {})
    for seed in args.seeds:  # seed-major: a run cut short still covers every setting
        for setting in args.settings:
            r = results.setdefault(setting, {"runs": {}})
            if "baselines" not in r:
                t = time.perf_counter()
                r["baselines"] = _baselines(setting, work, args)
                print(setting, "baselines", r["baselines"], f"{time.perf_counter() - t:.0f} s", flush=True)
                _save_json(path, record)
            for arch in NETS:
                runs = r["runs"].setdefault(arch, {})
                if str(seed) in runs and runs[str(seed)]["steps"] == steps[arch]:
                    continue
                runs[str(seed)] = _train_one(setting, arch, seed, steps[arch], nargs[arch], work, args)
                print(setting, arch, seed, runs[str(seed)], flush=True)
                _save_json(path, record)
    return record


def _save_crops(setting: str, work: Path, out: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ("clean", "input", "nlm", "bm3d", *NETS) if (work / f"{setting}_{n}.npy").exists()]
    if "clean" not in names or len(names) < 2:
        return False
    crops = {n: np.load(work / f"{setting}_{n}.npy") for n in names}
    clean = crops["clean"]
    fig, axes = plt.subplots(1, len(names), figsize=(2.2 * len(names), 2.6))
    for ax, name in zip(axes, names, strict=True):
        ax.imshow(np.clip(crops[name], 0, 1)[..., 0], cmap="gray", vmin=0, vmax=1)
        label = name if name == "clean" else f"{name}\n{psnr(clean, crops[name]):.2f} dB"
        ax.set_title(label, fontsize=8)
        ax.axis("off")
    fig.suptitle(f"{setting}: held-out 'camera', a 128 px crop (PSNR of the crop; nets: seed 0)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / f"restoration_{setting}.png", dpi=110)
    plt.close(fig)
    return True


def _stats(runs: dict[str, dict], key: str) -> tuple[float, float, int]:
    values = [r[key] for r in runs.values()]
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, len(values)


def _winner(r: dict) -> str:
    """The net with the best mean PSNR, and whether its lead over the second exceeds both their std's."""
    means = {a: _stats(r["runs"][a], "psnr") for a in NETS if r["runs"].get(a)}
    if not means:
        return "-"
    order = sorted(means, key=lambda a: -means[a][0])
    if len(order) == 1:
        return order[0]
    (m1, s1, _), (m2, s2, _) = means[order[0]], means[order[1]]
    lead = m1 - m2
    clear = lead > max(s1, s2) * 2
    return f"{order[0]} (+{lead:.2f} dB over {order[1]}{'' if clear else ', within 2 std'})"


def markdown(record: dict, seconds: float | None) -> str:
    a = record["args"]
    t = record["timing"]
    steps = record["steps"]
    results = record["results"]
    params = {n: next(iter(next(iter(results.values()))["runs"][n].values()))["params"] for n in NETS}
    lines = [
        "# Image restoration: vHeatIR against DnCNN-/SwinIR-style nets and BM3D/NLM",
        "",
        f"Made by `python -m benchmarks.restoration.restoration --budget-seconds {a['budget_seconds']:g}` on the "
        f"shared 2-core development CPU ({record.get('machine', 'machine not recorded')}, one process; other "
        "engineers' jobs running)"
        + (f"; the script ran {seconds / 60:.0f} min of wall time in its last invocation." if seconds else ".")
        + " Numbers: `restoration.json`.",
        "",
        "## Set-up",
        "",
        f"- **Nets at equal parameters**: vHeatIR-Micro ({params['vheatir'] / 1e3:.1f}k, of which "
        f"{record['fve_params'] / 1e3:.1f}k are the two groups' FVEs for {a['patch_size']} px patches), "
        f"DnCNN-style ({params['dncnn'] / 1e3:.1f}k, {record['net_args']['dncnn']['depth']} layers of "
        f"{record['net_args']['dncnn']['width']}), SwinIR-style ({params['swinir'] / 1e3:.1f}k, width "
        f"{record['net_args']['swinir']['embed_dim']}, {record['net_args']['swinir']['num_heads']} heads, window 8, "
        f"2 groups of 2 Swin blocks): "
        + ", ".join(f"{n} {100 * (params[n] / params['vheatir'] - 1):+.1f}%" for n in ("dncnn", "swinir"))
        + " against vHeatIR.",
        f"- **Equal training time**: a budget of {a['budget_seconds']:g} s of single-thread CPU time of training steps "
        f"per run, turned into steps by one interleaved timing ({t['rounds']} rounds x {t['steps_per_round']} steps "
        f"of each net in turn, batch {t['batch_size']} of {t['patch_size']} px, AdamW; the median over rounds of the "
        "process CPU time per step; with one thread that is the step's time on a quiet core):",
        "",
        "| net | CPU s / step (median) | wall s / step (median, load " + f"{t['load_average'][0]:.1f}) | steps |",
        "|---|---:|---:|---:|",
        *(f"| {n} | {t['cpu_s_per_step'][n]:.4f} | {t['wall_s_per_step'][n]:.4f} | {steps[n]} |" for n in NETS),
        "",
        f"- **Training**: from scratch, grey, random {a['patch_size']} px patches of the 9 embedded training "
        f"photographs (flips/rotations, degraded on the fly), batch {a['batch_size']}, AdamW lr {a['lr']:g} "
        "(no weight decay), cosine to 1e-5 over the step budget, L1 loss; the same recipe for every net (not tuned "
        f"per net). Seeds {', '.join(str(s) for s in a['seeds'])} (initialisation and patches); data loading "
        "(patch sampling in the training process) is outside the timed step and the same for every net.",
        "- **Evaluation**: once, after the last step, on the 4 held-out photographs (camera 512x512, coins 303x384, "
        "chelsea 300x451, flower 427x640) "
        + ("**at full size**" if not a.get("eval_crop") else f"**their {a['eval_crop']} px centre crops**")
        + ", grey, PSNR/SSIM on 8-bit images (skimage.metrics, no border cropped), mean over the 4 photos. Each "
        "photo has one fixed degradation (seed 1000 + index), the same for every net and seed.",
        "- **Classical methods** ran once per setting: they are deterministic given the seeded degradation. NLM "
        "(scikit-image, h = 0.8 sigma), wavelet, TV and BM3D are given the true sigma. For JPEG the baseline is the "
        "decoded input.",
        "",
        "## PSNR (dB), mean ± std over seeds",
        "",
        "| setting | vHeatIR | DnCNN-style | SwinIR-style | input | NLM | BM3D | best net |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]

    def cell(runs: dict, key: str, fmt: str) -> str:
        if not runs:
            return "-"
        m, s, n = _stats(runs, key)
        return f"{m:{fmt}} ± {s:{fmt}}" + (f" (n={n})" if n != len(a["seeds"]) else "")

    for key, fmt, title in (("psnr", ".2f", None), ("ssim", ".4f", "## SSIM, mean ± std over seeds")):
        if title:
            lines += [
                "",
                title,
                "",
                "| setting | vHeatIR | DnCNN-style | SwinIR-style | input | NLM | BM3D |",
                "|---|---:|---:|---:|---:|---:|---:|",
            ]
        for setting, r in results.items():
            b = r.get("baselines", {})
            inp = b.get("noisy", b.get("jpeg"))
            cells = [cell(r["runs"].get(n, {}), key, fmt) for n in NETS]
            cells.append(f"{inp[key]:{fmt}}" if inp else "-")
            cells += [f"{b[k][key]:{fmt}}" if k in b else "-" for k in ("nlm", "bm3d")]
            if key == "psnr":
                cells.append(_winner(r))
            lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Per seed (PSNR dB):",
        "",
        "| setting | net | " + " | ".join(f"seed {s}" for s in a["seeds"]) + " |",
        "|---|---|" + "---:|" * len(a["seeds"]),
    ]
    for setting, r in results.items():
        for n in NETS:
            runs = r["runs"].get(n, {})
            lines.append(
                f"| {setting} | {n} | "
                + " | ".join(f"{runs[str(s)]['psnr']:.2f}" if str(s) in runs else "-" for s in a["seeds"])
                + " |"
            )
    wall = [run["run_wall_s"] for r in results.values() for runs in r["runs"].values() for run in runs.values()]
    cpu = [run["run_cpu_s"] for r in results.values() for runs in r["runs"].values() for run in runs.values()]
    lines += [
        "",
        f"{len(cpu)} runs: {sum(cpu) / 60:.1f} CPU-minutes in all (training and evaluation), "
        f"{sum(wall) / 60:.1f} minutes of wall time.",
        "",
        "Before/after crops (held-out 'camera', 128 px from the middle of what was evaluated, nets of seed 0): "
        + ", ".join(f"`restoration_{s}.png`" for s in results),
        "",
        "Inference time and memory against image size (256 to 2048 px): "
        "[restoration_cost_quiet.md](restoration_cost_quiet.md).",
        "",
    ]
    return "\n".join(lines)


# -- inference cost ----------------------------------------------------------------------------------------

_COST_CHILD = r"""
import json, os, statistics, sys, threading, time, torch
from pdevision.models.restoration import create_restoration_model
arch, size, device, repeats = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
args = json.loads(sys.argv[5])
model = create_restoration_model(f"{arch}_micro", 1, model_args=args).to(device).eval()
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


def cost(args: argparse.Namespace) -> str:
    """Forward time and peak memory of vHeatIR and the SwinIR-style net (a fresh process each) as markdown."""
    nargs = net_args(args.patch_size, args.swin_heads)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")])}
    rows: dict = {}
    for size in args.sizes:
        for arch in ("vheatir", "swinir"):
            cmd = [sys.executable, "-c", _COST_CHILD, arch, str(size), args.device, str(args.repeats),
                   json.dumps(nargs[arch])]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0:
                reason = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:200]
                rows.setdefault(arch, {})[size] = {"error": reason}
            else:
                rows.setdefault(arch, {})[size] = json.loads(proc.stdout.strip().splitlines()[-1])
            print("cost", arch, size, rows[arch][size], flush=True)
    lines = [
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
            r = rows[arch][size]
            cells += ["error", r["error"]] if "error" in r else [f"{r['seconds']:.3f}", f"{r['peak_mib']:.0f}"]
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--budget-seconds", type=float, default=40.0, help="single-thread CPU s of training steps per run")
    p.add_argument("--timing-rounds", type=int, default=7)
    p.add_argument("--timing-steps", type=int, default=4, help="steps of each net per timing round")
    p.add_argument("--patch-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--eval-crop", type=int, default=256, help="centre crop of the held-out photos (0: full size)")
    p.add_argument("--json", default=str(HERE / "restoration.json"))
    p.add_argument("--out", default=str(HERE), help="folder of restoration.md and the crop PNGs")
    p.add_argument("--work", default="runs/restoration_bench", help="scratch folder (crops, run folders)")
    p.add_argument("--fresh", action="store_true", help="ignore the results already in --json")
    p.add_argument("--report-only", action="store_true", help="write the markdown and PNGs from --json")
    p.add_argument("--cost", action="store_true", help="measure inference cost instead (prints a table)")
    p.add_argument("--device", default="cpu", help="--cost only")
    p.add_argument("--sizes", nargs="+", type=int, default=[256, 512, 1024, 2048], help="--cost only")
    p.add_argument("--repeats", type=int, default=3, help="--cost only")
    p.add_argument("--swin-heads", type=int, default=SWIN_HEADS, help="--cost only")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.cost:
        print(cost(args))
        return
    start = time.perf_counter()
    record = json.loads(Path(args.json).read_text()) if args.report_only else quality(args)
    out = Path(args.out)
    for setting in record["results"]:
        _save_crops(setting, Path(args.work), out)
    text = markdown(record, None if args.report_only else time.perf_counter() - start)
    md = out / "restoration.md"
    old = md.read_text() if md.exists() else ""
    if HAND_WRITTEN in old:  # the section written by hand after a run is kept
        text += "\n" + old[old.index(HAND_WRITTEN) :]
    write_report(md, text)
    print(text)


if __name__ == "__main__":
    main()
