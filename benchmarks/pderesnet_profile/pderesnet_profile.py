"""PDE-ResNet-50 against ResNet-50 on the same kernels: which operator families hold PDE-ResNet-50's share of the
machine's matrix-multiply rate below ResNet-50's, each with its self time, its multiply-adds and its measured rate.

Run: ``python -m benchmarks.pderesnet_profile.pderesnet_profile [--threads 1] [--batches 1 8] [--dtypes fp32 bf16]
[--profiles 7] [--repeats 15]``; ``--report-only`` writes the report from the record. Both models are built as
``pdevision bench`` builds them (``create_for_bench``: ``pderesnet50`` folded with its BatchNorms and
``accelerate``d; ``resnet50+fused`` with its BatchNorms folded into its convolutions and ``accelerate``d), eval mode,
224 px; ``pderesnet50 before`` is ``pderesnet50`` with its derivative filters put back to the plain class (the fast
path before :class:`~pdevision.fastpath.modules.FusedDerivativeConv`); bfloat16 is
``torch.autocast("cpu", dtype=torch.bfloat16)`` around the float32 model, as ``pdevision bench --dtype bf16``.

- **Rate**: the machine's matrix-multiply rate per dtype, measured in this process as ``pdevision bench`` measures it
  (``pdevision.bench.compare.matmul_rates``: the faster of ``torch.mm`` and oneDNN on 1024 x 1024 operands), at the
  start and at the end of the run; a share is over the faster of the two measurements.
- **MACs** per family: ``torch.utils.flop_counter`` (FLOPs / 2, the counter ``pdevision bench`` uses), one image,
  each module's count given to its family (the difference of the counter across the module's forward).
- **Profile**: torch.profiler over single forwards (``--profiles`` per arm, batch and dtype, interleaved, after a
  warm-up); a forward hook opens a profiler scope per module of a family (:func:`module_family`), and each operator's
  self time goes to the innermost family scope it runs in, except dtype casts and copies (outside a convolution),
  which have families of their own; operators outside any family module (the PDE step's product, residual sums) go
  by name. A family's time is its median over the profiled forwards.
- **Timing**: whole forwards, the arms and dtypes interleaved (``pdevision.bench.measure.interleaved_medians`` over
  ``inference_fn``, as the bench times them), ``--repeats`` each after one warm-up, medians.

A family's GFLOP/s is ``2 x MACs x batch`` over its profiled self time; "at the rate" is the time it would take at the
measured matrix-multiply rate (no time for a family without MACs); "share if at the rate" is the model's profiled
share of the rate if that family alone took only that time.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from benchmarks.hcnet_fastpath import hcnet_fastpath as hc  # the profiler's scopes, casts and autocast
from benchmarks.records import add_report_only, command_line, load_average, machine_line, rewrite_report, save_study
from timm.layers import SelectAdaptivePool2d
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import pdevision  # noqa: F401
from pdevision.bench.compare import matmul_rates
from pdevision.bench.measure import inference_fn, interleaved_medians, steady_allocator
from pdevision.bench.models import create_for_bench
from pdevision.fastpath.modules import FusedDerivativeConv
from pdevision.layers.hyperbolic import BoundedActivation, DerivativeConv

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")

ARMS = ("pderesnet50", "pderesnet50 before", "resnet50+fused")
MODEL, BEFORE, PEER = ARMS
DTYPES = {"fp32": None, "bf16": torch.bfloat16}  # autocast's dtype, as pdevision bench's --dtype
RES = 224
FAMILIES = (
    "1x1 convolutions",
    "derivative 3x3 (depthwise)",
    "dense 3x3 convolutions",
    "stem (7x7 conv, max pool)",
    "element-wise (product, residual sum)",
    "activations",
    "head (pool, linear)",
    "dtype casts",
    "copies and layout",
    "other operators",
)
F_1X1, F_DERIV, F_DENSE, F_STEM, F_ELEMENTWISE, F_ACT, F_HEAD, F_CAST, F_COPY, F_OTHER = FAMILIES
LEGEND = (
    "Families: **1x1 convolutions**: PDE-ResNet-50's `coef` (`C_a`), `mix` (`A`) and dense shortcut, ResNet-50's "
    "`conv1`, `conv3` and downsampling; **derivative 3x3 (depthwise)**: PDE-ResNet-50's `DerivativeConv` (`K_a`, one "
    "shared bank of 4 kernels, each input channel to 4 outputs); **dense 3x3 convolutions**: ResNet-50's `conv2`; "
    "**stem**: the 7x7 convolution and the max pool; **element-wise**: PDE-ResNet-50's product `(C_a u) * (K_a u)` "
    "and both models' residual sums; **activations**: ReLU, and softball at PDE-ResNet-50's four downsampling blocks; "
    "**head**: global pool and linear; **dtype casts**: autocast's and the kernels' float32 <-> bfloat16 casts; "
    "**copies and layout**: copies outside a convolution (PDE-ResNet-50's `repeat` of the shared bank into one kernel "
    "per channel on every forward). No BatchNorm is left in either folded model."
)
COPIES = ("aten::copy_", "aten::clone", "aten::contiguous", "aten::repeat")
ELEMENTWISE = ("aten::add", "aten::mul", "aten::add_", "aten::mul_")


def module_family(module: nn.Module) -> str | None:
    """The family of a module whose forward is one family's work; ``None`` for containers and the rest."""
    if isinstance(module, DerivativeConv):
        return F_DERIV
    if isinstance(module, nn.Conv2d):
        if module.kernel_size == (1, 1):
            return F_1X1
        if module.groups > 1 and module.groups == module.in_channels:
            return F_DERIV
        return F_DENSE if module.kernel_size == (3, 3) else F_STEM
    if isinstance(module, nn.MaxPool2d):
        return F_STEM
    if isinstance(module, nn.ReLU | BoundedActivation):
        return F_ACT
    if isinstance(module, nn.Linear | SelectAdaptivePool2d | nn.AdaptiveAvgPool2d | nn.Flatten):
        return F_HEAD
    return None


def op_family(event: Any) -> str | None:
    """The family of a profiled operator (see the module docstring); ``None`` for a scope's own time (Python)."""
    if event.name.startswith(hc.SCOPE_PREFIX):
        return None
    names = []
    node = event
    while node is not None:
        names.append(node.name)
        node = node.cpu_parent
    if any(n in hc.CASTS for n in names):
        return F_CAST
    if "aten::convolution" not in names and any(n in COPIES for n in names):
        return F_COPY
    scopes = [n[len(hc.SCOPE_PREFIX) :] for n in names if n.startswith(hc.SCOPE_PREFIX)]
    if scopes:
        return scopes[0]
    return F_ELEMENTWISE if event.name in ELEMENTWISE else F_OTHER


@torch.no_grad()
def family_macs(model: nn.Module) -> dict[str, float]:
    """Multiply-adds of one image's forward per family (``torch.utils.flop_counter``, FLOPs / 2), and ``"total"``,
    the counter's total (the sum of the families where every product runs in a family module)."""
    macs: dict[str, float] = defaultdict(float)
    counter = FlopCounterMode(display=False)
    handles = []
    for module in model.modules():
        fam = module_family(module)
        if fam is None:
            continue
        start: list[int] = []

        def enter(_m: nn.Module, _args: Any, start: list[int] = start) -> None:
            start.append(counter.get_total_flops())

        def leave(_m: nn.Module, _args: Any, _out: Any, start: list[int] = start, fam: str = fam) -> None:
            macs[fam] += (counter.get_total_flops() - start.pop()) / 2

        handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    try:
        with counter:
            model(torch.zeros(1, 3, RES, RES))
    finally:
        for handle in handles:
            handle.remove()
    return {**{f: macs.get(f, 0.0) for f in FAMILIES}, "total": counter.get_total_flops() / 2}


def build(arm: str) -> nn.Module:
    """The model of an arm: as ``pdevision bench`` builds it; ``pderesnet50 before``: its derivative filters put back
    to the plain class (``accelerate`` before :class:`~pdevision.fastpath.modules.FusedDerivativeConv`)."""
    model = create_for_bench(arm.removesuffix(" before"), RES, torch.device("cpu"))
    if arm == BEFORE:
        for module in model.modules():
            if type(module) is FusedDerivativeConv:
                module.__class__ = DerivativeConv
    return model


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of the report (see the module docstring), as the record's ``data``."""
    cpu = torch.device("cpu")
    data: dict[str, Any] = {
        "settings": {k: getattr(args, k) for k in ("threads", "batches", "dtypes", "profiles", "repeats")},
        "machine": f"{machine_line(args.threads)} ({hc.cpu_features()})",
        "steady_allocator": steady_allocator(),
        "load_start": load_average(),
        "rates_start": {d: matmul_rates(cpu, d) for d in args.dtypes},
    }
    models = {arm: build(arm) for arm in ARMS}
    data["macs"] = {arm: family_macs(model) for arm, model in models.items()}
    data["profiles"], data["timings"] = {}, {}
    for batch in args.batches:
        x = torch.randn(batch, 3, RES, RES)
        fns = {f"{arm} {d}": inference_fn(model, x, DTYPES[d]) for d in args.dtypes for arm, model in models.items()}
        data["timings"][f"b{batch}"] = interleaved_medians(fns, cpu, repeats=args.repeats)
        print(f"batch {batch}: timed", flush=True)
    for model in models.values():
        hc.add_scopes(model, module_family)
    for batch in args.batches:
        x = torch.randn(batch, 3, RES, RES)
        for dtype in args.dtypes:
            for model in models.values():
                with hc.running(dtype):
                    model(x)
        runs: dict[tuple[str, str], list[dict[str, float]]] = defaultdict(list)
        for _ in range(args.profiles):
            for dtype in args.dtypes:
                for arm, model in models.items():
                    runs[dtype, arm].append(hc.profile_once(model, x, dtype, op_family)["families"])
        data["profiles"][f"b{batch}"] = {
            dtype: {
                arm: {f: statistics.median(r.get(f, 0.0) for r in runs[dtype, arm]) for f in FAMILIES} for arm in ARMS
            }
            for dtype in args.dtypes
        }
        print(f"batch {batch}: profiled", flush=True)
    data["rates_end"] = {d: matmul_rates(cpu, d) for d in args.dtypes}
    data["load_end"] = load_average()
    return data


# -- the report, from the record's data alone --------------------------------------------------------------------------
def rate(data: dict[str, Any], dtype: str) -> float:
    """The reference of a share: the faster measured matrix-multiply rate of ``dtype`` (GFLOP/s), start or end."""
    return max(data["rates_start"][dtype]["limit"], data["rates_end"][dtype]["limit"])


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def whole_table(data: dict[str, Any]) -> list[str]:
    """Per batch, dtype and arm: the timed forward, its GFLOP/s and share of the matmul rate."""
    lines = [
        "| batch | dtype | model | median ms (min-max) | GMACs / image | GFLOP/s | share of the matmul rate "
        "| throughput x resnet50+fused (same kernels, same dtype) |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, timings in data["timings"].items():
        batch = int(key[1:])
        for dtype in data["settings"]["dtypes"]:
            for arm in ARMS:
                t = timings[f"{arm} {dtype}"]
                gflops = 2 * data["macs"][arm]["total"] * batch / t["median"] / 1e9
                ratio = timings[f"{PEER} {dtype}"]["median"] / t["median"] if arm != PEER else None
                lines.append(
                    f"| {batch} | {dtype} | {arm} | {1e3 * t['median']:.1f} ({1e3 * t['min']:.1f}-"
                    f"{1e3 * t['max']:.1f}) | {data['macs'][arm]['total'] / 1e9:.2f} | {gflops:.0f} | "
                    f"{_pct(gflops / rate(data, dtype))} | {f'{ratio:.2f}x' if ratio else ''} |"
                )
    return lines


def macs_table(data: dict[str, Any]) -> list[str]:
    arms = (MODEL, PEER)  # pderesnet50 before: pderesnet50's
    lines = ["| family | " + " | ".join(f"{a} GMACs / image" for a in arms) + " |", "|---|" + "---:|" * len(arms)]
    for fam in FAMILIES:
        if any(data["macs"][a][fam] for a in arms):
            lines.append(f"| {fam} | " + " | ".join(f"{data['macs'][a][fam] / 1e9:.3f}" for a in arms) + " |")
    lines.append("| **total (the counter's)** | " + " | ".join(f"{data['macs'][a]['total'] / 1e9:.3f}" for a in arms))
    lines[-1] += " |"
    return lines


def family_rows(data: dict[str, Any], batch: int, dtype: str, arm: str) -> dict[str, dict[str, float]]:
    """Per family of one profile: ms, its share of the forward's time, GFLOP/s (None without MACs), share of the matmul
    rate, ms above the rate, and the model's share of the rate if that family ran at it; ``"total"`` the model's."""
    ms = data["profiles"][f"b{batch}"][dtype][arm]
    peak = rate(data, dtype)
    total_ms = sum(ms.values())
    flops = {f: 2 * data["macs"][arm][f] * batch for f in FAMILIES}
    total_flops = sum(flops.values())
    out = {}
    for fam in FAMILIES:
        gflops = flops[fam] / ms[fam] / 1e6 if flops[fam] and ms[fam] else None
        above = ms[fam] - flops[fam] / peak / 1e6
        out[fam] = {
            "ms": ms[fam],
            "time": ms[fam] / total_ms,
            "gflops": gflops,
            "share": gflops / peak if gflops else None,
            "above": above,
            "share_if": total_flops / (total_ms - above) / 1e6 / peak,
        }
    gflops = total_flops / total_ms / 1e6
    out["total"] = {"ms": total_ms, "time": 1.0, "gflops": gflops, "share": gflops / peak, "above": None}
    return out


def profile_table(data: dict[str, Any], batch: int, dtype: str) -> list[str]:
    rows = {arm: family_rows(data, batch, dtype, arm) for arm in ARMS}
    lines = [
        "| family | pderesnet50 ms (of the forward) | pderesnet50 GFLOP/s (of the matmul rate) "
        "| pderesnet50 ms above the rate | pderesnet50 share if at the rate | pderesnet50 before ms (of the forward) "
        "| pderesnet50 before GFLOP/s (of the matmul rate) | resnet50+fused ms (of the forward) "
        "| resnet50+fused GFLOP/s (of the matmul rate) | resnet50+fused ms above the rate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cells(r: dict[str, Any], arm: str, share_if: bool) -> list[str]:
        out = [
            f"{r['ms']:.1f} ({_pct(r['time'])})",
            f"{r['gflops']:.0f} ({_pct(r['share'])})" if r["gflops"] else "-",
            f"{r['above']:.1f}" if r["above"] is not None else "",
        ]
        if share_if:
            out.append(_pct(r["share_if"]) if "share_if" in r else "")
        return out

    for fam in [*FAMILIES, "total"]:
        before = cells(rows[BEFORE][fam], BEFORE, False)[:2]
        row = [*cells(rows[MODEL][fam], MODEL, True), *before, *cells(rows[PEER][fam], PEER, False)]
        lines.append(f"| {'**total**' if fam == 'total' else fam} | " + " | ".join(row) + " |")
    return lines


def bound_line(data: dict[str, Any], batch: int, dtype: str) -> str:
    """The two families with the most PDE-ResNet-50 time above the matmul rate, in words."""
    rows = family_rows(data, batch, dtype, MODEL)
    total = rows.pop("total")
    top = sorted(rows, key=lambda f: rows[f]["above"], reverse=True)[:2]
    parts = [
        f"{f} ({rows[f]['above']:.1f} ms of {rows[f]['ms']:.1f}; the model's share {_pct(rows[f]['share_if'])} "
        "if it ran at the rate)"
        for f in top
    ]
    return (
        f"PDE-ResNet-50's profiled share {_pct(total['share'])}; most time above the matmul rate: "
        + " and ".join(parts)
        + "."
    )


def rates_line(data: dict[str, Any]) -> str:
    parts = []
    for dtype in data["settings"]["dtypes"]:
        s, e = data["rates_start"][dtype], data["rates_end"][dtype]
        each = ", ".join(f"{k} {s[k]:.0f} / {e[k]:.0f}" for k in s if k != "limit")
        parts.append(f"{dtype}: {each} (start / end; reference {rate(data, dtype):.0f})")
    return "Measured matrix-multiply GFLOP/s, one thread, 1024 x 1024: " + "; ".join(parts) + "."


def render(data: dict[str, Any]) -> str:
    """The report, from the record's ``data`` alone."""
    s = data["settings"]
    lines = [
        "# PDE-ResNet-50 against ResNet-50 on the same kernels: where the share of the matmul rate goes",
        "",
        f"{data['machine']}; {s['threads']} thread(s); {RES} px; dtypes {', '.join(s['dtypes'])} (bf16: "
        "`torch.autocast('cpu', dtype=torch.bfloat16)` around the float32 model, as `pdevision bench --dtype bf16`); "
        "both models built as `pdevision bench` builds them (folded, `accelerate`d: `pderesnet50` and "
        "`resnet50+fused`, the same oneDNN kernels), and `pderesnet50 before`: `pderesnet50` with its derivative "
        "filters put back to the plain class (the fast path before `FusedDerivativeConv`, which filters each channel "
        f"as an image of its own by the shared bank); allocator steady: {data['steady_allocator']}. **A shared "
        "machine**: another engineer's one-thread training jobs ran on its other core, so the arms and dtypes are "
        f"interleaved and every figure is a median; 1, 5 and 15-minute load averages {data['load_start']} at the "
        f"start and {data['load_end']} at the end. {rates_line(data)} A share is a GFLOP/s over the reference rate of "
        "its dtype.",
        "",
        "## Whole forwards",
        "",
        f"{s['repeats']} timed forwards per model, batch and dtype after one warm-up, interleaved (median, min-max); "
        "GFLOP/s = 2 x the counter's MACs x batch over the median time.",
        "",
        *whole_table(data),
        "",
        "## Multiply-adds by family",
        "",
        "`torch.utils.flop_counter` over one image's forward (FLOPs / 2, the counter of `pdevision bench`), each "
        "module's count given to its family; families without multiply-adds are left out.",
        "",
        *macs_table(data),
        "",
        LEGEND,
        "",
    ]
    for batch in s["batches"]:
        for dtype in s["dtypes"]:
            lines += [
                f"## Profile: batch {batch}, {dtype}",
                "",
                f"Self CPU milliseconds of one forward's operators by family (median of {s['profiles']} profiled "
                "forwards per model, interleaved; Python between operators not counted), the family's GFLOP/s and "
                "its share of the matmul rate, the milliseconds it takes above its time at the rate, and "
                "PDE-ResNet-50's share of the rate if that family alone ran at it.",
                "",
                *profile_table(data, batch, dtype),
                "",
                bound_line(data, batch, dtype),
                "",
            ]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--profiles", type=int, default=7, help="profiled forwards per model, batch and dtype")
    parser.add_argument("--repeats", type=int, default=15, help="timed forwards per model, batch and dtype")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if not args.report_only:  # measure, keep the record; the report is written from it either way
        torch.set_num_threads(args.threads)
        data = measure(args)
        save_study(RECORD, OUT, render(data), command_line(__spec__.name, argv), data=data)
    rewrite_report(RECORD, OUT)


if __name__ == "__main__":
    main()
