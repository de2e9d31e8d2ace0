"""CI step: the declared floor of timm holds. Downloads the oldest timm that pyproject.toml allows (``timm>=X``:
exactly X, through pip, no dependencies), puts it ahead of the installed one on the path of a fresh Python, and there
builds a model of each family, runs a forward at an odd size, ``forward_intermediates`` and ``features_only``.
timm is pure Python, so its floor is checked this way against the installed torch; torch's and torchvision's floors
(binary wheels of a gigabyte) are not checked by this script.

Run: ``python .ci/check_floors.py`` (``--wheel-dir DIR``: a folder that already holds the wheel, e.g. offline)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro", "pdeformer_micro")
CHECK = """
import timm, torch, pdevision
assert timm.__version__ == {version!r}, (timm.__version__, timm.__file__)
for name in {families!r}:
    model = timm.create_model(name, num_classes=5).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 67, 45))
        feats = model.forward_intermediates(torch.randn(1, 3, 64, 64), intermediates_only=True)
        maps = timm.create_model(name, features_only=True).eval()(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 5) and bool(torch.isfinite(out).all()), name
    assert len(feats) == len(maps) >= 3, (name, len(feats), len(maps))
    print(f"timm {{timm.__version__}}: {{name}} ok ({{len(feats)}} stages)")
"""


def timm_floor() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dep in deps:
        found = re.match(r"timm\s*>=\s*([0-9][0-9.]*)", dep)
        if found:
            return found[1]
    raise SystemExit("pyproject.toml declares no floor of timm (timm>=X)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel-dir", type=Path, default=None, help="a folder holding timm-X-py3-none-any.whl")
    parser.add_argument("--version", default=None, help="check this timm instead of the declared floor")
    args = parser.parse_args()
    version = args.version or timm_floor()
    with tempfile.TemporaryDirectory() as tmp:
        wheels = args.wheel_dir or Path(tmp) / "wheels"
        wheel = wheels / f"timm-{version}-py3-none-any.whl"
        if not wheel.is_file():
            pip = [sys.executable, "-m", "pip", "download", f"timm=={version}", "--no-deps", "-q", "-d", str(wheels)]
            subprocess.run(pip, check=True)
        site = Path(tmp) / "site"
        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])}
        code = CHECK.format(version=version, families=FAMILIES)
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    print(result.stdout, end="")
    if result.returncode != 0:
        print(f"timm {version} fails:\n{result.stderr[-2000:]}", file=sys.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
