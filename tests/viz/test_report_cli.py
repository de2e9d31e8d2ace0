"""``viz report`` on a tiny recorded run (links only files that exist), and the CLI's subcommands and errors."""

from __future__ import annotations

import contextlib
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from pdevision.cli import main
from pdevision.engine import RunConfig
from pdevision.engine.modeling import create_model
from pdevision.engine.save import save_checkpoint
from pdevision.tasks.classify import ClassifyConfig, train
from tests.viz.figure_checks import record_saved_figures


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("viz") / "run"
    train(
        ClassifyConfig(
            model="pderesnet_micro",
            img_size=32,
            run=RunConfig(output=str(out), epochs=1, batch_size=32, max_train_batches=2, progress=False),
        )
    )
    return out


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for key, value in attrs:
            if key in ("src", "href") and value:
                self.links.append(value)


@pytest.fixture(scope="module")
def report(run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``viz report`` on the run: its output folder and what the command printed. Made once for the module, outside
    the conftest's per-test figure checks, so they are applied here."""
    out = tmp_path_factory.mktemp("viz") / "report"
    printed = io.StringIO()
    with record_saved_figures() as saved, contextlib.redirect_stdout(printed):
        code = main(["viz", "report", "--checkpoint", str(run), "--output", str(out), "--images", "2", "--steps", "5"])
    assert code == 0
    assert saved and not [p for _, probs in saved for p in probs]
    return out, printed.getvalue()


def test_report_links_only_files_that_exist(report: tuple[Path, str]) -> None:
    out, printed = report
    parser = _Links()
    parser.feed((out / "index.html").read_text())
    assert parser.links
    for link in parser.links:
        assert not link.startswith(("/", "http:", "https:", "file:")), link  # relative, offline
        assert (out / link).is_file(), link
    srcs = {Path(link).name for link in parser.links}
    for expected in (
        "curves.png",
        "confusion_matrix.png",
        "erf.png",
        "gradcam.png",
        "pderesnet_point_response.png",
        "symmetry_weights.png",
        "erf.json",
    ):
        assert expected in srcs
    numbers = json.loads((out / "report.json").read_text())
    assert numbers["family"] == "pderesnet" and numbers["metrics_rows"] == 1
    assert numbers["symmetry_logits_rel_diff"]["group element"] < 1e-4
    assert "figures" in printed


def test_report_shows_figures_at_their_natural_size(report: tuple[Path, str]) -> None:
    """No figure is scaled down by the page (the Grad-CAM figure's 8 pt text was shown at about 7 pt): images are
    not limited to the page's width, and the page's max width holds the widest figure with its border."""
    out, _ = report
    page = (out / "index.html").read_text()
    style = page[page.index("<style>") + 7 : page.index("</style>")]
    max_width = int(re.search(r"body\{[^}]*max-width:(\d+)px", style).group(1))
    img = re.search(r"img\{([^}]*)\}", style).group(1)
    assert "max-width:none" in img and "%" not in img
    border = int(re.search(r"border:(\d+)px", img).group(1))
    parser = _Links()
    parser.feed(page)
    pngs = sorted({link for link in parser.links if link.endswith(".png")})
    assert "gradcam.png" in {Path(p).name for p in pngs}
    for png in pngs:
        with Image.open(out / png) as im:
            assert im.width + 2 * border <= max_width, (png, im.width, max_width)
    with Image.open(out / next(p for p in pngs if p.endswith("gradcam.png"))) as im:
        assert im.width > 1100  # the case this guards: wider than the page's former fixed 1100 px


def test_cli_gradcam_erf_heat_symmetry(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from PIL import Image

    img = tmp_path / "digit.png"
    Image.new("RGB", (40, 40), (200, 10, 10)).save(img)
    assert main(["viz", "gradcam", "--checkpoint", str(run), str(img), "--output", str(tmp_path / "g")]) == 0
    numbers = json.loads((tmp_path / "g" / "gradcam.json").read_text())
    assert numbers["reshape"] == "none" and numbers["captions"] == ["digit.png"]
    args = ["viz", "erf", "--models", "resnet18", "--checkpoint", str(run), "--img-size", "32", "--images", "2"]
    assert main([*args, "--output", str(tmp_path / "e")]) == 0
    erf = json.loads((tmp_path / "e" / "erf.json").read_text())
    assert [m["weights"] for m in erf["models"]] == ["trained, epoch 1", "random init, branches not zeroed"]
    assert "random weights" in capsys.readouterr().out
    assert main(["viz", "heat", "--model", "hcnet_micro", "--img-size", "32", "--images", "2",
                 "--output", str(tmp_path / "h")]) == 0  # fmt: skip
    assert json.loads((tmp_path / "h" / "heat.json").read_text())["weights"] == "random init"
    assert main(["viz", "symmetry", "--checkpoint", str(run / "last"), "--images", "4", "--steps", "3",
                 "--output", str(tmp_path / "s")]) == 0  # fmt: skip
    assert json.loads((tmp_path / "s" / "symmetry.json").read_text())["logits_rel_diff"]["group element"] < 1e-4


def _one_line_error(capsys: pytest.CaptureFixture, code: int, expected: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert code in (1, 2)
    assert err and "Traceback" not in "\n".join(err)
    assert expected in err[-1] and err[-1].startswith("pdevision viz: error:")


def test_cli_bad_input_is_one_line(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["viz", "gradcam", "--checkpoint", str(tmp_path / "missing"), "--output", str(tmp_path / "x")])
    _one_line_error(capsys, code, "no checkpoint")
    bad = tmp_path / "notes.png"
    bad.write_text("not an image")
    code = main(["viz", "gradcam", "--checkpoint", str(run), str(bad), "--output", str(tmp_path / "x")])
    _one_line_error(capsys, code, "cannot read image")
    vheat = tmp_path / "vheat"
    meta = {"model": "vheat_micro", "classes": list("0123456789"), "img_size": 32, "model_args": {"img_size": 32}}
    model = create_model("vheat_micro", num_classes=10, img_size=32)
    save_checkpoint(vheat, "best", model, {**meta, "mean": [0.5] * 3, "std": [0.25] * 3})
    code = main(["viz", "symmetry", "--checkpoint", str(vheat), "--output", str(tmp_path / "x")])
    _one_line_error(capsys, code, "needs a PDE-ResNet")
    code = main(["viz", "heat", "--model", "resnet18", "--output", str(tmp_path / "x")])
    _one_line_error(capsys, code, "vHeat, HcNet and PDE-ResNet")
    code = main(["viz", "erf", "--models", "no_such_net", "--output", str(tmp_path / "x")])
    _one_line_error(capsys, code, "unknown model")
    assert main(["viz"]) == 2
