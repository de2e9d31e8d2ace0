"""Helpers shared by test modules."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn

from pdevision.data.digits import DigitsDataset
from pdevision.layers import DerivativeConv

FIXTURES = Path(__file__).resolve().parent / "fixtures"  # recorded from the authors' code (fixtures/README.md)
# every staged family and HcNet variant, as (model name, model arguments), at the micro size
STAGED_CASES = [
    ("vheat_micro", {}),
    ("waveformer_micro", {}),
    ("hcnet_micro", {}),
    ("hcnet_library_micro", {}),
    ("hcnet_paper_micro", {}),
    ("pderesnet_micro", {}),
]


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """``||a - b|| / ||b||``: how far ``a`` is from the reference ``b``."""
    return ((a - b).norm() / b.norm()).item()


def randomise_bn_and_kernels(module: nn.Module, seed: int = 0, kernel_scale: float = 0.3) -> nn.Module:
    """Random BatchNorm statistics and affine parameters and random derivative kernels, so per-channel
    kernels differ and zero-initialised BatchNorms no longer hide the branches. Returns ``module``."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.3)
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.3)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
            if isinstance(m, DerivativeConv):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * kernel_scale)
    return module


def seeded_input(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """A standard-normal batch from ``seed`` (the same on every machine: the CPU generator)."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def seeded_state(shapes: list[tuple[str, list[int]]], seed: int) -> dict[str, torch.Tensor]:
    """A random state dict with the given names and shapes, drawn in their order from one generator: weights of
    fan-in scale, norm weights near 1, small biases, a larger classifier. The HcNet fixtures record logits of such
    a state for the authors' model (tests/fixtures/make_hcnet_reference.py), so a test can regenerate it."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in shapes:
        noise = torch.randn(shape, generator=gen)
        if name.endswith("bias"):
            state[name] = 0.1 * noise
        elif len(shape) == 1:  # norm weights
            state[name] = 1.0 + 0.2 * noise
        else:  # linear / conv weights: fan-in = input channels (/ groups) x kernel area
            gain = 4.0 if name.startswith("head") else 1.0
            state[name] = noise * gain / math.sqrt(noise[0].numel())
    return state


def make(config_cls: type, **settings: object) -> object:
    """``config_cls`` (a task's configuration) from flat settings: those named like a ``RunConfig`` field go to its
    ``run`` (a test convenience for settings shared by several runs)."""
    import dataclasses

    from pdevision.engine import RunConfig

    run_fields = {f.name for f in dataclasses.fields(RunConfig)}
    run = {k: v for k, v in settings.items() if k in run_fields}
    own = {k: v for k, v in settings.items() if k not in run_fields}
    return config_cls(**own, run=RunConfig(**run))


def count_calls(monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str) -> list[tuple]:
    """The arguments of every call of ``module.name`` from now on (the test's end undoes it): the function is
    replaced by one that records and passes on, in each loaded module that holds it under that name (an import of
    ``from module import name`` too)."""
    original = getattr(module, name)
    calls: list[tuple] = []

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return original(*args, **kwargs)

    for loaded in list(sys.modules.values()):
        if getattr(loaded, "__dict__", {}).get(name) is original:
            monkeypatch.setattr(loaded, name, counted)
    return calls


def exit_code(argv: list[str]) -> int:
    """``pdevision`` with ``argv``: its exit code, whether the parser exits (bad flags) or the command returns."""
    from pdevision.cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def one_line_exit_2(argv: list[object], capsys: pytest.CaptureFixture[str]) -> str:
    """``pdevision`` with ``argv`` (each made a string) refused as a user's error: exit code 2 and one line on stderr
    with no traceback; that line. What was captured before the call is dropped."""
    capsys.readouterr()
    code = exit_code([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, (code, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _bf16_onednn() -> bool:
    import torch

    from pdevision.fastpath.kernels import onednn_available

    return onednn_available(torch.bfloat16)


#: the tests of the fused bfloat16 kernels need a CPU whose oneDNN has a bfloat16 inner product (AVX-512 or AMX);
#: elsewhere the library takes PyTorch's path (``pdevision.fastpath.kernels.compute_dtype`` is ``None``) and they skip
needs_bf16_onednn = pytest.mark.skipif(
    not _bf16_onednn(), reason="this CPU's oneDNN has no bfloat16 inner product (AVX-512 or AMX needed)"
)


def digit_folder(root: Path, per_split: int, img_size: int, class_name: str = "{}") -> Path:
    """An ImageFolder of real digits under ``root``: ``train/`` and ``val/``, each with ``per_split`` images of each of
    the 10 classes, the class folders named by ``class_name.format(label)``."""
    ds = DigitsDataset("val", img_size=img_size)
    count = dict.fromkeys(range(10), 0)
    for i in range(len(ds)):
        img, label = ds[i]
        if count[label] < 2 * per_split:
            folder = root / ("train", "val")[count[label] % 2] / class_name.format(label)
            folder.mkdir(parents=True, exist_ok=True)
            img.save(folder / f"{i}.png")
            count[label] += 1
    return root
