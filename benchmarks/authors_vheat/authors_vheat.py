"""vHeat-T of this library against the authors' released vHeat-T code, same weights, side by side (issue 15).

The authors' model is imported from a clone of their repository that you give (``--authors-code DIR``, the root
of ``github.com/MzeroMiko/vHeat``; it needs ``einops``); nothing of it is copied here. Both models are vHeat-T as the
authors' ``vHeat_tiny_224.yaml`` configures it (dims 96, depths 2-2-6-2, pre-norm), built at each measured size with
the authors' model's random initialisation; this library's model gets the authors' weights through
:func:`pdevision.models.vheat.checkpoint_filter_fn`, and the two logits are compared before timing (fp32), so both
compute the same function. Each is folded its own way: the authors' ``infer_mode`` with ``infer_init()`` (their
throughput mode), this library's as ``pdevision bench`` folds it. Timing as ``pdevision bench``: one process, the
steady allocator, interleaved repeats after warm-up, median; fp32 and bf16 autocast. Writes
``benchmarks/authors_vheat/authors_vheat.md``.

Run: ``PYTHONPATH=src python -m benchmarks.authors_vheat.authors_vheat --authors-code PATH/TO/vHeat --threads 2``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import torch
from benchmarks.records import add_report_only, command_line, machine_line, rewrite_report, save_study

from pdevision.engine.validators import bounded, positive_int  # the CLI's checks: a clear argparse error
from pdevision.models.factory import MAX_SIZE

HERE = Path(__file__).resolve().parent
DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def load_authors_module(root: Path) -> Any:
    """The authors' ``classification/models/vHeat.py`` as a module, or a clear error naming what is missing."""
    path = Path(root) / "classification" / "models" / "vHeat.py"
    if not path.is_file():
        raise SystemExit(f"authors_vheat: no {path}: --authors-code must be the root of a clone of MzeroMiko/vHeat")
    if importlib.util.find_spec("einops") is None:
        raise SystemExit("authors_vheat: the authors' code needs einops (pip install einops)")
    spec = importlib.util.spec_from_file_location("authors_vheat_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_pair(module: Any, img_size: int) -> tuple[torch.nn.Module, torch.nn.Module, float]:
    """(authors' vHeat-T folded, this library's vHeat-T with the same weights folded, max |logit difference|)."""
    from pdevision.bench.models import _folded
    from pdevision.models.factory import create_model
    from pdevision.models.vheat import checkpoint_filter_fn

    torch.manual_seed(0)
    theirs = module.vHeat(depths=[2, 2, 6, 2], dims=96, post_norm=False, img_size=img_size, infer_mode=True).eval()
    ours = create_model("vheat_tiny", img_size=img_size).eval()
    ours.load_state_dict(checkpoint_filter_fn(theirs.state_dict(), ours))
    theirs.infer_init()
    ours = _folded(ours, img_size, fused=False)
    x = torch.randn(2, 3, img_size, img_size)
    with torch.inference_mode():
        diff = float((theirs(x) - ours(x)).abs().max())
    return theirs, ours, diff


def measure(module: Any, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    from pdevision.bench.compare import default_batch
    from pdevision.bench.measure import inference_fn, interleaved_medians

    dev = torch.device("cpu")
    rows = []
    for size in sizes:
        theirs, ours, diff = build_pair(module, size)
        batch = default_batch(size)
        x = torch.randn(batch, 3, size, size)
        for name, dtype in DTYPES.items():
            fns = {"authors": inference_fn(theirs, x, dtype), "pdevision": inference_fn(ours, x, dtype)}
            times = interleaved_medians(fns, dev, repeats=repeats)
            ratio = times["authors"]["median"] / times["pdevision"]["median"]
            rows.append(
                {
                    "img_size": size,
                    "batch": batch,
                    "dtype": name,
                    "authors_img_s": batch / times["authors"]["median"],
                    "pdevision_img_s": batch / times["pdevision"]["median"],
                    "ratio": ratio,
                    "max_logit_diff": diff,
                }
            )
            print(rows[-1], flush=True)
    return rows


def write_report(rows: list[dict[str, Any]], args: argparse.Namespace, commit: str, seconds: float) -> str:
    lines = [
        "# vHeat-T: this library against the authors' code (same weights)",
        "",
        "Written by `python -m benchmarks.authors_vheat.authors_vheat`.",
        "",
        f"- Machine: {machine_line()}, CPU, steady allocator; median of {args.repeats} interleaved repeats after "
        f"warm-up; {seconds:.0f} s in all.",
        f"- Authors' code: MzeroMiko/vHeat at commit {commit}, `classification/models/vHeat.py`, vHeat-T "
        "(`vHeat_tiny_224.yaml`: dims 96, depths 2-2-6-2, pre-norm), `infer_mode` with `infer_init()`.",
        "- This library: `vheat_tiny` with the authors' weights (`checkpoint_filter_fn`), folded as `pdevision bench` "
        "folds it (decay factors precomputed, linear layers on the fused oneDNN kernels).",
        "- Same function: the max |logit difference| of the two folded models in fp32 at each size (a batch of 2, the "
        "authors' random initialisation) is in the last column.",
        "",
        "| px | batch | dtype | authors img/s | pdevision img/s | pdevision / authors | max logit diff |",
        "|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['img_size']} | {r['batch']} | {r['dtype']} | {r['authors_img_s']:.2f} | "
            f"{r['pdevision_img_s']:.2f} | {r['ratio']:.2f}x | {r['max_logit_diff']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--authors-code", type=Path, help="root of a clone of MzeroMiko/vHeat (needed to measure)")
    p.add_argument("--sizes", type=bounded(int, 32, MAX_SIZE), nargs="+", default=[224, 512, 768, 1024])
    p.add_argument("--repeats", type=positive_int, default=5)
    p.add_argument("--threads", type=positive_int, default=None)
    p.add_argument("--commit", default="unknown", help="the clone's commit, for the record")
    p.add_argument("--md", type=Path, default=HERE / "authors_vheat.md", help="the report (record: .json)")
    add_report_only(p)
    args = p.parse_args(argv)
    if args.report_only:
        rewrite_report(args.md.with_suffix(".json"), args.md)
        return 0
    if args.authors_code is None:
        p.error("--authors-code is needed to measure (or --report-only)")
    module = load_authors_module(args.authors_code)
    from pdevision.bench.measure import steady_allocator

    if args.threads:
        torch.set_num_threads(args.threads)
    steady_allocator()
    start = time.perf_counter()
    rows = measure(module, args.sizes, args.repeats)
    text = write_report(rows, args, args.commit, time.perf_counter() - start)
    save_study(args.md.with_suffix(".json"), args.md, text, command_line(__spec__.name, argv), data=rows)
    print(f"wrote {args.md}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
