"""The light core and its extras: optional packages are imported where a feature needs them, and a missing one is
one line naming ``pip install "pdevision[EXTRA]"``, in Python and on the command line; the package metadata
(extras, pins, description) is consistent. The wheel installed into a fresh environment is the slow test at the end.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from pdevision._optional import DISTRIBUTIONS, EXTRAS, MissingDependencyError, install_hint, require, require_all

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "pdevision"
RUNTIME_EXTRAS = ("train", "data", "dense", "restore", "viz", "robustness")


def block(monkeypatch: pytest.MonkeyPatch, top: str) -> None:
    """Make ``top`` (and its submodules) look not installed: ``import`` of it raises ModuleNotFoundError."""
    for name in list(sys.modules):
        if name == top or name.startswith(top + "."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, top, None)


def hint(top: str, extra: str) -> str:
    return f'{DISTRIBUTIONS[top]} is not installed; run: pip install "pdevision[{extra}]"'


# -- the helper --------------------------------------------------------------------------------------


def test_require_gives_the_module_or_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib

    assert require("matplotlib", "viz") is matplotlib
    block(monkeypatch, "bm3d")
    with pytest.raises(MissingDependencyError) as info:
        require("bm3d", "restore")
    assert str(info.value) == 'bm3d is not installed; run: pip install "pdevision[restore]"'
    assert isinstance(info.value, ImportError) and info.value.name == "bm3d"
    block(monkeypatch, "skimage")
    with pytest.raises(MissingDependencyError, match=re.escape(hint("skimage", "data"))):
        require("skimage.data", "data")  # a submodule: the package's name, the extra given


def test_require_all_checks_without_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    was_loaded = "bm3d" in sys.modules
    require_all([("bm3d", "restore"), ("webdataset", "data")])
    assert was_loaded or "bm3d" not in sys.modules  # found, not imported (it is slow to import)
    block(monkeypatch, "webdataset")
    with pytest.raises(MissingDependencyError, match=re.escape(hint("webdataset", "data"))):
        require_all([("bm3d", "restore"), ("webdataset", "data")])


def test_a_broken_install_is_not_reported_as_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An installed package whose own import fails keeps its error: the hint would send the user the wrong way."""
    (tmp_path / "webdataset").mkdir()
    (tmp_path / "webdataset" / "__init__.py").write_text("import pdevision_test_no_such_dependency\n")
    for name in [n for n in sys.modules if n == "webdataset" or n.startswith("webdataset.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as info:
        require("webdataset", "data")
    assert not isinstance(info.value, MissingDependencyError)
    assert info.value.name == "pdevision_test_no_such_dependency"


def test_unknown_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown extra 'dens'"):
        install_hint("pycocotools", "dens")
    with pytest.raises(ValueError, match="'json' is not an optional dependency"):
        require("json", "data")


# -- each extra through the Python API -------------------------------------------------------------


def _digits() -> object:
    from pdevision.data import DigitsDataset

    return DigitsDataset("train")


def _split() -> object:
    from pdevision.data import stratified_split

    return stratified_split([0, 1] * 10, 0.2)


def _shards() -> object:
    from pdevision.data.shards import ShardDataset

    return ShardDataset([], [], 0)


def _segmentation() -> object:
    from pdevision.models.dense import create_segmentation_model

    return create_segmentation_model("vheat_micro", num_classes=3)


def _coco(tmp_path: Path) -> object:
    from pdevision.data.dense import CocoDetection

    return CocoDetection(tmp_path)


def _detect_train(tmp_path: Path) -> object:
    from pdevision.tasks import detect
    from pdevision.tasks.dense import DenseConfig
    from tests.helpers import make

    return detect.train(make(DenseConfig, output=str(tmp_path / "run")))


def _psnr() -> object:
    from pdevision.data.restoration import psnr

    return psnr(np.zeros((8, 8, 1)), np.ones((8, 8, 1)))


def _bm3d() -> object:
    from pdevision.data.restoration import Degradation, classical_baselines

    img = np.full((16, 16, 1), 0.5)
    return classical_baselines(img, img, Degradation(), which=["bm3d"])


def _gradcam() -> object:
    from pdevision.viz.gradcam import gradcam

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    return gradcam(model, model[0], torch.zeros(1, 3, 8, 8), [0], reshape_transform=None)


def _viz_photos() -> object:
    from pdevision.viz.common import photo_images

    return photo_images(lambda img: img, 1)


def _corrupt() -> object:
    from pdevision.data.corruptions import corrupt

    return corrupt(np.zeros((32, 32, 3), np.uint8), "gaussian_noise", 1)


API_CASES = [  # (extra, the missing package, a feature of that extra)
    ("train", "sklearn", lambda tmp: _split()),
    ("data", "sklearn", lambda tmp: _digits()),
    ("data", "webdataset", lambda tmp: _shards()),
    ("dense", "segmentation_models_pytorch", lambda tmp: _segmentation()),
    ("dense", "pycocotools", _coco),
    ("dense", "torchmetrics", _detect_train),
    ("restore", "skimage", lambda tmp: _psnr()),
    ("restore", "bm3d", lambda tmp: _bm3d()),
    ("viz", "pytorch_grad_cam", lambda tmp: _gradcam()),
    ("viz", "skimage", lambda tmp: _viz_photos()),
    ("robustness", "imagecorruptions", lambda tmp: _corrupt()),
]


@pytest.mark.parametrize(("extra", "top", "feature"), API_CASES, ids=[f"{e}-{t}" for e, t, _ in API_CASES])
def test_a_missing_package_names_its_extra_in_python(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, extra: str, top: str, feature
) -> None:
    block(monkeypatch, top)
    with pytest.raises(MissingDependencyError) as info:
        feature(tmp_path)
    assert str(info.value) == hint(top, extra)
    assert not (tmp_path / "run").exists()  # a run stops before it writes anything


def test_every_runtime_extra_has_a_python_case() -> None:
    assert {e for e, _, _ in API_CASES} == set(RUNTIME_EXTRAS) == set(EXTRAS) - {"all"}


# -- each extra through the command line ------------------------------------------------------------


def _classifier_checkpoint(root: Path) -> Path:
    from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    from pdevision.engine.modeling import create_model
    from pdevision.engine.save import save_checkpoint

    model = create_model("vheat_micro", num_classes=10, img_size=32)
    meta = {
        "model": "vheat_micro",
        "classes": [str(c) for c in range(10)],
        "img_size": 32,
        "model_args": {"img_size": 32},
        "mean": list(IMAGENET_DEFAULT_MEAN),
        "std": list(IMAGENET_DEFAULT_STD),
    }
    return save_checkpoint(root, "best", model, meta)


CLI_CASES = [  # (extra, the missing package, the command; {tmp}: a fresh folder, {ckpt}: a classifier checkpoint)
    ("data", "skimage", ["demo"]),
    ("data", "sklearn", ["train", "--output", "{tmp}/run"]),  # the embedded digits (a folder needs none)
    ("train", "matplotlib", ["train", "--task", "pretrain", "--output", "{tmp}/run"]),
    ("dense", "segmentation_models_pytorch", ["train", "--task", "segment", "--output", "{tmp}/run"]),
    ("dense", "torchmetrics", ["train", "--task", "detect", "--output", "{tmp}/run"]),
    ("restore", "skimage", ["train", "--task", "denoise", "--output", "{tmp}/run"]),
    ("viz", "pytorch_grad_cam", ["viz", "gradcam", "--checkpoint", "{ckpt}", "--output", "{tmp}/run"]),
    ("viz", "matplotlib", ["bench", "--out", "{tmp}/run"]),
    ("robustness", "imagecorruptions", ["eval", "--checkpoint", "{ckpt}", "--corruptions", "--output", "{tmp}/run"]),
]


@pytest.mark.parametrize(("extra", "top", "argv"), CLI_CASES, ids=[f"{e}-{a[0]}-{t}" for e, t, a in CLI_CASES])
def test_a_missing_package_is_one_line_on_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: str, top: str, argv
) -> None:
    from tests.helpers import exit_code

    ckpt = _classifier_checkpoint(tmp_path / "ckpt") if "{ckpt}" in argv else None
    argv = [a.format(tmp=tmp_path, ckpt=ckpt) for a in argv]
    capsys.readouterr()
    block(monkeypatch, top)
    assert exit_code(argv) == 2
    err = capsys.readouterr().err
    assert err == f"pdevision {argv[0]}: error: {hint(top, extra)}\n"
    assert not (tmp_path / "run").exists()


def test_every_runtime_extra_has_a_command_line_case() -> None:
    assert {e for e, _, _ in CLI_CASES} == set(RUNTIME_EXTRAS)


# -- the core alone ---------------------------------------------------------------------------------

CORE_ONLY = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None  # as if not installed
import timm, torch
import pdevision, pdevision.cli
parser = pdevision.cli.build_parser()
for name in ("vheat_micro", "waveformer_micro", "hcnet_micro", "pderesnet_micro"):
    model = timm.create_model(name, num_classes=5).eval()
    with torch.no_grad():
        out = model(torch.randn(1, 3, 64, 48))
    assert out.shape == (1, 5) and bool(torch.isfinite(out).all()), name
print("core ok")
"""


def test_the_library_and_every_family_need_only_the_core() -> None:
    """``import pdevision``, the command line's parser and a forward of each family with every optional package
    (and scipy, a test-only reference, and ``fcntl``, which Windows has not) made unimportable: nothing imports
    them at module level."""
    blocked = [*DISTRIBUTIONS, "scipy", "fcntl"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-c", CORE_ONLY.format(blocked=blocked)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "core ok"


def _module_level_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.partition(".")[0])
    return found


def test_no_optional_package_is_imported_at_module_level() -> None:
    offenders = {
        str(p.relative_to(ROOT)): sorted(_module_level_imports(p) & {*DISTRIBUTIONS, "scipy"})
        for p in sorted(SRC.rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


# -- the metadata -----------------------------------------------------------------------------------


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def _extra(name: str) -> set[str]:
    """The distributions ``pdevision[name]`` installs, its references to other extras followed."""
    out: set[str] = set()
    for req in _pyproject()["project"]["optional-dependencies"][name]:
        nested = re.fullmatch(r"pdevision\[([a-z,]+)\]", req)
        if nested:
            for sub in nested[1].split(","):
                out |= _extra(sub)
        else:
            out |= _names([req])
    return out


def _needs_in_source() -> set[tuple[str, str, str]]:
    """Every ``("module", "extra")`` the library names (``require`` calls, ``REQUIRES`` tuples), with its file."""
    pattern = re.compile(r"\(\s*\"([a-z_][a-z0-9_.]*)\",\s*\"(" + "|".join(EXTRAS) + r")\"\s*\)")
    found = {(m, e, str(p.relative_to(ROOT))) for p in SRC.rglob("*.py") for m, e in pattern.findall(p.read_text())}
    return {n for n in found if n[0].partition(".")[0] in DISTRIBUTIONS}


def test_each_named_extra_installs_the_package() -> None:
    needs = _needs_in_source()
    assert len(needs) >= 20  # the scan finds the call sites
    wrong = [
        (file, module, extra)
        for module, extra, file in sorted(needs)
        if DISTRIBUTIONS[module.partition(".")[0]].lower() not in _extra(extra)
    ]
    assert wrong == []


def test_the_core_is_light_and_all_is_every_extra() -> None:
    pyproject = _pyproject()
    core = _names(pyproject["project"]["dependencies"])
    assert core == {"torch", "torchvision", "timm", "numpy", "safetensors", "pillow", "tqdm", "pyyaml", "filelock"}
    assert not core & {d.lower() for d in DISTRIBUTIONS.values()}
    deps = pyproject["project"]["dependencies"]
    assert not [d for d in deps if re.match(r"torch(vision)?\s*==", d)]  # ranges here, exact pins in constraints.txt
    assert _extra("all") == set().union(*(_extra(e) for e in RUNTIME_EXTRAS))
    assert {d.lower() for d in DISTRIBUTIONS.values()} <= _extra("all")
    assert set(pyproject["project"]["optional-dependencies"]) >= {*RUNTIME_EXTRAS, "all", "test"}
    pins = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^torch==\d", pins, re.M) and re.search(r"^torchvision==\d", pins, re.M)
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()


def _setup_module() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("pdevision_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_package_description_has_absolute_links_only() -> None:
    setup = _setup_module()
    readme = (ROOT / "README.md").read_text()
    text = setup.absolute_links(readme)
    targets = re.findall(r"\]\(([^)\s]+)", text) + re.findall(r"\b(?:src|href)=\"([^\"]+)\"", text)
    relative = [t for t in targets if not re.match(r"^(https?:|mailto:|#)", t)]
    assert relative == []
    assert len(text.splitlines()) == len(readme.splitlines())
    sample = textwrap.dedent(
        """\
        ![curve](benchmarks/a.png) [table](./benchmarks/b.md) [up](#install) [ext](https://x.org/y)
        [![badge](img/b.svg)](docs/c.md) <img src="d/e.png" width="9"> `f[0](x)`
        ```python
        g[1](y)
        ```
        """
    )
    base = setup.REPOSITORY
    assert setup.absolute_links(sample) == textwrap.dedent(
        f"""\
        ![curve]({base}/raw/main/benchmarks/a.png) [table]({base}/blob/main/benchmarks/b.md) [up](#install) \
[ext](https://x.org/y)
        [![badge]({base}/raw/main/img/b.svg)]({base}/blob/main/docs/c.md) <img src="{base}/raw/main/d/e.png" \
width="9"> `f[0](x)`
        ```python
        g[1](y)
        ```
        """
    )
    assert base == _pyproject()["project"]["urls"]["Source"]


def test_py_typed_is_package_data() -> None:
    assert (SRC / "py.typed").is_file()
    assert "py.typed" in _pyproject()["tool"]["setuptools"]["package-data"]["pdevision"]


# -- the wheel in a fresh environment ---------------------------------------------------------------

FRESH = """
import sys, time
start = time.perf_counter()
import timm, torch, pdevision
model = timm.create_model("vheat_micro").eval()
with torch.no_grad():
    out = model(torch.randn(1, 3, 64, 64))
assert out.shape == (1, 1000) and bool(torch.isfinite(out).all())
optional = [m for m in {optional!r} if m in sys.modules]
assert optional == [], optional
from pdevision._optional import MissingDependencyError
from pdevision.data.restoration import psnr
try:
    psnr(__import__("numpy").zeros((8, 8, 1)), __import__("numpy").ones((8, 8, 1)))
except MissingDependencyError as exc:
    print(exc)
print(f"forward ok in {{time.perf_counter() - start:.1f}} s")
"""


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_wheel_installs_with_the_core_alone(tmp_path: Path) -> None:
    """Build the wheel, install it with the core only (torch and torchvision as constraints.txt pins them) into a
    new virtual environment, run a vheat_micro forward there, and see an extra's feature name its install."""
    started = time.perf_counter()
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    shutil.rmtree(ROOT / "build", ignore_errors=True)
    (wheel,) = dist.glob("pdevision-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(wheel)],
        capture_output=True,
        text=True,
        timeout=2400,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    installed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout.lower()
    for dist_name in DISTRIBUTIONS.values():
        assert f"\n{dist_name.lower()}==" not in "\n" + installed, f"{dist_name} came with the core"
    run = subprocess.run(
        [str(python), "-c", FRESH.format(optional=[*DISTRIBUTIONS, "scipy"])],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # not the source tree: the installed package is imported
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0] == 'scikit-image is not installed; run: pip install "pdevision[restore]"'
    assert lines[1].startswith("forward ok")
    cli = subprocess.run([str(venv / "bin" / "pdevision"), "demo"], capture_output=True, text=True, timeout=600)
    assert cli.returncode == 2
    assert cli.stderr == 'pdevision demo: error: scikit-image is not installed; run: pip install "pdevision[data]"\n'
    print(f"wheel built, installed (core only) and run in {time.perf_counter() - started:.0f} s")


def test_the_train_extra_holds_tensorboard() -> None:
    """A ``[train]`` install writes the loop's TensorBoard events; the core reads ``train --config args.yaml``."""
    assert "tensorboard" in _extra("train") and "pyyaml" in _names(_pyproject()["project"]["dependencies"])
    assert "tensorboard" in (SRC / "engine" / "loop.py").read_text()  # the loop's writer, which the extra feeds
