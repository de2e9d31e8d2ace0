"""Which rule for vHeat's Frequency Value Embeddings transfers a segmentation model best to a new resolution?

Source: a ``vheat_micro`` + UPerNet checkpoint trained on the embedded scenes at 64 px (FVEs of 16x16, 8x8,
4x4, 2x2). Target: the same scenes upsampled to ``--size`` (bilinear images, nearest masks). For each rule
the source weights are loaded into a model built for ``--size`` through vHeat's checkpoint filter (its FVEs
resized by the rule at load), evaluated as loaded ("zero-shot"), fine-tuned ``--steps`` AdamW steps at
``--size`` (random resize 0.75-1.5, crop, flip), then evaluated at ``--size`` and at ``--other`` (where the
rule's run-time resampling acts):

* ``interp``: load and run time, linear in the physical frequency ``w = n pi / N`` (this library's default);
* ``pad``: zero-pad the high frequencies at load, zero-pad or crop at run time;
* ``downstream``: the vHeat authors' rule, zero-pad at load to ``--size``, bicubic resampling at run time.

Writes ``fve_transfer.json`` and ``fve_transfer.md`` to ``--out``.

    python -m benchmarks.dense_fve.dense_fve --source runs/segment/best --size 128 --other 96 --steps 40 --seeds 0
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from benchmarks.records import add_report_only, command_line, read_record, write_record, write_report

HERE = Path(__file__).resolve().parent

PREFIX = "net.encoder.model.model."


def _resized(dataset: Any, size: int) -> Any:
    from torchvision.transforms import v2

    resize = v2.Resize([size, size], antialias=True)

    class Resized(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(dataset)

        def __getitem__(self, i: int) -> Any:
            return resize(*dataset[i])

    return Resized()


def build(meta: dict[str, Any], state: dict[str, torch.Tensor], size: int, rule: str) -> torch.nn.Module:
    """The source weights in a model for ``size``, FVEs through vHeat's checkpoint filter with ``rule``."""
    from pdevision.models.dense import create_segmentation_model
    from pdevision.models.vheat import checkpoint_filter_fn

    model = create_segmentation_model(
        meta["model"],
        len(meta["classes"]),
        meta["head"],
        decoder_channels=meta["decoder_channels"],
        img_size=size,
        fve_resize=rule,
    )
    backbone = {k[len(PREFIX) :]: v for k, v in state.items() if k.startswith(PREFIX)}
    backbone = checkpoint_filter_fn(backbone, model.backbone.model)
    merged = {k: v for k, v in state.items() if not k.startswith(PREFIX)}
    merged.update({PREFIX + k: v for k, v in backbone.items()})
    model.load_state_dict(merged)
    return model


@torch.no_grad()
def miou(model: torch.nn.Module, dataset: Any, n: int) -> float:
    from pdevision.tasks.segment import confusion_matrix, segmentation_scores

    model.eval()
    conf = torch.zeros(n, n, dtype=torch.long)
    for images, masks in torch.utils.data.DataLoader(dataset, batch_size=16):
        conf += confusion_matrix(model(images.as_subclass(torch.Tensor)).argmax(1), masks.as_subclass(torch.Tensor), n)
    return segmentation_scores(conf)["miou"]


def fine_tune(model: torch.nn.Module, size: int, steps: int, seed: int) -> None:
    from pdevision.data.dense import SceneSegmentation, segmentation_transforms

    torch.manual_seed(seed)
    data = SceneSegmentation("train", 64, seed=0, transform=segmentation_transforms(size, True, (0.75, 1.5)))
    loader = torch.utils.data.DataLoader(
        data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(seed)
    )
    opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.05)
    model.train()
    it = iter(loader)
    for _ in range(steps):
        images, masks = next(it)
        loss = F.cross_entropy(
            model(images.as_subclass(torch.Tensor)), masks.as_subclass(torch.Tensor), ignore_index=255
        )
        opt.zero_grad()
        loss.backward()
        opt.step()


def _fmt(v: list[float]) -> str:
    return f"{statistics.mean(v):.2f}" + (f" ± {statistics.stdev(v):.2f}" if len(v) > 1 else "")


def report(result: dict[str, Any]) -> str:
    """The Markdown of a record (``dense_fve.json``)."""
    size, other = result["size"], result["other"]
    lines = [
        f"Source: vheat_micro + UPerNet at 64 px, val mIoU {result['source_val_miou_at_64']:.2f} at 64 px. "
        f"Val mIoU (%) on {result['val_scenes']} embedded val scenes upsampled to {size} px (and {other} px); "
        f"fine-tuning {result['steps']} AdamW steps of 8 crops at {size} px, seeds {result['seeds']} "
        "(mean ± std over seeds).",
        "",
        f"| FVE rule | zero-shot at {size} | fine-tuned, at {size} | fine-tuned, at {other} |",
        "|---|---:|---:|---:|",
    ]
    for rule, r in result["rows"].items():
        lines.append(f"| {rule} | {_fmt(r['zero_shot'])} | {_fmt(r['tuned'])} | {_fmt(r['tuned_other'])} |")
    if result.get("note"):  # a paragraph on the conditions of the run, kept in the record
        lines += ["", result["note"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", help="segmentation checkpoint of vheat_micro at 64 px (needed to measure)")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--other", type=int, default=96)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--val", type=int, default=250, help="val scenes")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", default=str(HERE), help="folder of dense_fve.json and dense_fve.md")
    add_report_only(parser)
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        write_report(out / "dense_fve.md", report(read_record(out / "dense_fve.json")))
        return 0
    if args.source is None:
        parser.error("--source is needed to measure (or --report-only)")
    if args.threads:
        torch.set_num_threads(args.threads)
    import pdevision.models  # noqa: F401
    from pdevision.data.dense import SceneSegmentation, segmentation_transforms
    from pdevision.engine.checkpoint import load_weights, read_meta

    meta, state = read_meta(args.source), load_weights(args.source)
    n = len(meta["classes"])
    val = SceneSegmentation("val", 64, seed=0, length=args.val, transform=segmentation_transforms(64, False))
    at_size, at_other = _resized(val, args.size), _resized(val, args.other)
    start = time.perf_counter()
    rows: dict[str, dict[str, list[float]]] = {}
    for seed in args.seeds:
        for rule in ("interp", "pad", "downstream"):
            model = build(meta, state, args.size, rule)
            r = rows.setdefault(rule, {"zero_shot": [], "tuned": [], "tuned_other": []})
            if seed == args.seeds[0]:
                r["zero_shot"].append(miou(model, at_size, n))
            fine_tune(model, args.size, args.steps, seed)
            r["tuned"].append(miou(model, at_size, n))
            r["tuned_other"].append(miou(model, at_other, n))
            print(rule, seed, {k: v[-1] for k, v in r.items()}, f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    source_miou = miou(build(meta, state, 64, "interp"), val, n)

    out.mkdir(parents=True, exist_ok=True)
    result = {
        "command": command_line(__spec__.name, argv),
        "source": str(args.source),
        "source_val_miou_at_64": source_miou,
        "size": args.size,
        "other": args.other,
        "steps": args.steps,
        "seeds": args.seeds,
        "val_scenes": args.val,
        "rows": rows,
        "seconds": time.perf_counter() - start,
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }
    write_record(out / "dense_fve.json", result, sort_keys=False, indent=2)
    text = report(result)
    write_report(out / "dense_fve.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
