"""One heat-conduction operator before and after the fast-path split, in one process, interleaved (notes.md).

The operator of commit d2054b5 (its fused forward inside ``layers/spectral.py``, kernels in ``ops/fused.py``) is
read from git into a scratch folder and imported beside today's :class:`~pdevision.layers.HeatConductionOperator`
put on the kernels by :func:`pdevision.fastpath.accelerate`. Both get the same weights and are folded for the same
map; each call is one forward of a ``(1, size, size, 96)`` map under bfloat16 autocast without autograd (vHeat-T's
first stage at 1024 px: ``size=256``). Prints whether the outputs are equal bit for bit and the median times.

    python benchmarks/archive/fastpath_split/operator_ab.py [threads] [size] [repeats]
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from pdevision.fastpath import accelerate
from pdevision.layers import HeatConductionOperator

BEFORE = "d2054b5"
ROOT = Path(__file__).resolve().parents[2]
# the old files, with their imports of each other pointed at the scratch copies
OLD_FILES = {
    "old_fused": ("src/pdevision/ops/fused.py", {}),
    "old_spectral": (
        "src/pdevision/layers/spectral.py",
        {"from pdevision.ops import fused": "import old_fused as fused"},
    ),
    "old_hco": ("src/pdevision/layers/hco.py", {"from pdevision.layers.spectral import": "from old_spectral import"}),
}


def old_operator_class(folder: Path) -> type[nn.Module]:
    for name, (path, replace) in OLD_FILES.items():
        text = subprocess.run(["git", "show", f"{BEFORE}:{path}"], cwd=ROOT, check=True, capture_output=True).stdout
        source = text.decode()
        for old, new in replace.items():
            source = source.replace(old, new)
        (folder / f"{name}.py").write_text(source)
        # each old file a module of its own name, so the next one's rewritten import finds it
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return sys.modules["old_hco"].HeatConductionOperator


def forward(op: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return op(x)


def main(threads: int = 2, size: int = 256, repeats: int = 9, dim: int = 96) -> None:
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as folder:
        old_cls = old_operator_class(Path(folder))
        torch.manual_seed(0)
        new = HeatConductionOperator(dim).eval()
        old = old_cls(dim).eval()
        old.load_state_dict(new.state_dict())
        fve = 0.02 * torch.randn(size, size, dim)
        new.fold(fve)
        old.fold(fve)
        new = accelerate(new)
        x = torch.randn(1, size, size, dim)
        print(f"bitwise equal: {torch.equal(forward(old, x), forward(new, x))}")
        times: dict[str, list[float]] = {"before": [], "after": []}
        for r in range(repeats):
            pairs = [("before", old), ("after", new)]
            for side, op in pairs if r % 2 == 0 else pairs[::-1]:
                start = time.perf_counter()
                forward(op, x)
                times[side].append(1e3 * (time.perf_counter() - start))
        for side, values in times.items():
            print(f"{side}: median {statistics.median(values):.1f} ms ({' '.join(f'{v:.0f}' for v in values)})")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:4]))
