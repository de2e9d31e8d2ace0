"""torch.compile at new input sizes: compile time at a first size and the time of the first call at a second and
a third size, with static shapes (``dynamic=False``: a full recompile per size) and with dynamic shapes
(``dynamic=True``: one graph with symbolic height and width), per model, in eval mode without autograd (batch 1).

Each configuration runs in its own process (a fresh dynamo and inductor cache directory) under a time limit; one that
runs past it is recorded as such. Writes one JSON line per configuration to stdout and, with ``--markdown PATH``, a
table.

    nice python benchmarks/compile_dynamic.py --markdown benchmarks/compile_dynamic.md
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

import torch

MODELS = {  # model: (first, second, third) input size (height, width)
    "vheat_micro": ((64, 64), (96, 96), (80, 112)),
    "hcnet_micro": ((64, 64), (96, 96), (80, 112)),
    "pderesnet_micro": ((64, 64), (96, 96), (80, 112)),
    "vheat_tiny": ((224, 224), (256, 256), (192, 160)),
}


def run_one(name: str, dynamic: bool) -> dict[str, object]:
    """Compile ``name`` and call it at its three sizes; seconds per first call, recompiles, error against eager."""
    import timm
    from torch._dynamo.utils import counters

    import pdevision  # noqa: F401

    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10).eval()
    compiled = torch.compile(model, dynamic=dynamic)
    row: dict[str, object] = {"model": name, "dynamic": dynamic, "sizes": [list(s) for s in MODELS[name]]}
    times, errors = [], []
    with torch.no_grad():
        for size in MODELS[name]:
            x = torch.randn(1, 3, *size)
            start = time.perf_counter()
            out = compiled(x)
            times.append(round(time.perf_counter() - start, 1))
            errors.append(float((out - model(x)).abs().max()))
    row.update(first_call_s=times, max_abs_err=errors, graphs=int(counters["stats"]["unique_graphs"]))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    parser.add_argument("--markdown", default=None)
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "DYNAMIC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        torch.set_num_threads(int(os.environ.get("THREADS", "2")))
        print(json.dumps(run_one(args.one[0], args.one[1] == "1")))
        return
    rows = []
    for name in args.models:
        for dynamic in (False, True):
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))
            cmd = [sys.executable, __file__, "--one", name, "1" if dynamic else "0"]
            start = time.perf_counter()
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
                lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
                if done.returncode != 0 or not lines:
                    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    row = {"model": name, "dynamic": dynamic, "error": tail[:200]}
                else:
                    row = json.loads(lines[-1])
            except subprocess.TimeoutExpired:
                row = {"model": name, "dynamic": dynamic, "timeout_s": args.timeout}
            row["process_s"] = round(time.perf_counter() - start, 1)
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.markdown:
        write_markdown(rows, args.markdown)


def write_markdown(rows: list[dict[str, object]], path: str) -> None:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    lines = [
        "# torch.compile at new input sizes",
        "",
        "Made by `benchmarks/compile_dynamic.py` (eval mode, no autograd, batch 1, inductor, a fresh cache per",
        "configuration). Seconds of the first call at each size: the compile, then what a new size costs.",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__};",
        f"load at the end of the run (`uptime`): `{uptime}`.",
        "",
        "| model | dynamic | sizes | 1st size s | 2nd size s | 3rd size s | graphs | max abs err vs eager |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "first_call_s" in r:
            t = r["first_call_s"]
            err = max(r["max_abs_err"])  # type: ignore[arg-type]
            sizes = ", ".join("x".join(map(str, s)) for s in r["sizes"])  # type: ignore[union-attr]
            lines.append(
                f"| {r['model']} | {r['dynamic']} | {sizes} | {t[0]} | {t[1]} | {t[2]} | {r['graphs']} | {err:.1e} |"
            )  # type: ignore[index]
        elif "timeout_s" in r:
            lines.append(f"| {r['model']} | {r['dynamic']} | | over {r['timeout_s']:.0f} s (stopped) | | | | |")
        else:
            lines.append(f"| {r['model']} | {r['dynamic']} | | failed: {r['error']} | | | | |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
