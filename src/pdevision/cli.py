"""The ``pdevision`` command."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np
import timm
import torch
from PIL import Image

from pdevision import __version__
from pdevision.bench import count_macs, count_params
from pdevision.models import list_models


def _models_table(img_size: int) -> str:
    rows = [f"| model | params (M) | GMACs at {img_size} (folded) |", "|---|---:|---:|"]
    for name in list_models():
        model = timm.create_model(name)
        rows.append(f"| {name} | {count_params(model) / 1e6:.2f} | {count_macs(model, img_size) / 1e9:.2f} |")
    return "\n".join(rows)


def cmd_models(args: argparse.Namespace) -> int:
    print(_models_table(args.img_size))
    return 0


def _sample_photo(name: str) -> Image.Image:
    import skimage.data

    if not hasattr(skimage.data, name):
        raise SystemExit(f"pdevision: error: scikit-image has no sample photo {name!r} (try 'chelsea', 'astronaut')")
    return Image.fromarray(np.asarray(getattr(skimage.data, name)())).convert("RGB")


def cmd_demo(args: argparse.Namespace) -> int:
    torch.manual_seed(0)
    print(f"pdevision {__version__}: models registered in timm\n")
    print(_models_table(224))
    photo = _sample_photo(args.photo)
    model = timm.create_model(args.model).eval()
    cfg = timm.data.resolve_data_config({}, model=model)
    x = timm.data.create_transform(**cfg)(photo).unsqueeze(0)
    with torch.no_grad():
        start = time.perf_counter()
        logits = model(x)
        elapsed = time.perf_counter() - start
        native = torch.from_numpy(np.array(photo)).permute(2, 0, 1)[None].float() / 255.0
        native = (native - torch.tensor(cfg["mean"])[:, None, None]) / torch.tensor(cfg["std"])[:, None, None]
        feats = model.forward_intermediates(native, intermediates_only=True)
    top = logits.softmax(-1).topk(3)
    print(
        f"\n{args.model} (random weights) on scikit-image's '{args.photo}' photo, "
        f"resized to {tuple(x.shape[-2:])}: logits {tuple(logits.shape)} in {elapsed * 1000:.0f} ms, "
        f"finite: {bool(torch.isfinite(logits).all())}, top-3 class ids {top.indices[0].tolist()}"
    )
    print(
        f"at the photo's own size {tuple(native.shape[-2:])}, stage outputs: "
        + ", ".join(str(tuple(f.shape[1:])) for f in feats)
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pdevision", description="Vision backbones built from partial differential equations."
    )
    parser.add_argument("--version", action="version", version=f"pdevision {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("models", help="list the registered models with parameters and GMACs")
    p.add_argument("--img-size", type=int, default=224, help="resolution for the MAC count (default 224)")
    p.set_defaults(func=cmd_models)
    p = sub.add_parser("demo", help="model table, then one forward pass on a real photo")
    p.add_argument("--model", default="vheat_tiny", choices=list_models(), help="model for the forward pass")
    p.add_argument("--photo", default="chelsea", help="scikit-image sample photo (default: chelsea)")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
