"""Token-mixer microbenchmark: heat conduction (matrix DCT, FFT) and wave propagation against global and window
attention.

All operators mix a ``(1, H, W, C)`` map at equal width ``C``; the exponent ``p`` of
``time ~ tokens^p`` is fitted by least squares on log-log points.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pdevision.bench.measure import interleaved_medians
from pdevision.layers.hco import HeatConductionOperator
from pdevision.layers.spectral import SpectralOperator
from pdevision.layers.wave import WavePropagationOperator


class GlobalAttention(nn.Module):
    """Softmax attention over all tokens (``scaled_dot_product_attention``), as in ViT/DeiT. NHWC in/out."""

    def __init__(self, dim: int, heads: int = 3) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        qkv = self.qkv(x.reshape(b, h * w, c)).reshape(b, h * w, 3, self.heads, c // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, h, w, c)
        return self.proj(out)


class WindowAttention(nn.Module):
    """Softmax attention inside non-overlapping ``window x window`` windows (Swin), padding as needed."""

    def __init__(self, dim: int, heads: int = 3, window: int = 7) -> None:
        super().__init__()
        self.heads, self.window = heads, window
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        ws = self.window
        ph, pw = (-h) % ws, (-w) % ws
        x = F.pad(x, (0, 0, 0, pw, 0, ph))
        hp, wp = h + ph, w + pw
        win = x.reshape(b, hp // ws, ws, wp // ws, ws, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, ws * ws, c)
        qkv = self.qkv(win).reshape(win.shape[0], ws * ws, 3, self.heads, c // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(-1, ws * ws, c)
        out = self.proj(out).reshape(b, hp // ws, wp // ws, ws, ws, c).permute(0, 1, 3, 2, 4, 5)
        return out.reshape(b, hp, wp, c)[:, :h, :w]


def _folded_hco(dim: int, size: int, method: str, cls: type[SpectralOperator] = HeatConductionOperator) -> nn.Module:
    op = cls(dim, dct_method=method)  # type: ignore[call-arg]
    op.fold(torch.randn(size, size, dim) * 0.02)
    return op.eval()


def fit_exponent(tokens: list[int], seconds: list[float]) -> float:
    """Slope of ``log(seconds)`` against ``log(tokens)``."""
    return float(np.polyfit(np.log(tokens), np.log(seconds), 1)[0])


def operator_benchmark(
    sides: tuple[int, ...] = (14, 28, 56, 112, 160, 256),
    dim: int = 96,
    repeats: int = 5,
    device: torch.device | None = None,
    global_attention_max_tokens: int = 12544,
) -> dict[str, Any]:
    """Seconds per call of each operator at each map size, and the fitted exponents.

    Global attention is skipped above ``global_attention_max_tokens`` (quadratic: 65,536 tokens
    would take minutes on a small CPU); its exponent is fitted on the sizes it ran.
    """
    device = device or torch.device("cpu")
    rows: list[dict[str, Any]] = []
    for side in sides:
        tokens = side * side
        x = torch.randn(1, side, side, dim, device=device)
        ops: dict[str, nn.Module] = {
            "hco_matrix": _folded_hco(dim, side, "matrix"),
            "hco_fft": _folded_hco(dim, side, "fft"),
            "wave_matrix": _folded_hco(dim, side, "matrix", WavePropagationOperator),
            "window_attention_7x7": WindowAttention(dim),
        }
        if tokens <= global_attention_max_tokens:
            ops["global_attention"] = GlobalAttention(dim)
        fns = {}
        for name, op in ops.items():
            op.to(device).eval()

            def run(op: nn.Module = op, x: torch.Tensor = x) -> torch.Tensor:
                with torch.inference_mode():
                    return op(x)

            fns[name] = run
        times = interleaved_medians(fns, device, repeats=repeats)
        for name, t in times.items():
            rows.append({"operator": name, "side": side, "tokens": tokens, "seconds": t["median"]})
    exponents = {}
    for name in sorted({r["operator"] for r in rows}):
        pts = [r for r in rows if r["operator"] == name]
        exponents[name] = fit_exponent([r["tokens"] for r in pts], [r["seconds"] for r in pts])
    best = {}
    for side in sides:
        at = {r["operator"]: r["seconds"] for r in rows if r["side"] == side}
        best[side] = min(("hco_matrix", "hco_fft"), key=lambda k: at[k])
    return {"rows": rows, "exponents": exponents, "faster_hco": best, "dim": dim, "repeats": repeats}


def tokens_label(tokens: int) -> str:
    side = math.isqrt(tokens)
    return f"{side}x{side}" if side * side == tokens else str(tokens)
