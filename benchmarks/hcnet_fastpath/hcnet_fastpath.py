"""HcNet-T on the fast path: where its inference time goes, operator family by family, against ConvNeXt-T on the same
kernels, and what the fast path's HcNet kernels (``pdevision.fastpath``'s ``FusedHcRaBlock``) change.

Run: ``python -m benchmarks.hcnet_fastpath.hcnet_fastpath [--threads 2] [--profiles 5] [--repeats 15]``;
``--report-only`` writes the report from the record. Float32, eval mode, the models as ``pdevision bench`` builds
them (``create_for_bench``: folded, then ``accelerate``d). Four arms:

- ``hcnet_tiny plain``: the authors' network as written (NCHW), no fast path;
- ``hcnet_tiny before``: ``accelerate`` as it was before the HcNet kernels (only the head's linear layer and, in
  bfloat16, cached convolution weights differ from the plain model; in float32 the blocks run their plain forward):
  the accelerated model with its blocks and stem put back to the plain classes and NCHW memory;
- ``hcnet_tiny accelerated``: ``accelerate`` now;
- ``convnext_tiny+fused``: ConvNeXt-T on the same kernels.

Profile: torch.profiler over single forwards (``--profiles`` of them per arm, after a warm-up); each operator's self
time goes to a family by its name, its shapes and the HcNet module it runs in (forward hooks open a profiler scope per
module; the Python time between operators is not counted, for any model); a family's time is its median over the
profiled forwards, its share that median over the sum of the families' medians. Timing: the arms interleaved in one
process, ``--repeats`` forwards each (after one warm-up), medians, with the interquartile range.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import timm
import torch
import torch.nn.functional as F
from benchmarks.records import (
    add_report_only,
    command_line,
    load_average,
    machine_line,
    rewrite_report,
    save_study,
)
from torch import nn
from torch.autograd.profiler import record_function
from torch.profiler import profile

import pdevision  # noqa: F401
from pdevision.bench.measure import steady_allocator
from pdevision.bench.models import create_for_bench
from pdevision.fastpath.modules import FusedHcRaBlock
from pdevision.layers.hcl import HcDownsample, HcRaBlock, HcStem, NeighbourMeanHeat, RefinementMlp

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")

ARMS = ("hcnet_tiny plain", "hcnet_tiny before", "hcnet_tiny accelerated", "convnext_tiny+fused")
FAMILIES = (
    "1x1 convolutions / linear layers",
    "alpha (pool, 1x1 projection, sigmoid)",
    "heat step (3x3 pool, neighbour count, element-wise)",
    "norms (GroupNorm / LayerNorm)",
    "depthwise convolutions",
    "dense convolutions (stem, downsampling)",
    "GELU (not fused)",
    "residual sums and other element-wise",
    "copies and layout",
    "other operators",
)
# the HcNet modules a profiled operator is attributed to (the innermost one that runs it)
SCOPES: tuple[tuple[type[nn.Module], str], ...] = (
    (NeighbourMeanHeat, "heat"),
    (HcRaBlock, "block"),
    (nn.GroupNorm, "norm"),
    (RefinementMlp, "ral"),
    (HcStem, "stem"),
    (HcDownsample, "stem"),
)
SCOPE_PREFIX = "scope:"
CONVOLUTIONS = ("aten::convolution",)
LINEARS = ("aten::linear", "mkldnn::_linear_pointwise")
COPIES = ("aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::empty_like", "aten::to")


def build(arm: str, res: int) -> nn.Module:
    """The model of an arm (see the module docstring), eval mode, float32."""
    cpu = torch.device("cpu")
    if arm == "hcnet_tiny plain":
        return timm.create_model("hcnet_tiny", img_size=res).eval()
    if arm == "convnext_tiny+fused":
        return create_for_bench("convnext_tiny+fused", res, cpu)
    model = create_for_bench("hcnet_tiny", res, cpu)
    if arm == "hcnet_tiny before":
        for module in model.modules():
            if type(module) is FusedHcRaBlock:
                module.__class__ = HcRaBlock
            elif isinstance(module, HcStem | HcDownsample):
                module.to(memory_format=torch.contiguous_format)
    return model


def add_scopes(model: nn.Module) -> None:
    """A profiler scope (``scope:<name>``) around the forward of each HcNet module of :data:`SCOPES`."""
    for module in model.modules():
        name = next((n for cls, n in SCOPES if isinstance(module, cls)), None)
        if name is None:
            continue
        stack: list[Any] = []

        def enter(_m: nn.Module, _args: Any, name: str = name, stack: list[Any] = stack) -> None:
            scope = record_function(SCOPE_PREFIX + name)
            scope.__enter__()
            stack.append(scope)

        def leave(_m: nn.Module, _args: Any, _out: Any, stack: list[Any] = stack) -> None:
            stack.pop().__exit__(None, None, None)

        module.register_forward_pre_hook(enter)
        module.register_forward_hook(leave)


def _conv_family(shapes: list[list[int]]) -> str:
    x, w = shapes[0], shapes[1]
    if w[2:] == [1, 1]:
        return FAMILIES[1] if x[2:] == [1, 1] else FAMILIES[0]
    if w[1] == 1 and w[0] == x[1] and x[1] > 1:
        return FAMILIES[4]
    return FAMILIES[5]


def family(event: Any) -> str | None:
    """The family of a profiled operator: by the nearest convolution, linear layer, norm or GELU that it is (or runs
    inside), else by its name and the innermost HcNet scope it runs in."""
    if event.name.startswith(SCOPE_PREFIX):
        return None  # the time between operators inside a scope: Python, which ConvNeXt-T's profile cannot show
    scopes = []
    node = event
    while node is not None:
        name, shapes = node.name, node.input_shapes
        if name in CONVOLUTIONS and shapes and len(shapes[1]) == 4:
            return _conv_family(shapes)
        if name in LINEARS and shapes:
            in_block = any(s in ("block", "heat") for s in _scopes_of(node))
            return FAMILIES[1] if in_block and len(shapes[0]) == 2 else FAMILIES[0]
        if name in ("aten::group_norm", "aten::layer_norm", "aten::native_group_norm", "aten::native_layer_norm"):
            return FAMILIES[3]
        if name == "aten::gelu":
            return FAMILIES[6]
        if name.startswith(SCOPE_PREFIX):
            scopes.append(name[len(SCOPE_PREFIX) :])
        node = node.cpu_parent
    name = event.name
    if name in ("aten::mean", "aten::sigmoid") and {"heat", "block"} & set(scopes):
        return FAMILIES[1]
    if name in COPIES or name in ("aten::permute", "aten::reshape", "aten::view", "aten::as_strided"):
        return FAMILIES[2] if "heat" in scopes and name != "aten::view" else FAMILIES[8]
    if scopes and scopes[0] == "heat":
        return FAMILIES[2]
    if scopes and scopes[0] == "block" and (name.endswith("_") or name == "aten::avg_pool2d"):
        return FAMILIES[2]  # the fused block's heat step: one pool, then in-place passes
    if name.startswith("aten::") and name in _ELEMENTWISE:
        return FAMILIES[7]
    return FAMILIES[9]


_ELEMENTWISE = {"aten::add", "aten::mul", "aten::sub", "aten::div", "aten::add_", "aten::mul_"}


def _scopes_of(event: Any) -> list[str]:
    out = []
    while event is not None:
        if event.name.startswith(SCOPE_PREFIX):
            out.append(event.name[len(SCOPE_PREFIX) :])
        event = event.cpu_parent
    return out


def profile_once(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Milliseconds of self CPU time per family in one forward."""
    with torch.inference_mode(), profile(record_shapes=True) as prof:
        model(x)
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        name = family(event)
        if name is not None:
            totals[name] += event.self_cpu_time_total / 1000.0
    return dict(totals)


def profile_arms(arms: list[str], res: int, batch: int, forwards: int) -> dict[str, dict[str, float]]:
    """Per arm, the median over ``forwards`` profiled forwards of each family's milliseconds (arms interleaved)."""
    models = {arm: build(arm, res) for arm in arms}
    for model in models.values():
        add_scopes(model)
    x = torch.randn(batch, 3, res, res)
    with torch.inference_mode():
        for model in models.values():
            model(x)
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    for _ in range(forwards):
        for arm, model in models.items():
            runs[arm].append(profile_once(model, x))
    return {arm: {f: statistics.median(r.get(f, 0.0) for r in runs[arm]) for f in FAMILIES} for arm in arms}


def time_arms(arms: list[str], res: int, batch: int, repeats: int) -> dict[str, list[float]]:
    """Seconds of each forward of each arm, the arms interleaved, after one warm-up forward each."""
    models = {arm: build(arm, res) for arm in arms}
    x = torch.randn(batch, 3, res, res)
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    with torch.inference_mode():
        for model in models.values():
            model(x)
        for _ in range(repeats):
            for arm, model in models.items():
                start = time.perf_counter()
                model(x)
                seconds[arm].append(time.perf_counter() - start)
    return seconds


# HcNet-T's RaL input products at batch 1 (rows, channels in, channels out): stages 1 and 3 at 224 and 768 px
GELU_SHAPES = ((3136, 64, 256), (196, 320, 1280), (36864, 64, 256), (2304, 320, 1280))


def gelu_ab(repeats: int) -> dict[str, dict[str, list[float]]]:
    """Seconds of the RaL's first product with GELU as oneDNN's erf post-op (``fused``) and as the product then
    PyTorch's GELU (``separate``), interleaved, per shape of :data:`GELU_SHAPES`."""
    product = torch.ops.mkldnn._linear_pointwise
    out = {}
    with torch.inference_mode():
        for rows, cin, cout in GELU_SHAPES:
            x, w, b = torch.randn(rows, cin), torch.randn(cout, cin), torch.randn(cout)
            arms: dict[str, Any] = {
                "fused": lambda x=x, w=w, b=b: product(x, w, b, "gelu", [], "none"),
                "separate": lambda x=x, w=w, b=b: F.gelu(product(x, w, b, "none", [], "")),
            }
            seconds: dict[str, list[float]] = {arm: [] for arm in arms}
            for _ in range(repeats + 1):
                for arm, fn in arms.items():
                    start = time.perf_counter()
                    fn()
                    seconds[arm].append(time.perf_counter() - start)
            out[f"{rows}x{cin}->{cout}"] = {arm: v[1:] for arm, v in seconds.items()}
    return out


def gelu_table(result: dict[str, dict[str, list[float]]]) -> list[str]:
    lines = [
        "| product (rows x in -> out) | fused: median ms (fastest) | separate: median ms (fastest) "
        "| fused / separate, median | fused / separate, 10th percentile |",
        "|---|---:|---:|---:|---:|",
    ]
    for shape, arms in result.items():
        f, s = arms["fused"], arms["separate"]
        p10 = statistics.quantiles(f, n=10)[0] / statistics.quantiles(s, n=10)[0]
        lines.append(
            f"| {shape} | {1e3 * statistics.median(f):.2f} ({1e3 * min(f):.2f}) | "
            f"{1e3 * statistics.median(s):.2f} ({1e3 * min(s):.2f}) | "
            f"{statistics.median(f) / statistics.median(s):.2f} | {p10:.2f} |"
        )
    return lines


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def profile_table(result: dict[str, dict[str, float]]) -> list[str]:
    arms = list(result)
    lines = ["| family | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    totals = {arm: sum(result[arm].values()) for arm in arms}
    for fam in FAMILIES:
        cells = [f"{result[a][fam]:.1f} ({100 * result[a][fam] / totals[a]:.0f}%)" for a in arms]
        lines.append(f"| {fam} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(f"{totals[a]:.1f}" for a in arms) + " |")
    return lines


def timing_table(result: dict[str, list[float]]) -> list[str]:
    ref = statistics.median(result["convnext_tiny+fused"])
    plain = statistics.median(result["hcnet_tiny plain"])
    lines = [
        "| arm | median ms | quartiles ms | x plain HcNet-T | x ConvNeXt-T+fused (same kernels) |",
        "|---|---:|---:|---:|---:|",
    ]
    for arm, values in result.items():
        q1, q2, q3 = _quartiles(values)
        spread = f"{1e3 * q1:.0f}-{1e3 * q3:.0f}"
        lines.append(f"| {arm} | {1e3 * q2:.0f} | {spread} | {plain / q2:.2f}x | {ref / q2:.2f}x |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--profiles", type=int, default=5, help="profiled forwards per arm and setting (median)")
    parser.add_argument("--repeats", type=int, default=15, help="timed forwards per arm and size (median)")
    parser.add_argument("--profile-batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--time-sizes", type=int, nargs="+", default=[224, 768])
    parser.add_argument("--gelu-repeats", type=int, default=30, help="timed products per arm and shape (GELU table)")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(RECORD, OUT)
        return
    torch.set_num_threads(args.threads)
    steady = steady_allocator()
    data: dict[str, Any] = {"profiles": {}, "timings": {}}
    lines = [
        "# HcNet-T on the fast path: where the time goes, and the HcNet kernels",
        "",
        f"{machine_line(args.threads)}; float32, eval mode, models built as `pdevision bench` builds them (folded, "
        f"`accelerate`d); allocator steady: {steady}. **A shared machine**: other jobs ran on its cores during the "
        f"run (load average at the start: {load_average()}), so single timings are noisy; the arms are interleaved "
        "and every figure is a median. Arms: `hcnet_tiny plain` (the authors' network as written, NCHW, no fast "
        "path); `hcnet_tiny before` (the fast path before the HcNet kernels: in float32 only the head's linear layer "
        "is on oneDNN); `hcnet_tiny accelerated` (`accelerate` now: `FusedHcRaBlock`, stem and downsampling "
        "channels-last); `convnext_tiny+fused` (ConvNeXt-T on the same kernels).",
        "",
    ]
    for batch in args.profile_batches:
        result = profile_arms(list(ARMS), 224, batch, args.profiles)
        data["profiles"][f"224_b{batch}"] = result
        lines += [
            f"## Profile: 224 px, batch {batch}",
            "",
            f"Self CPU milliseconds of one forward's operators by family (median of {args.profiles} profiled "
            "forwards per arm, interleaved; Python between operators not counted), and the family's share.",
            "",
            *profile_table(result),
            "",
        ]
        print("\n".join(lines[-len(FAMILIES) - 4 :]), flush=True)
    for res in args.time_sizes:
        result = time_arms(list(ARMS), res, 1, args.repeats)
        data["timings"][f"{res}_b1"] = result
        lines += [
            f"## Timing: {res} px, batch 1",
            "",
            f"Forward time, {args.repeats} interleaved forwards per arm (median and quartiles); ratios are throughput "
            "ratios (the arm's against the named model's median time).",
            "",
            *timing_table(result),
            "",
        ]
        print("\n".join(lines[-len(ARMS) - 3 :]), flush=True)
    result = gelu_ab(args.gelu_repeats)
    data["gelu"] = result
    lines += [
        "## GELU: oneDNN's erf post-op against the product then PyTorch's GELU",
        "",
        f"The RaL's first product at HcNet-T's batch-1 shapes, {args.gelu_repeats} interleaved calls per arm; the "
        "accelerated block takes the faster arm for its shapes (`FusedHcRaBlock`).",
        "",
        *gelu_table(result),
        "",
    ]
    print("\n".join(lines[-len(GELU_SHAPES) - 3 :]), flush=True)
    lines.append(f"Load average at the end: {load_average()}.")
    save_study(RECORD, OUT, "\n".join(lines), command_line(__spec__.name, argv), data=data)


if __name__ == "__main__":
    main()
