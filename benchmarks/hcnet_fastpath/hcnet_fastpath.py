"""HcNet-T on the fast path: where its inference time goes, operator family by family, against ConvNeXt-T on the same
kernels, in float32 and bfloat16, and what the fast path's HcNet kernels (``pdevision.fastpath``'s ``FusedHcRaBlock``)
change; vHeat-T beside them.

Run: ``python -m benchmarks.hcnet_fastpath.hcnet_fastpath [--threads 1] [--dtypes fp32 bf16] [--profiles 5]
[--repeats 15]``; ``--report-only`` writes the report from the record. Eval mode, the models as ``pdevision bench``
builds them (``create_for_bench``: folded, then ``accelerate``d) and runs them: bfloat16 is
``torch.autocast("cpu", dtype=torch.bfloat16)`` around a float32 model, as ``pdevision bench --dtype bf16``
(``pdevision.bench.measure.inference_fn``). Five arms:

- ``hcnet_tiny plain``: the authors' network as written (NCHW), no fast path;
- ``hcnet_tiny before``: ``accelerate`` as it was before the HcNet kernels (only the head's linear layer and, in
  bfloat16, cached convolution weights differ from the plain model; in float32 the blocks run their plain forward):
  the accelerated model with its blocks and stem put back to the plain classes and NCHW memory;
- ``hcnet_tiny accelerated``: ``accelerate`` now;
- ``convnext_tiny+fused``: ConvNeXt-T on the same kernels;
- ``vheat_tiny accelerated``: vHeat-T as ``pdevision bench`` runs it.

Profile: torch.profiler over single forwards (``--profiles`` of them per arm, after a warm-up); each operator's self
time goes to a family by its name, its shapes and the HcNet module it runs in (forward hooks open a profiler scope per
module; the Python time between operators is not counted, for any model); a family's time is its median over the
profiled forwards, its share that median over the sum of the families' medians. Each operator's self time is also
split by the dtype it computes in (its first floating-point input), so that in bfloat16 the time left in float32
operators shows. Timing: the arms and dtypes interleaved in one process (one model per arm, run in both dtypes),
``--repeats`` forwards each (after one warm-up), medians, with the interquartile range.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
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
from pdevision.fastpath import kernels
from pdevision.fastpath.modules import FusedHcRaBlock
from pdevision.layers.hcl import HcDownsample, HcRaBlock, HcStem, NeighbourMeanHeat, RefinementMlp
from pdevision.layers.spectral import SpectralOperator

OUT = Path(__file__).with_suffix(".md")
RECORD = Path(__file__).with_suffix(".json")

ARMS = (
    "hcnet_tiny plain",
    "hcnet_tiny before",
    "hcnet_tiny accelerated",
    "convnext_tiny+fused",
    "vheat_tiny accelerated",
)
DTYPES = {"fp32": None, "bf16": torch.bfloat16}  # autocast's dtype, as pdevision bench's --dtype
FAMILIES = (
    "1x1 convolutions / linear layers",
    "alpha (pool, 1x1 projection, sigmoid)",
    "heat step (3x3 pool, neighbour count, element-wise)",
    "DCT products and decay (vHeat's heat filter)",
    "norms (GroupNorm / LayerNorm)",
    "depthwise convolutions",
    "dense convolutions (stem, downsampling)",
    "GELU (not fused)",
    "residual sums and other element-wise",
    "dtype casts (float32 <-> bfloat16)",
    "copies and layout",
    "other operators",
)
F_LINEAR, F_ALPHA, F_HEAT, F_DCT, F_NORM, F_DW, F_DENSE, F_GELU, F_ELEMENTWISE, F_CAST, F_COPY, F_OTHER = FAMILIES
COMPUTE = ("bfloat16", "float32", "no floating-point input")
_COMPUTE_OF = {"c10::BFloat16": COMPUTE[0], "float": COMPUTE[1]}
# the HcNet modules a profiled operator is attributed to (the innermost one that runs it)
SCOPES: tuple[tuple[type[nn.Module], str], ...] = (
    (NeighbourMeanHeat, "heat"),
    (HcRaBlock, "block"),
    (nn.GroupNorm, "norm"),
    (RefinementMlp, "ral"),
    (HcStem, "stem"),
    (HcDownsample, "stem"),
    (SpectralOperator, "spectral"),
)
SCOPE_PREFIX = "scope:"
CASTS = ("aten::_to_copy",)
CONVOLUTIONS = ("aten::convolution",)
LINEARS = ("aten::linear", "mkldnn::_linear_pointwise")
COPIES = ("aten::copy_", "aten::_to_copy", "aten::clone", "aten::contiguous", "aten::empty_like", "aten::to")


def build(arm: str, res: int) -> nn.Module:
    """The model of an arm (see the module docstring), eval mode, float32 weights."""
    cpu = torch.device("cpu")
    if arm == "hcnet_tiny plain":
        return timm.create_model("hcnet_tiny", img_size=res).eval()
    if arm == "convnext_tiny+fused":
        return create_for_bench("convnext_tiny+fused", res, cpu)
    if arm == "vheat_tiny accelerated":
        return create_for_bench("vheat_tiny", res, cpu)
    model = create_for_bench("hcnet_tiny", res, cpu)
    if arm == "hcnet_tiny before":
        for module in model.modules():
            if type(module) is FusedHcRaBlock:
                module.__class__ = HcRaBlock
            elif isinstance(module, HcStem | HcDownsample):
                module.to(memory_format=torch.contiguous_format)
    return model


def scope_of(module: nn.Module) -> str | None:
    """The scope of an HcNet or vHeat module of :data:`SCOPES` (the first class it is an instance of)."""
    return next((n for cls, n in SCOPES if isinstance(module, cls)), None)


def add_scopes(model: nn.Module, name_of: Callable[[nn.Module], str | None] = scope_of) -> None:
    """A profiler scope (``scope:<name>``) around the forward of each module that ``name_of`` names (by default the
    HcNet modules of :data:`SCOPES`)."""
    for module in model.modules():
        name = name_of(module)
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
        return F_ALPHA if x[2:] == [1, 1] else F_LINEAR
    if w[1] == 1 and w[0] == x[1] and x[1] > 1:
        return F_DW
    return F_DENSE


def _linear_family(shapes: list[list[int]], scopes: list[str]) -> str:
    """A oneDNN product or linear layer: alpha's projection (a pooled 2-d input in an HcNet block), a product of
    vHeat's DCT basis (a square 2-d matrix first, in the spectral operator: the fused heat filter), else a linear
    layer."""
    if any(s in ("block", "heat") for s in scopes) and len(shapes[0]) == 2:
        return F_ALPHA
    if "spectral" in scopes and len(shapes[0]) == 2 and shapes[0][0] == shapes[0][1]:
        return F_DCT
    return F_LINEAR


def family(event: Any) -> str | None:
    """The family of a profiled operator: a dtype cast (or the copy inside one), else by the nearest convolution,
    linear layer, norm or GELU that it is (or runs inside), else by its name and the innermost HcNet or vHeat scope
    it runs in."""
    if event.name.startswith(SCOPE_PREFIX):
        return None  # the time between operators inside a scope: Python, which ConvNeXt-T's profile cannot show
    scopes = []
    node = event
    while node is not None:
        name, shapes = node.name, node.input_shapes
        if name in CASTS:
            return F_CAST  # autocast's casts of inputs and weights, and the kernels' own
        if name in CONVOLUTIONS and shapes and len(shapes[1]) == 4:
            return _conv_family(shapes)
        if name in LINEARS and shapes:
            return _linear_family(shapes, _scopes_of(node))
        if name in ("aten::group_norm", "aten::layer_norm", "aten::native_group_norm", "aten::native_layer_norm"):
            return F_NORM
        if name == "aten::gelu":
            return F_GELU
        if name.startswith(SCOPE_PREFIX):
            scopes.append(name[len(SCOPE_PREFIX) :])
        node = node.cpu_parent
    name = event.name
    if "spectral" in scopes and (name in ("aten::bmm", "aten::mm", "aten::matmul") or name == "aten::mul_"):
        return F_DCT  # the matrix DCT's batched products and the decay multiplied into the spectrum
    if name in ("aten::mean", "aten::sigmoid") and {"heat", "block"} & set(scopes):
        return F_ALPHA
    if name in COPIES or name in ("aten::permute", "aten::reshape", "aten::view", "aten::as_strided"):
        return F_HEAT if "heat" in scopes and name != "aten::view" else F_COPY
    if scopes and scopes[0] == "heat":
        return F_HEAT
    if scopes and scopes[0] == "block" and (name.endswith("_") or name in ("aten::avg_pool2d", "aten::lerp")):
        return F_HEAT  # the fused block's heat step: one pool, in-place passes, a lerp
    if name.startswith("aten::") and name in _ELEMENTWISE:
        return F_ELEMENTWISE
    return F_OTHER


def compute_dtype_of(event: Any) -> str:
    """The dtype an operator computes in, as its first floating-point input's (bfloat16 or float32)."""
    for dtype in event.input_dtypes or ():
        if dtype in _COMPUTE_OF:
            return _COMPUTE_OF[dtype]
    return COMPUTE[2]


_ELEMENTWISE = {"aten::add", "aten::mul", "aten::sub", "aten::div", "aten::add_", "aten::mul_"}


def _scopes_of(event: Any) -> list[str]:
    out = []
    while event is not None:
        if event.name.startswith(SCOPE_PREFIX):
            out.append(event.name[len(SCOPE_PREFIX) :])
        event = event.cpu_parent
    return out


def cpu_features() -> str:
    """PyTorch's CPU capability and the CPU's bf16 flags (``/proc/cpuinfo``), as the report states them."""
    flags: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    bf16 = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    return (
        f"PyTorch CPU capability {torch.backends.cpu.get_cpu_capability()}, bf16 CPU flags: {', '.join(bf16) or 'none'}"
    )


@contextlib.contextmanager
def running(dtype: str) -> Iterator[None]:
    """Inference mode, under bfloat16 autocast for ``"bf16"`` (as ``pdevision.bench.measure.inference_fn``)."""
    autocast = DTYPES[dtype]
    with torch.inference_mode(), torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
        yield


def profile_once(
    model: nn.Module, x: torch.Tensor, dtype: str, family_of: Callable[[Any], str | None] = family
) -> dict[str, dict[str, float]]:
    """Milliseconds of self CPU time in one forward, per family (``family_of`` a profiled operator, ``None`` for none)
    and per compute dtype."""
    with running(dtype), profile(record_shapes=True) as prof:
        model(x)
    families: dict[str, float] = defaultdict(float)
    computes: dict[str, float] = defaultdict(float)
    for event in prof.events():
        name = family_of(event)
        if name is not None:
            families[name] += event.self_cpu_time_total / 1000.0
            computes[compute_dtype_of(event)] += event.self_cpu_time_total / 1000.0
    return {"families": dict(families), "compute": dict(computes)}


def profile_arms(
    arms: list[str], dtypes: list[str], res: int, batch: int, forwards: int
) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Per dtype and arm, the median over ``forwards`` profiled forwards of each family's milliseconds and of the
    milliseconds per compute dtype (arms and dtypes interleaved)."""
    models = {arm: build(arm, res) for arm in arms}
    for model in models.values():
        add_scopes(model)
    x = torch.randn(batch, 3, res, res)
    for dtype in dtypes:
        for model in models.values():
            with running(dtype):
                model(x)
    runs: dict[tuple[str, str], list[dict[str, dict[str, float]]]] = {(d, a): [] for d in dtypes for a in arms}
    for _ in range(forwards):
        for dtype in dtypes:
            for arm, model in models.items():
                runs[dtype, arm].append(profile_once(model, x, dtype))

    def medians(dtype: str, arm: str, part: str, keys: tuple[str, ...]) -> dict[str, float]:
        return {k: statistics.median(r[part].get(k, 0.0) for r in runs[dtype, arm]) for k in keys}

    return {
        dtype: {
            arm: {
                "families": medians(dtype, arm, "families", FAMILIES),
                "compute": medians(dtype, arm, "compute", COMPUTE),
            }
            for arm in arms
        }
        for dtype in dtypes
    }


def time_arms(
    arms: list[str], dtypes: list[str], res: int, batch: int, repeats: int
) -> dict[str, dict[str, list[float]]]:
    """Per dtype and arm, seconds of each forward, the arms and dtypes interleaved, after one warm-up forward each."""
    models = {arm: build(arm, res) for arm in arms}
    x = torch.randn(batch, 3, res, res)
    seconds: dict[str, dict[str, list[float]]] = {d: {arm: [] for arm in arms} for d in dtypes}
    for dtype in dtypes:
        for model in models.values():
            with running(dtype):
                model(x)
    for _ in range(repeats):
        for dtype in dtypes:
            for arm, model in models.items():
                with running(dtype):
                    start = time.perf_counter()
                    model(x)
                    seconds[dtype][arm].append(time.perf_counter() - start)
    return seconds


# HcNet-T's RaL input products at batch 1 (rows, channels in, channels out): stages 1 and 3 at 224 and 768 px
GELU_SHAPES = ((3136, 64, 256), (196, 320, 1280), (36864, 64, 256), (2304, 320, 1280))


def gelu_ab(repeats: int, dtypes: list[str]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Per dtype, seconds of the RaL's first product with GELU as oneDNN's erf post-op (``fused``) and as the product
    then PyTorch's GELU (``separate``), interleaved, per shape of :data:`GELU_SHAPES` (bfloat16: inputs and weights
    in bfloat16, as the fast path's products under autocast)."""
    product = torch.ops.mkldnn._linear_pointwise
    out: dict[str, dict[str, dict[str, list[float]]]] = {d: {} for d in dtypes}
    with torch.inference_mode():
        for rows, cin, cout in GELU_SHAPES:
            for dtype in dtypes:
                dt = DTYPES[dtype] or torch.float32
                x, w, b = (
                    torch.randn(rows, cin, dtype=dt),
                    torch.randn(cout, cin, dtype=dt),
                    torch.randn(cout, dtype=dt),
                )
                arms: dict[str, Any] = {
                    "fused": lambda x=x, w=w, b=b: product(x, w, b, "gelu", [], "none"),
                    "separate": lambda x=x, w=w, b=b: F.gelu(product(x, w, b, "none", [], "")),
                }
                out[dtype][f"{rows}x{cin}->{cout}"] = interleaved(arms, repeats)
    return out


def interleaved(arms: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each arm's call, the arms in turn, ``repeats`` rounds after a first (warm-up) one."""
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(repeats + 1):
        for arm, fn in arms.items():
            start = time.perf_counter()
            fn()
            seconds[arm].append(time.perf_counter() - start)
    return {arm: v[1:] for arm, v in seconds.items()}


# the heat step's maps (batch, height, width, channels): HcNet-T's four stages at 224 px, batch 1 and 8, and at 768 px
HEAT_SHAPES = tuple(
    (b, res // 4 // 2**i, res // 4 // 2**i, c)
    for res, b in ((224, 1), (224, 8), (768, 1))
    for i, c in enumerate((64, 128, 320, 512))
)


def heat_ab(repeats: int, dtypes: list[str]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Per dtype, seconds of the fast path's heat step (``kernels.neighbour_heat_nhwc``, alpha per sample and
    channel) with the mean of the neighbours by depthwise convolution (``conv``) and by sum pool (``pool``),
    interleaved, per map of :data:`HEAT_SHAPES`."""
    out: dict[str, dict[str, dict[str, list[float]]]] = {d: {} for d in dtypes}
    previous = kernels.HEAT_CONV_MIN_ELEMENTS
    try:
        with torch.inference_mode():
            for b, h, w, c in HEAT_SHAPES:
                for dtype in dtypes:
                    dt = DTYPES[dtype] or torch.float32
                    x, alpha = torch.randn(b, h, w, c, dtype=dt), torch.rand(b, 1, 1, c, dtype=dt)
                    arms = {"conv": lambda x=x, a=alpha: _heat_with(0, x, a)}
                    arms["pool"] = lambda x=x, a=alpha: _heat_with(1 << 62, x, a)
                    out[dtype][f"{b}x{h}x{w}x{c}"] = interleaved(arms, repeats)
    finally:
        kernels.HEAT_CONV_MIN_ELEMENTS = previous
    return out


def _heat_with(threshold: int, x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """The fast path's heat step with the convolution taken from ``threshold`` elements on (0: always; huge: never)."""
    kernels.HEAT_CONV_MIN_ELEMENTS = threshold
    return kernels.neighbour_heat_nhwc(x, alpha)


def ab_table(result: dict[str, dict[str, dict[str, list[float]]]], first: str, second: str, what: str) -> list[str]:
    """Per dtype and shape: each arm's median (and fastest) milliseconds, and the first over the second at the median
    and at the 10th percentile."""
    lines = [
        f"| dtype | {what} | {first}: median ms (fastest) | {second}: median ms (fastest) "
        f"| {first} / {second}, median | {first} / {second}, 10th percentile |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for dtype, shapes in result.items():
        for shape, arms in shapes.items():
            f, s = arms[first], arms[second]
            p10 = statistics.quantiles(f, n=10)[0] / statistics.quantiles(s, n=10)[0]
            lines.append(
                f"| {dtype} | {shape} | {1e3 * statistics.median(f):.2f} ({1e3 * min(f):.2f}) | "
                f"{1e3 * statistics.median(s):.2f} ({1e3 * min(s):.2f}) | "
                f"{statistics.median(f) / statistics.median(s):.2f} | {p10:.2f} |"
            )
    return lines


def ab_section(title: str, intro: str, table: list[str]) -> list[str]:
    """A report section of an A/B table, printed as it is made."""
    section = [f"## {title}", "", intro, "", *table, ""]
    print("\n".join(section), flush=True)
    return section


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3


def profile_table(result: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """Milliseconds and share per family (rows) and arm (columns) of one dtype."""
    arms = list(result)
    lines = ["| family | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    totals = {arm: sum(result[arm]["families"].values()) for arm in arms}
    for fam in FAMILIES:
        cells = [
            f"{result[a]['families'][fam]:.1f} ({100 * result[a]['families'][fam] / totals[a]:.0f}%)" for a in arms
        ]
        lines.append(f"| {fam} | " + " | ".join(cells) + " |")
    lines.append("| **total** | " + " | ".join(f"{totals[a]:.1f}" for a in arms) + " |")
    return lines


def dtype_table(result: dict[str, dict[str, dict[str, dict[str, float]]]]) -> list[str]:
    """bfloat16 against float32 per family and arm: ``bf16 ms / fp32 ms`` (below 1: bfloat16 faster), then the
    bfloat16 forward's milliseconds per compute dtype of its operators."""
    arms = list(result["fp32"])
    lines = ["| family: bf16 ms / fp32 ms | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    rows = [*FAMILIES, "**total**"]
    for fam in rows:
        cells = []
        for arm in arms:
            fp32, bf16 = (
                (sum(result[d][arm]["families"].values()) if fam == rows[-1] else result[d][arm]["families"][fam])
                for d in ("fp32", "bf16")
            )
            cells.append(f"{bf16:.1f} / {fp32:.1f} = {bf16 / fp32:.2f}" if fp32 > 0.05 else f"{bf16:.1f} / {fp32:.1f}")
        lines.append(f"| {fam} | " + " | ".join(cells) + " |")
    for compute in COMPUTE:
        cells = [f"{result['bf16'][a]['compute'][compute]:.1f}" for a in arms]
        lines.append(f"| bf16 forward: ms in operators computing in {compute} | " + " | ".join(cells) + " |")
    return lines


def timing_table(result: dict[str, dict[str, list[float]]]) -> list[str]:
    """Per dtype and arm: median and quartiles, throughput against plain HcNet-T and ConvNeXt-T on the same kernels in
    the same dtype, and bfloat16's throughput against the arm's own float32 (all interleaved in one process)."""
    lines = [
        "| dtype | arm | median ms | quartiles ms | x plain HcNet-T (same dtype) | x ConvNeXt-T+fused (same kernels, "
        "same dtype) | bf16 x fp32 (same arm) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for dtype, arms in result.items():
        ref = statistics.median(arms["convnext_tiny+fused"])
        plain = statistics.median(arms["hcnet_tiny plain"])
        for arm, values in arms.items():
            q1, q2, q3 = _quartiles(values)
            spread = f"{1e3 * q1:.0f}-{1e3 * q3:.0f}"
            own = ""
            if dtype == "bf16" and "fp32" in result:
                own = f"{statistics.median(result['fp32'][arm]) / q2:.2f}x"
            lines.append(
                f"| {dtype} | {arm} | {1e3 * q2:.0f} | {spread} | {plain / q2:.2f}x | {ref / q2:.2f}x | {own} |"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    parser.add_argument("--profiles", type=int, default=5, help="profiled forwards per arm and setting (median)")
    parser.add_argument("--repeats", type=int, default=15, help="timed forwards per arm and size (median)")
    parser.add_argument("--profile-batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--time-sizes", type=int, nargs="+", default=[224, 768])
    parser.add_argument("--gelu-repeats", type=int, default=30, help="timed products per arm and shape (GELU table)")
    parser.add_argument("--heat-repeats", type=int, default=30, help="timed heat steps per arm and map (heat table)")
    add_report_only(parser)
    args = parser.parse_args(argv)
    if args.report_only:
        rewrite_report(RECORD, OUT)
        return
    torch.set_num_threads(args.threads)
    steady = steady_allocator()
    data: dict[str, Any] = {"profiles": {}, "timings": {}}
    dtypes = ", ".join(f"`{d}`" for d in args.dtypes)
    lines = [
        "# HcNet-T on the fast path: where the time goes, and the HcNet kernels (float32 and bfloat16)",
        "",
        f"{machine_line(args.threads)} ({cpu_features()}); dtypes {dtypes} (bf16: "
        "`torch.autocast('cpu', dtype=torch.bfloat16)` around the float32 model, as `pdevision bench --dtype bf16`), "
        "eval mode, models built as `pdevision bench` builds "
        f"them (folded, `accelerate`d); allocator steady: {steady}. **A shared machine**: other jobs ran on its cores "
        f"during the run (load average at the start: {load_average()}), so single timings are noisy; the arms and "
        "dtypes are interleaved and every figure is a median. Arms: `hcnet_tiny plain` (the authors' network as "
        "written, NCHW, no fast path); `hcnet_tiny before` (the fast path without the HcNet kernels: the blocks' "
        "plain forward, stem and downsampling NCHW); `hcnet_tiny accelerated` (`accelerate` now: `FusedHcRaBlock`, "
        "stem and downsampling channels-last); `convnext_tiny+fused` (ConvNeXt-T on the same kernels); "
        "`vheat_tiny accelerated` (vHeat-T as `pdevision bench` runs it).",
        "",
    ]
    for batch in args.profile_batches:
        result = profile_arms(list(ARMS), args.dtypes, 224, batch, args.profiles)
        data["profiles"][f"224_b{batch}"] = result
        for dtype in args.dtypes:
            lines += [
                f"## Profile: 224 px, batch {batch}, {dtype}",
                "",
                f"Self CPU milliseconds of one forward's operators by family (median of {args.profiles} profiled "
                "forwards per arm, arms and dtypes interleaved; Python between operators not counted), and the "
                "family's share.",
                "",
                *profile_table(result[dtype]),
                "",
            ]
            print("\n".join(lines[-len(FAMILIES) - 4 :]), flush=True)
        if {"fp32", "bf16"} <= set(args.dtypes):
            lines += [
                f"## bfloat16 against float32: 224 px, batch {batch}",
                "",
                "Per family, the bf16 forward's milliseconds over the fp32 forward's (the medians above; below 1: "
                "faster in bf16); then the bf16 forward's self time by the dtype its operators compute in (their "
                "first floating-point input): what runs in float32 under autocast has left the bf16 kernels.",
                "",
                *dtype_table(result),
                "",
            ]
            print("\n".join(lines[-len(FAMILIES) - 7 :]), flush=True)
    for res in args.time_sizes:
        result = time_arms(list(ARMS), args.dtypes, res, 1, args.repeats)
        data["timings"][f"{res}_b1"] = result
        lines += [
            f"## Timing: {res} px, batch 1",
            "",
            f"Forward time, {args.repeats} forwards per arm and dtype, arms and dtypes interleaved (median and "
            "quartiles); ratios are throughput ratios (the arm's against the named model's median time).",
            "",
            *timing_table(result),
            "",
        ]
        print("\n".join(lines[-len(ARMS) * len(args.dtypes) - 3 :]), flush=True)
    data["gelu"] = gelu_ab(args.gelu_repeats, args.dtypes)
    lines += ab_section(
        "GELU: oneDNN's erf post-op against the product then PyTorch's GELU",
        f"The RaL's first product at HcNet-T's batch-1 shapes, {args.gelu_repeats} interleaved calls per arm; the "
        "accelerated block takes the post-op in both dtypes (`FusedHcRaBlock`), as every MLP on the fast path.",
        ab_table(data["gelu"], "fused", "separate", "product (rows x in -> out)"),
    )
    data["heat"] = heat_ab(args.heat_repeats, args.dtypes)
    lines += ab_section(
        "The heat step: depthwise convolution against sum pool",
        f"`neighbour_heat_nhwc` on HcNet-T's maps (batch x height x width x channels), {args.heat_repeats} interleaved "
        "calls per arm: the mean of the neighbours by a depthwise 3x3 convolution with its border rescaled (`conv`) "
        "or by a sum pool, minus the centre, times the inverse neighbour count (`pool`); the fast path takes the "
        f"convolution from {kernels.HEAT_CONV_MIN_ELEMENTS:,} elements of a map on.",
        ab_table(data["heat"], "conv", "pool", "map (b x h x w x c)"),
    )
    lines.append(f"Load average at the end: {load_average()}.")
    save_study(RECORD, OUT, "\n".join(lines), command_line(__spec__.name, argv), data=data)


if __name__ == "__main__":
    main()
