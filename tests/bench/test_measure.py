"""``pdevision.bench.measure``: the machine's rates, and the private torch ops it reaches only through the fast path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import pdevision
from pdevision.bench.measure import machine_description, onednn_matmul_gflops
from pdevision.fastpath.kernels import onednn_available


def test_only_the_fast_path_kernels_call_private_torch_ops() -> None:
    """``fastpath/kernels.py`` says it is the only caller of private torch ops: no other module names one."""
    src = Path(pdevision.__file__).resolve().parent
    callers = sorted(
        str(p.relative_to(src)) for p in src.rglob("*.py") if re.search(r"torch\.ops\.\w+\._", p.read_text())
    )
    assert callers == ["fastpath/kernels.py"]


@pytest.mark.skipif(not onednn_available(), reason="PyTorch built without oneDNN")
def test_the_onednn_rate_is_measured_through_the_kernels() -> None:
    assert onednn_matmul_gflops(n=64, repeats=1) > 0


def test_the_machine_is_described_with_its_cpu_cores_and_torch() -> None:
    desc = machine_description(torch.device("cpu"))
    assert desc["cores"] >= 1 and desc["threads"] >= 1 and desc["torch"] == torch.__version__ and desc["cpu"]
