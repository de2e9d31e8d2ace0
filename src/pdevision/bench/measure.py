"""Timing and memory measurements: interleaved, warmed up, median of repeats.

Throughput is measured for several models in one process, each repeat running every model once in
turn (interleaved), so slow drifts of the machine (turbo, other load) hit all models alike. Peak
memory of a forward pass is measured in a fresh process per model: on the CPU the growth of the
resident set during one forward (freed heap returned to the OS and the peak mark reset before each
size), on a GPU the allocator's statistics.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from pdevision.bench.models import create_for_bench
from pdevision.fastpath.kernels import fused_optimizer_supported, onednn_available, onednn_mm
from pdevision.ops.dct import tally_fft_flops

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def steady_allocator() -> bool:
    """Keep the memory a forward pass frees inside the process (glibc only; the process-wide ``mallopt``), so that
    every timed forward runs on memory already mapped instead of page-faulting fresh allocations in. By default
    glibc serves large blocks with ``mmap`` and returns freed memory to the system, with thresholds that adapt to
    the process's allocation history: on the development machine the same model's bf16 throughput then differed
    by up to 1.3x between bench runs, depending on the models measured before it. Returns whether it took
    effect (not glibc: ``False``, the allocator as it is)."""
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    # blocks up to glibc's largest mmap threshold (32 MiB on 64-bit) come from the heap; the heap is never trimmed
    return all(
        mallopt(param, value)
        for param, value in ((_M_MMAP_THRESHOLD, 32 * 2**20), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 64 * 2**20))
    )


def machine_description(device: torch.device) -> dict[str, Any]:
    """CPU model, core count, threads, torch version (and the GPU name on CUDA)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    desc = {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": str(device),
    }
    if device.type == "cuda":
        desc["gpu"] = torch.cuda.get_device_name(device)
    return desc


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_gflops(device: torch.device, n: int = 1024, repeats: int = 7, dtype: torch.dtype = torch.float32) -> float:
    """The machine's measured matrix-multiply rate (GFLOP/s, median of ``repeats``) for ``n x n`` operands."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        a @ b
        _sync(device)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def onednn_matmul_gflops(n: int = 1024, repeats: int = 7, dtype: torch.dtype = torch.float32) -> float | None:
    """The CPU's matrix-multiply rate through oneDNN (the library of PyTorch's CPU convolutions and of the fused
    inference kernels), GFLOP/s for ``n x n`` operands; ``None`` where oneDNN is not available."""

    if not onednn_available(dtype):
        return None
    a = torch.randn(n, n, dtype=dtype)
    b = torch.randn(n, n, dtype=dtype)
    for _ in range(2):
        onednn_mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        onednn_mm(a, b)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def interleaved_medians(
    fns: dict[str, Callable[[], Any]], device: torch.device, repeats: int = 5, warmup: int = 1
) -> dict[str, dict[str, float]]:
    """Run each function ``warmup`` times, then ``repeats`` rounds of all functions in turn; return
    the median and the min/max seconds of each."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
            _sync(device)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {
        k: {"median": statistics.median(v), "min": min(v), "max": max(v), "repeats": len(v)} for k, v in times.items()
    }


def inference_fn(model: nn.Module, x: torch.Tensor, dtype: torch.dtype | None = None) -> Callable[[], Any]:
    """One eval-mode forward under ``torch.inference_mode`` (autocast to ``dtype`` if given)."""

    def run() -> Any:
        with torch.inference_mode(), torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None):
            return model(x)

    return run


def train_step_fn(model: nn.Module, x: torch.Tensor, dtype: torch.dtype | None = None) -> Callable[[], Any]:
    """One training step: forward, cross-entropy, backward, AdamW step (fused where PyTorch has the fused update
    for the device, as the training loop uses it)."""

    fused = fused_optimizer_supported(model.parameters()) or None
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused)
    target = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)

    def run() -> Any:
        with torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None):
            loss = nn.functional.cross_entropy(model(x).float(), target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss

    return run


def _rss_status() -> dict[str, int]:
    """Current and peak resident set size of this process (bytes), from /proc/self/status."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":", 1)
                out[key] = int(value.split()[0]) * 1024
    return out


def _release_and_reset_peak() -> int:
    """Return freed heap to the OS, reset the peak-RSS mark (Linux ``clear_refs``), return current RSS."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _rss_status()["VmRSS"]


def probe_model(
    model_name: str, sizes: list[tuple[int, int]], device: torch.device, timeout: float = 900.0
) -> list[dict[str, float]]:
    """For each ``(img_size, batch)``: peak extra memory (MiB) of one inference forward and the MACs
    per image (``count_macs`` of that forward, FFT work included). Runs in a fresh process per model."""
    cmd = [
        sys.executable,
        "-m",
        "pdevision.bench.measure",
        json.dumps({"model": model_name, "sizes": sizes, "device": str(device)}),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if out.returncode != 0:
        lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
        raise RuntimeError(f"probe of {model_name} failed: {lines[-1] if lines else f'exit code {out.returncode}'}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def macs_and_peak_memory(model: Any, first: Any, inputs: Any, device: torch.device) -> tuple[float, int]:
    """MACs of ``model(first)`` (PyTorch's flop counter plus the FFT tally of the DCTs; this call also warms the
    caches) and the peak memory growth in bytes of ``model(inputs)`` (CUDA allocator peak, or the resident-set
    high-water mark on the CPU). Run in a fresh process for a clean RSS reading."""
    from torch.utils.flop_counter import FlopCounterMode

    # parameters frozen for the count: the counter's module tracker hooks the gradient of every input that requires
    # one, and a parameter handed on as an input (pdeformer's mixers pass their frequency embedding to the operator)
    # has no gradient function under inference mode ('NoneType' object has no attribute 'next_functions')
    trainable = [p for p in model.parameters() if p.requires_grad]
    try:
        for p in trainable:
            p.requires_grad_(False)
        with torch.inference_mode(), tally_fft_flops() as fft, FlopCounterMode(display=False) as counter:
            model(first)
    finally:
        for p in trainable:
            p.requires_grad_(True)
    macs = (counter.get_total_flops() + fft[0]) / 2
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        with torch.inference_mode():
            model(inputs)
        torch.cuda.synchronize(device)
        return macs, torch.cuda.max_memory_allocated(device) - base
    base = _release_and_reset_peak()
    with torch.inference_mode():
        model(inputs)
    return macs, _rss_status()["VmHWM"] - base


def _probe(args: dict[str, Any]) -> list[dict[str, float]]:

    device = torch.device(args["device"])
    results = []
    for img_size, batch in args["sizes"]:
        model = create_for_bench(args["model"], img_size, device)
        x = torch.randn(batch, 3, img_size, img_size, device=device)
        macs, peak = macs_and_peak_memory(model, x[:1], x, device)  # MACs of one image, memory of the batch
        results.append({"img_size": img_size, "batch": batch, "peak_mib": peak / 2**20, "macs": macs})
        del model, x
    return results


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    print(json.dumps(_probe(json.loads(sys.argv[1]))))
