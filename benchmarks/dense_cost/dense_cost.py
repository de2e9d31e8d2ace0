"""Cost of dense heads on each backbone: UPerNet at 512x512 and Mask R-CNN at 1280x800 (the papers' set-ups),
our tiny models against timm's peers, one interleaved run.

For each backbone and head: parameters, GMACs of one image (``torch.utils.flop_counter``, FLOPs / 2; the
vHeat FFT path added by formula), peak extra memory of one inference forward (CUDA: allocator peak; CPU:
peak resident set, measured in a fresh process per model), and images per second of eval-mode forwards
(batch 1, median of ``--repeats`` rounds taken in turn over all models). Writes ``dense_cost.json`` and
``dense_cost.md`` to ``--out``.

    python -m benchmarks.dense_cost.dense_cost --device cuda --out benchmarks/dense_gpu
    python -m benchmarks.dense_cost.dense_cost --device cpu --repeats 3 --out benchmarks/dense_cost

UPerNet: smp's UPerNet with 512 decoder channels (mmseg's ``channels=512``), 150 classes (ADE20K).
Mask R-CNN: torchvision's with the default heads, 80 classes, images of 800x1280 (its transform keeps
them: shorter side 800, longer 1280 <= 1333) padded to a multiple of 32; in eval mode the counts include
the RoI heads on the detector's 1000 proposals and up to 100 detections.
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

HERE = Path(__file__).resolve().parent

OURS = ["vheat_tiny", "hcnet_tiny", "pderesnet50"]
PEERS = ["convnext_tiny", "swin_tiny_patch4_window7_224", "resnet50"]
SETUPS = {"upernet": (512, 512), "mask_rcnn": (800, 1280)}


def build(name: str, head: str, device: torch.device) -> torch.nn.Module:
    import pdevision.models  # noqa: F401
    from pdevision.models.dense import create_detection_model, create_segmentation_model

    h = SETUPS[head][0]
    kwargs: dict[str, Any] = {"img_size": h} if head == "upernet" else {"img_size": 512}
    if name.startswith("swin"):
        kwargs["strict_img_size"] = False
    if head == "upernet":
        model = create_segmentation_model(name, 150, head="upernet", decoder_channels=512, **kwargs)
    else:
        model = create_detection_model(name, 80, head="mask_rcnn", min_size=800, max_size=1333, **kwargs)
    return model.to(device).eval()


def _inputs(head: str, device: torch.device) -> Any:
    h, w = SETUPS[head]
    x = torch.rand(1, 3, h, w, device=device)
    return x if head == "upernet" else [x[0]]


def probe(name: str, head: str, device: torch.device) -> dict[str, float]:
    """Parameters, MACs and peak memory of one forward (run in a fresh process)."""
    from pdevision.bench.measure import macs_and_peak_memory

    model = build(name, head, device)
    x = _inputs(head, device)
    macs, peak = macs_and_peak_memory(model, x, x, device)
    params = sum(p.numel() for p in model.parameters())
    return {"params_m": params / 1e6, "gmacs": macs / 1e9, "peak_mib": peak / 2**20}


def report(result: dict[str, Any]) -> str:
    """The Markdown table of a record (``dense_cost.json``)."""
    machine = result["machine"]
    repeats = next((r["repeats"] for r in result["rows"] if "repeats" in r), "?")
    lines = [
        f"Machine: {machine['device']} ({machine.get('name') or machine.get('cpu')}), {machine['threads']} threads, "
        f"torch {machine['torch']}, load average at the end {', '.join(f'{v:.1f}' for v in machine['load_average'])}; "
        f"batch 1, median of {repeats} interleaved rounds.",
        "",
        "| head | input (HxW) | backbone | params (M) | GMACs | peak memory (MiB) | img/s |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in result["rows"]:
        if "error" in r:
            lines.append(
                f"| {r['head']} | {r['input'][0]}x{r['input'][1]} | {r['model']} | failed: {r['error']} | | | |"
            )
            continue
        lines.append(
            f"| {r['head']} | {r['input'][0]}x{r['input'][1]} | {r['model']} | {r['params_m']:.1f} | {r['gmacs']:.1f} "
            f"| {r['peak_mib']:.0f} | {r.get('img_per_s', float('nan')):.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", default=OURS + PEERS)
    parser.add_argument("--heads", nargs="+", default=list(SETUPS), choices=list(SETUPS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=str(HERE), help="folder of dense_cost.json and dense_cost.md")
    parser.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    add_report_only(parser)
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        write_report(out / "dense_cost.md", report(read_record(out / "dense_cost.json")))
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.probe:
        name, head = json.loads(args.probe)
        print(json.dumps(probe(name, head, device)))
        return 0
    from pdevision.bench.measure import interleaved_medians

    rows: dict[tuple[str, str], dict[str, Any]] = {}
    start = time.perf_counter()
    for head in args.heads:
        for name in args.models:
            cmd = [sys.executable, "-m", __spec__.name, "--device", args.device, "--probe", json.dumps([name, head])]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
            done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=REPOSITORY)
            if done.returncode != 0:
                rows[(name, head)] = {"error": done.stderr.strip().splitlines()[-1][:200]}
                print(f"{name} {head}: failed: {rows[(name, head)]['error']}", file=sys.stderr)
                continue
            rows[(name, head)] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{name} {head}: {rows[(name, head)]}", file=sys.stderr)
        models = {n: build(n, head, device) for n in args.models if "error" not in rows[(n, head)]}
        x = _inputs(head, device)

        def forward(model: torch.nn.Module, x: Any = x) -> Any:
            def run() -> Any:
                with torch.inference_mode():
                    return model(x)

            return run

        timing = interleaved_medians({n: forward(m) for n, m in models.items()}, device, repeats=args.repeats)
        for n, t in timing.items():
            rows[(n, head)].update(img_per_s=1.0 / t["median"], seconds_median=t["median"], repeats=t["repeats"])
        del models
    machine = {
        "device": str(device),
        **machine_description(device),
        "load_average": os.getloadavg(),
    }
    result = {
        "command": command_line(__spec__.name, argv),
        "machine": machine,
        "seconds": time.perf_counter() - start,
        "rows": [],
    }
    for (name, head), r in rows.items():
        result["rows"].append({"model": name, "head": head, "input": list(SETUPS[head]), **r})
    out.mkdir(parents=True, exist_ok=True)
    write_record(out / "dense_cost.json", result, sort_keys=False, indent=2)
    text = report(result)
    write_report(out / "dense_cost.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
