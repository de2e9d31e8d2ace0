"""A paused rank: the waiting rank warns after a set time, and the process group's timeout ends the run
with a clear error instead of waiting forever (issue 16, defect 14). Two gloo processes on the CPU."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

RANK_SCRIPT = r"""
import logging, os, sys, time
import torch
from pdevision.engine.distributed import DistributedTimeoutError, all_reduce_sum, exit_after_timeout, init_distributed
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
info = init_distributed("cpu", timeout_s=3.0, warn_after_s=0.5)
assert info.timeout_s == 3.0
rank = info.rank
if rank == 1:
    time.sleep(1.5)  # a short pause: rank 0 warns, then the sum completes
total = all_reduce_sum([rank + 1.0], info, torch.device("cpu"))
print(f"rank {rank} sum {total[0]}", flush=True)
if rank == 1:
    time.sleep(30)  # paused for good: rank 0 must give up after its 3 s timeout
    sys.exit(0)
start = time.monotonic()
try:
    all_reduce_sum([1.0], info, torch.device("cpu"))
except DistributedTimeoutError as exc:
    print(f"rank 0 stopped after {time.monotonic() - start:.1f} s: {exc}")
    exit_after_timeout(3)  # as the CLI does
sys.exit(0)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two processes importing torch: 10-30 s on a loaded 2-core machine
def test_paused_rank_warns_then_times_out(tmp_path: Path) -> None:
    base = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    base["MASTER_PORT"] = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_SCRIPT],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    try:
        out0, err0 = procs[0].communicate(timeout=25)  # rank 1 sleeps 30 s: rank 0 must end on its own
    finally:
        procs[1].kill()
        procs[1].communicate()
    assert "rank 0 sum 3.0" in out0, err0[-2000:]
    assert "rank 0: all_reduce has waited 0.5 s for the other ranks" in err0, err0[-2000:]
    assert procs[0].returncode == 3, (out0, err0[-2000:])
    line = next(ln for ln in out0.splitlines() if ln.startswith("rank 0 stopped after"))
    seconds = float(line.split("after ")[1].split(" s")[0])
    assert 2.5 <= seconds <= 30.0  # the 3 s timeout, not the 30 s pause
    assert "process-group timeout 3 s" in line and "a rank stopped or died" in line


@pytest.mark.parametrize(("variable", "value"), [("PDEVISION_DIST_TIMEOUT_S", "-1"), ("PDEVISION_DIST_WARN_S", "x")])
def test_bad_timeout_settings_are_refused(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> None:
    from pdevision.engine.distributed import init_distributed

    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=variable):
        init_distributed("cpu")


def test_single_process_carries_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from pdevision.engine.distributed import init_distributed

    monkeypatch.setenv("PDEVISION_DIST_TIMEOUT_S", "42")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    info = init_distributed("cpu")
    assert not info.enabled and info.timeout_s == 42.0


DDP_SCRIPT = r"""
import os, sys
import torch
import pdevision.engine.loop as loop
from pdevision.engine import RunConfig, Task, fit

if os.environ.get("KEEP_LAYOUT"):  # the loop as it was: parameters left in the layout they were built with
    loop.match_gradient_layout = lambda model: 0


class Toy(Task):
    name, best_metric, higher_is_better = "toy", "loss", False

    def datasets(self):
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(16, 4, 6, 6, generator=g), torch.randint(0, 3, (16,), generator=g)
        return torch.utils.data.TensorDataset(x, y), None

    def create_model(self):  # a depthwise convolution: its weight is both NCHW- and NHWC-contiguous
        return torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, groups=4), torch.nn.Flatten(), torch.nn.Linear(64, 3))

    def train_step(self, model, batch):  # a channels-last input, as vHeat's mixers give their convolutions
        x, y = batch
        return torch.nn.functional.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y), {}

    def evaluate(self, model, ctx):
        return {}

    def checkpoint_meta(self):
        return {"model": "toy"}


summary = fit(Toy(), RunConfig(output=sys.argv[1], epochs=1, batch_size=4, lr=0.01, device="cpu", progress=False))
print("identical", summary["ranks_identical"], flush=True)
"""


@pytest.mark.parametrize("keep_layout", [False, True])
def test_ddp_gives_no_grad_stride_warning(tmp_path: Path, keep_layout: bool) -> None:
    """Two gloo ranks train a model with a depthwise convolution: no "Grad strides do not match bucket view
    strides" warning (issue 55); with the parameters left as built, the warning is there (the test can fail)."""
    base = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    base["MASTER_PORT"] = str(_free_port())
    if keep_layout:
        base["KEEP_LAYOUT"] = "1"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DDP_SCRIPT, str(tmp_path / "run")],
            env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outputs]
    assert all("identical True" in out for out, _ in outputs)
    warned = ["Grad strides do not match bucket view strides" in err for _, err in outputs]
    assert warned == ([True, True] if keep_layout else [False, False])
