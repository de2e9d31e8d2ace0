"""Models as the benchmark runs them: eval mode, folded for inference at the measured resolution."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pdevision.fastpath import accelerate
from pdevision.models.factory import create_model, fold_for_inference

FUSED = "+fused"  # a peer's name with this suffix: its modules on this library's CPU kernels (fastpath)
COMPILED = "+compiled"  # any model's name with this suffix (last): its folded form through torch.compile

DEFAULT_PEERS: tuple[str, ...] = (
    "swin_tiny_patch4_window7_224",
    "convnext_tiny",
    "deit_small_patch16_224",
    "resnet50",
)
LARGER_PEERS: dict[str, tuple[str, ...]] = {
    "small": ("swin_small_patch4_window7_224", "convnext_small", "deit_base_patch16_224", "resnet101"),
    "base": ("swin_base_patch4_window7_224", "convnext_base", "deit_base_patch16_224", "resnet152"),
}


def fuse_conv_batchnorm(model: nn.Module) -> nn.Module:
    """An eval-mode model with each BatchNorm that follows a convolution folded into it (``torch.fx``'s
    ``optimization.fuse``, a traced copy); the model itself when it has no BatchNorm or does not trace."""
    if not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return model
    from torch.fx.experimental.optimization import fuse

    try:
        return fuse(model)
    except Exception:  # not traceable: measured as it is
        return model


def split_variant(name: str) -> tuple[str, bool]:
    """``"convnext_tiny+fused"`` -> ``("convnext_tiny", True)``: the model name and whether its modules run on
    the same oneDNN kernels as this library's folded models (:func:`pdevision.fastpath.accelerate`). A
    ``+compiled`` suffix (:func:`is_compiled`) is dropped."""
    name = name.removesuffix(COMPILED)
    if name.endswith(FUSED):
        return name[: -len(FUSED)], True
    return name, False


def is_compiled(name: str) -> bool:
    """Whether ``name`` asks for the model through ``torch.compile`` (``"convnext_tiny+compiled"``)."""
    return name.endswith(COMPILED)


def compile_for_inference(model: nn.Module) -> nn.Module:
    """``torch.compile`` (inductor) of an eval-mode model, with its weights frozen as constants so that inductor
    prepacks them for its CPU matrix kernels, as its documentation advises for inference. Static shapes: the bench
    builds one model per size, and a model class seen at a second size would otherwise be recompiled with symbolic
    sizes (which failed for vHeat at 512 px after 224 px). Sets process-wide options of inductor (``freezing``) and
    dynamo (a recompile limit of 64 instead of 8, so that a model class compiled at four sizes in two dtypes is not
    silently run uncompiled): the bench process compiles for inference only. Compiles on the first call."""
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    inductor_config.freezing = True
    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
    return torch.compile(model, dynamic=False)


def create_for_bench(
    name: str,
    img_size: int,
    device: torch.device,
    fold: bool = True,
    train: bool = False,
    model_args: dict[str, Any] | None = None,
) -> nn.Module:
    """The model at ``img_size`` (its native grid for Swin/DeiT/vHeat), folded for inference with
    timm's ``reparameterize_model`` and the model's own ``reparameterize`` (vHeat: decay factors precomputed for
    ``img_size``), PDE-ResNet's BatchNorms folded (``fold_batchnorm``), and this library's models put on the CPU
    kernels (:func:`pdevision.fastpath.accelerate`); a peer's BatchNorms are folded into its convolutions
    (:func:`fuse_conv_batchnorm`), so both sides run without them. A name ending in ``+fused``
    (:func:`split_variant`) is a peer then also put on the kernels, so that a comparison can hold the matrix library
    equal; one ending in ``+compiled`` is the folded model through :func:`compile_for_inference` (inference only).
    With ``train``, every model (ours and the peers) is on the kernels on the CPU, as the training loop builds it.
    ``model_args`` go to the model's constructor (``pdeformer_micro``'s ``mixer``, say)."""
    base, fused = split_variant(name)
    model = create_model(base, img_size=img_size, **(model_args or {})).to(device)
    if train:
        if device.type == "cpu":  # as the training loop does (RunConfig.fused_kernels): float32 products on oneDNN
            accelerate(model)
        return model.train()
    model.eval()
    if not fold:
        return model
    model = _folded(model, img_size, fused)
    return compile_for_inference(model) if is_compiled(name) else model


def _folded(model: nn.Module, img_size: int, fused: bool) -> nn.Module:
    model = fold_for_inference(model, img_size, inplace=True)
    if hasattr(model, "fold_batchnorm"):  # PDE-ResNet's own folding
        model.fold_batchnorm()
        return accelerate(model)
    if hasattr(model, "reparameterize"):  # this library's
        return accelerate(model)
    model = fuse_conv_batchnorm(model)
    return accelerate(model) if fused else model  # after the fx trace, which would bake in the plain path
