"""``pdevision predict`` of a classification checkpoint at batch speed (issue 55): batched results equal one image at
a time, results streamed as JSON Lines, ``--json-out`` written whole at the end, ImageFolder trees with their true
class and a top-1 line, unreadable files reported and counted with exit status 3, ImageNet names, a progress bar
only on a terminal, and hostile input, each one clear line."""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image

from pdevision.cli import main
from pdevision.data import DigitsDataset
from pdevision.data.listing import list_images
from pdevision.engine.modeling import create_model
from pdevision.engine.save import save_checkpoint
from pdevision.tasks.classify import iter_predictions, predict_images
from pdevision.tasks.classify.predict import shown_names

CLASSES = [str(i) for i in range(10)]


def _checkpoint(folder: Path, num_classes: int, classes: list[str]) -> Path:
    model = create_model("vheat_micro", num_classes=num_classes, img_size=32)
    for p in model.parameters():  # away from the near-uniform start, so probabilities differ between images
        p.data.add_(0.05 * torch.randn_like(p))
    cfg = timm.data.resolve_data_config({}, model=model)
    meta = {
        "model": "vheat_micro",
        "img_size": 32,
        "model_args": {"img_size": 32},
        "mean": list(cfg["mean"]),
        "std": list(cfg["std"]),
        "classes": classes,
    }
    save_checkpoint(folder, "best", model, meta)
    return folder


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with a vheat_micro checkpoint for the ten digits at 32 px (weights perturbed, not trained)."""
    return _checkpoint(tmp_path_factory.mktemp("predict") / "run", 10, CLASSES)


@pytest.fixture(scope="module")
def val(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder tree of real digits, ``val/<digit>/<i>.png`` (one per class), of several sizes, and a folder
    ``val/other`` that names no class (2 images)."""
    root = tmp_path_factory.mktemp("tree") / "val"
    ds = DigitsDataset("val", img_size=32)
    count = dict.fromkeys(range(10), 0)
    for i in range(len(ds)):
        img, label = ds[i]
        if count[label] < 1:
            (root / str(label)).mkdir(parents=True, exist_ok=True)
            img.resize((24 + 3 * i % 40, 32 + i % 17)).save(root / str(label) / f"{i}.png")
            count[label] += 1
        if sum(count.values()) == 10:
            break
    (root / "other").mkdir()
    for i in range(2):
        ds[100 + i][0].save(root / "other" / f"x{i}.png")
    return root


def _code(argv: list[str]) -> int:
    try:
        return main([str(a) for a in argv])
    except SystemExit as exc:  # argparse's refusals
        return int(exc.code)


def _no_traceback(err: str) -> None:
    assert "Traceback" not in err and "PDEVISION_TRACEBACK" not in err, err


# -- batched = one at a time -----------------------------------------------------------------------------------------


def test_batched_results_equal_one_image_at_a_time(run: Path, val: Path) -> None:
    images = [p for p, _ in list_images([val])]
    batched = predict_images(run, [val], topk=10, device="cpu", batch_size=8)
    single = [predict_images(run, [p], topk=10, device="cpu", batch_size=1)[0] for p in images]
    assert [r["image"] for r in batched] == [str(p) for p in images] == [r["image"] for r in single]
    diff = max(
        abs(dict(a["top"])[c] - dict(b["top"])[c]) for a, b in zip(batched, single, strict=True) for c in CLASSES
    )
    assert diff < 1e-5
    spread = max(max(dict(r["top"]).values()) - min(dict(r["top"]).values()) for r in batched)
    assert spread > 1e-3  # the probabilities differ between classes: the comparison has something to compare


def test_predictions_stream_batch_by_batch(run: Path, val: Path) -> None:
    """The first result comes after the first batch, before the others are computed."""
    predictions = iter_predictions(run, [val / "1", val / "2", val / "3", val / "other"], device="cpu", batch_size=2)
    calls: list[int] = []
    predictions.model.register_forward_hook(lambda *_: calls.append(1))
    stream = iter(predictions)
    next(stream)
    assert len(predictions) == 5 and len(calls) == 1
    assert len(list(stream)) == 4 and len(calls) == 3


# -- the command: JSON Lines, --json-out, ImageFolder, unreadable files --------------------------------------------


class _Recording(io.StringIO):
    """stdout that records how many forward passes had run when each line was written."""

    def __init__(self, calls: list[int]) -> None:
        super().__init__()
        self.calls, self.at = calls, []

    def write(self, text: str) -> int:
        if text.strip():
            self.at.append(len(self.calls))
        return super().write(text)


def test_json_lines_are_streamed_one_per_image(
    run: Path, val: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[int] = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda m, *_: calls.append(1) if type(m).__name__ == "VHeat" else None
    )
    out = _Recording(calls)
    monkeypatch.setattr(sys, "stdout", out)
    try:
        code = main(["predict", "--checkpoint", str(run), "--json", "--batch-size", "4", "--workers", "0", str(val)])
    finally:
        handle.remove()
    assert code == 0
    lines = out.getvalue().splitlines()
    objects = [json.loads(line) for line in lines]  # every line is one JSON object
    assert len(objects) == 12 and [o["image"] for o in objects] == [str(p) for p, _ in list_images([val])]
    assert out.at[0] == 1 and out.at[-1] == 3  # the first line after the first of the 3 batches, not at the end
    assert all(len(o["top"]) == 5 for o in objects)
    _no_traceback(capsys.readouterr().err)


def test_json_out_is_one_document_written_at_the_end(run: Path, val: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "pred.json"
    assert main(["predict", "--checkpoint", str(run), "--json-out", str(out), "--topk", "3", str(val)]) == 0
    doc = json.loads(out.read_text())
    assert doc["images"] == 12 and doc["unreadable"] == 0 and doc["labelled"] == 10 and doc["model"] == "vheat_micro"
    assert [r["image"] for r in doc["results"]] == [str(p) for p, _ in list_images([val])]
    assert all(len(r["top"]) == 3 for r in doc["results"])
    correct = sum(r["top"][0][0] == r["true"] for r in doc["results"] if "true" in r)
    assert doc["top1"] == pytest.approx(100.0 * correct / 10)
    stdout = capsys.readouterr().out
    assert f"JSON written to {out}" in stdout and len(stdout.splitlines()) == 12 + 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pred.json"]  # no temporary file left beside it


def test_an_imagefolder_tree_gives_the_true_class_and_top1(run: Path, val: Path, capsys) -> None:
    assert main(["predict", "--checkpoint", str(run), "--json", str(val)]) == 0
    captured = capsys.readouterr()
    objects = [json.loads(line) for line in captured.out.splitlines()]
    for o in objects:
        folder = Path(o["image"]).parent.name
        assert o.get("true") == (folder if folder != "other" else None)
    correct = sum(o["top"][0][0] == o["true"] for o in objects if "true" in o)
    line = f"top-1 accuracy {100.0 * correct / 10:.2f}% ({correct} of the 10 images in folders named by a class)"
    assert captured.err.strip().splitlines() == [line]  # with --json the summary is on stderr
    assert main(["predict", "--checkpoint", str(run), str(val / "3")]) == 0  # a class folder itself: no true class
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 1 and "true" not in captured.out and "accuracy" not in captured.out


def test_human_lines_name_the_true_class(run: Path, val: Path, capsys) -> None:
    assert main(["predict", "--checkpoint", str(run), "--topk", "1", str(val)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 13 and lines[-1].startswith("top-1 accuracy ")
    assert lines[0].startswith(f"{val / '0'}") and lines[0].endswith(" (true: 0)") and lines[0].count("; ") == 0
    assert lines[11].startswith(f"{val / 'other' / 'x1.png'}: ") and "true" not in lines[11]


def test_unreadable_files_are_counted_the_others_written_exit_3(run: Path, val: Path, tmp_path: Path, capsys) -> None:
    folder = tmp_path / "mixed"
    shutil.copytree(val / "4", folder / "4")
    (folder / "4" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (folder / "empty.jpg").write_bytes(b"")
    out = tmp_path / "pred.json"
    code = main(["predict", "--checkpoint", str(run), "--json-out", str(out), str(folder)])
    captured = capsys.readouterr()
    assert code == 3
    _no_traceback(captured.err)
    assert len(captured.out.splitlines()) == 1 + 2  # the readable image, the accuracy line, the JSON line
    err = captured.err.strip().splitlines()
    assert err[0].startswith(f"{folder / '4' / 'broken.png'}: FAILED: cannot read image")
    assert err[1].startswith(f"{folder / 'empty.jpg'}: FAILED: cannot read image")
    assert err[2] == "pdevision predict: 2 of 3 images could not be read" and len(err) == 3
    doc = json.loads(out.read_text())
    assert doc["unreadable"] == 2 and [("error" in r) for r in doc["results"]] == [False, True, True]


def test_imagenet_checkpoints_print_class_names(tmp_path: Path, val: Path, capsys) -> None:
    """A 1000-class checkpoint without names of its own printed synsets (n01440764); now timm's descriptions."""
    model = create_model("vheat_micro", num_classes=1000, img_size=32)
    model.pretrained_cfg = {**model.pretrained_cfg, "input_size": (3, 32, 32)}
    run = tmp_path / "in1k"  # as timm writes a released model: no class names, 1000 classes
    timm.models.save_for_hf(model, run, model_args={"img_size": 32})
    assert "label_names" not in (run / "config.json").read_text()
    assert main(["predict", "--checkpoint", str(run), "--json", "--topk", "5", str(val / "1")]) == 0
    info = timm.data.ImageNetInfo()
    descriptions = {info.index_to_description(i) for i in range(1000)}
    names = [c for line in capsys.readouterr().out.splitlines() for c, _ in json.loads(line)["top"]]
    assert len(names) == 5 and all(n.split(" (n")[0] in descriptions for n in names), names


def test_synset_class_names_are_described_and_match_their_folders(tmp_path: Path, capsys) -> None:
    """An ImageNet-subset run (class folders named by synsets, as Imagenette's): the folders give the true class."""
    synsets = ["n01440764", "n02012849", "n03126707"]  # tench, and two classes described "crane"
    assert shown_names(synsets) == ["tench, Tinca tinca", "crane (n02012849)", "crane (n03126707)"]
    assert shown_names(["n0", "cat"]) == ["n0", "cat"]
    run = _checkpoint(tmp_path / "subset", 3, synsets)
    (tmp_path / "val" / "n01440764").mkdir(parents=True)
    DigitsDataset("val", img_size=32)[0][0].save(tmp_path / "val" / "n01440764" / "a.png")
    assert main(["predict", "--checkpoint", str(run), "--json", str(tmp_path / "val")]) == 0
    (result,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert result["true"] == "tench, Tinca tinca"


def test_the_progress_bar_is_drawn_on_a_terminal_only(run: Path, val: Path, monkeypatch, capsys) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["predict", "--checkpoint", str(run), "--batch-size", "8", str(val)]) == 0
    assert "/12 [" in terminal.getvalue() and "image/s" in terminal.getvalue()
    monkeypatch.undo()
    assert main(["predict", "--checkpoint", str(run), "--batch-size", "8", str(val)]) == 0
    assert capsys.readouterr().err == ""  # not a terminal: no bar


def test_a_closed_stdout_stops_the_stream_quietly(run: Path, val: Path) -> None:
    """``pdevision predict val/ | head -1``: the reader gone, no traceback and no "Exception ignored" at exit."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "pdevision.cli", "predict", "--checkpoint", str(run), "--workers", "0", str(val)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 141 and err.decode() == "", err.decode()


def test_threads_set_torch_threads(run: Path, val: Path) -> None:
    before = torch.get_num_threads()
    try:
        assert main(["predict", "--checkpoint", str(run), "--threads", "1", str(val / "0")]) == 0
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_workers_decode_the_same_images(run: Path, val: Path) -> None:
    inline = predict_images(run, [val], topk=3, device="cpu", batch_size=4)
    workers = list(iter_predictions(run, [val], topk=3, device="cpu", batch_size=4, workers=2))
    assert [r["image"] for r in workers] == [r["image"] for r in inline]
    assert np.allclose([p for r in workers for _, p in r["top"]], [p for r in inline for _, p in r["top"]], atol=1e-6)


def test_the_python_api_refuses_bad_arguments_and_raises_on_unreadable(run: Path, tmp_path: Path) -> None:
    for kwargs in ({"batch_size": 0}, {"topk": 0}, {"workers": -1}, {"errors": "ignore"}, {"batch_size": True}):
        with pytest.raises(ValueError, match="must be"):
            iter_predictions(run, [tmp_path], **kwargs)
    (tmp_path / "bad.png").write_bytes(b"nothing")
    with pytest.raises(ValueError, match="cannot read image"):
        predict_images(run, [tmp_path / "bad.png"])


# -- hostile input: each case its exit status and one clear line ---------------------------------------------------


def _image(mode: str, size: tuple[int, int], fmt: str = "PNG", **save) -> Callable[[Path], list[Path]]:
    def make(folder: Path) -> list[Path]:
        path = folder / f"img.{fmt.lower()}"
        Image.new(mode, size, (120 if mode in ("L", "I;16", "I", "P") else (10, 80, 200, 255)[: len(mode)])).save(
            path, fmt, **save
        )
        return [path]

    return make


def _file(name: str, data: bytes) -> Callable[[Path], list[Path]]:
    def make(folder: Path) -> list[Path]:
        (folder / name).write_bytes(data)
        return [folder / name]

    return make


def _truncated_png(folder: Path) -> list[Path]:
    full = folder / "full.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(full)
    (folder / "cut.png").write_bytes(full.read_bytes()[:300])
    full.unlink()
    return [folder / "cut.png"]


def _digit(folder: Path, name: str = "digit.png") -> Path:
    DigitsDataset("val", img_size=32)[0][0].save(folder / name)
    return folder / name


def _sixteen_bit(folder: Path) -> list[Path]:
    path = folder / "deep.png"
    Image.fromarray(np.full((20, 30), 40000, dtype=np.uint16)).save(path)
    assert Image.open(path).mode.startswith("I")
    return [path]


def _empty_folder(folder: Path) -> list[Path]:
    (folder / "empty").mkdir()
    return [folder / "empty"]


def _non_images(folder: Path) -> list[Path]:
    (folder / "docs").mkdir()
    (folder / "docs" / "notes.txt").write_text("no images here")
    (folder / "docs" / "data.csv").write_text("1,2")
    return [folder / "docs"]


def _dir_named_like_an_image(folder: Path) -> list[Path]:
    (folder / "tree" / "photo.png").mkdir(parents=True)
    return [folder / "tree"]


def _dir_named_like_an_image_with_images(folder: Path) -> list[Path]:
    (folder / "album.jpg").mkdir()
    _digit(folder / "album.jpg")
    return [folder / "album.jpg"]


def _folder_link_loop(folder: Path) -> list[Path]:
    (folder / "tree" / "a").mkdir(parents=True)
    _digit(folder / "tree" / "a")
    (folder / "tree" / "a" / "again").symlink_to(folder / "tree")  # tree/a/again -> tree: a loop
    (folder / "tree" / "up").symlink_to("..")  # above the folder given
    return [folder / "tree"]


def _file_link_loop(folder: Path) -> list[Path]:
    (folder / "tree").mkdir()
    _digit(folder / "tree")
    (folder / "tree" / "l1.png").symlink_to(folder / "tree" / "l2.png")
    (folder / "tree" / "l2.png").symlink_to(folder / "tree" / "l1.png")
    return [folder / "tree"]


def _fifo(folder: Path) -> list[Path]:
    os.mkfifo(folder / "pipe.png")
    return [folder / "pipe.png"]


def _twice(folder: Path) -> list[Path]:
    path = _digit(folder)
    return [path, path]


def _unicode(folder: Path) -> list[Path]:
    return [_digit(folder, "猫 ünïcødé ß.png")]


def _spaces(folder: Path) -> list[Path]:
    (folder / "my photos").mkdir()
    return [_digit(folder / "my photos", "a b  c.png")]


def _float_out_of_range(folder: Path) -> list[Path]:
    path = folder / "float.tiff"
    Image.fromarray(np.full((8, 8), 5.0, dtype=np.float32)).save(path)
    return [path]


def _bomb(folder: Path) -> list[Path]:
    """A PNG whose header claims 30000 x 30000 pixels (over twice Pillow's limit), refused before any decoding."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 30000, 30000, 8, 0, 0, 0, 0)
    data = chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 30001)) + chunk(b"IEND", b"")
    (folder / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + data)
    return [folder / "bomb.png"]


def _one(folder: Path) -> list[Path]:
    return [_digit(folder)]


def _existing(folder: Path) -> list[Path]:
    (folder / "taken.json").write_text("{}")
    return [_digit(folder)]


def _in_run(folder: Path) -> list[Path]:
    (folder / "run").mkdir()
    (folder / "run" / "config.json").write_text("{}")
    (folder / "run" / "metrics.csv").write_text("epoch\n")
    return [_digit(folder)]


def _palette_transparent(folder: Path) -> list[Path]:
    path = folder / "pal.png"
    img = Image.new("P", (16, 16), 1)
    img.putpalette([0, 0, 0, 255, 0, 0] * 128)
    img.save(path, transparency=0)
    return [path]


OK, USAGE, PARTIAL = 0, 2, 3
# (id, images, extra flags ({dir}: the case's folder, {run}: the run), exit status, the clear line on stderr)
CASES = [
    ("empty folder", _empty_folder, [], USAGE, "holds no image files"),
    ("folder of non-images", _non_images, [], USAGE, "holds no image files"),
    ("folder named like an image, empty", _dir_named_like_an_image, [], USAGE, "holds no image files"),
    ("folder named like an image, walked", _dir_named_like_an_image_with_images, [], OK, None),
    ("folder link loop", _folder_link_loop, [], OK, None),
    ("file link loop", _file_link_loop, [], OK, None),
    ("zero-byte file", _file("zero.png", b""), [], PARTIAL, "cannot read image"),
    ("text named .jpg", _file("notes.jpg", b"just text\n"), [], PARTIAL, "not an image format Pillow knows"),
    ("truncated PNG", _truncated_png, [], PARTIAL, "cannot read image"),
    ("missing file", lambda d: [d / "missing.png"], [], PARTIAL, "does not exist"),
    ("FIFO named .png", _fifo, [], PARTIAL, "is not a file but a FIFO"),
    ("float TIFF out of range", _float_out_of_range, [], PARTIAL, "float"),
    ("decompression bomb", _bomb, [], PARTIAL, "too large to decode safely"),
    ("huge batch size", _one, ["--batch-size", "65536"], OK, None),
    ("batch size too large", _one, ["--batch-size", "65537"], USAGE, "--batch-size"),
    ("batch size 0", _one, ["--batch-size", "0"], USAGE, "--batch-size: must be"),
    ("batch size -1", _one, ["--batch-size", "-1"], USAGE, "--batch-size: must be"),
    ("batch size abc", _one, ["--batch-size", "abc"], USAGE, "--batch-size: must be"),
    ("threads 0", _one, ["--threads", "0"], USAGE, "--threads: must be"),
    ("threads -1", _one, ["--threads", "-1"], USAGE, "--threads: must be"),
    ("threads abc", _one, ["--threads", "abc"], USAGE, "--threads: must be"),
    ("threads 1e9", _one, ["--threads", "1e9"], USAGE, "--threads: must be"),
    ("workers -1", _one, ["--workers", "-1"], USAGE, "--workers: must be"),
    ("workers 1000", _one, ["--workers", "1000"], USAGE, "--workers: must be"),
    ("topk 0", _one, ["--topk", "0"], USAGE, "--topk: must be"),
    ("json and json-out to an existing file", _existing, ["--json", "--json-out", "{dir}/taken.json"], USAGE, "exists"),
    ("json-out an existing folder", _one, ["--json-out", "{dir}"], USAGE, "exists"),
    ("json-out in a missing folder", _one, ["--json-out", "{dir}/no/such/p.json"], USAGE, "does not exist"),
    ("json-out inside a run folder", _in_run, ["--json-out", "{dir}/run/p.json"], USAGE, "inside the run folder"),
    ("json-out inside a checkpoint", _in_run, ["--json-out", "{run}/best/p.json"], USAGE, "checkpoint folder"),
    ("unicode name", _unicode, [], OK, None),
    ("spaces in names", _spaces, [], OK, None),
    ("same file twice", _twice, [], OK, None),
    ("1x1 image", _image("RGB", (1, 1)), [], OK, None),
    ("20000x1 image", _image("RGB", (20000, 1)), [], OK, None),
    ("1x20000 image", _image("L", (1, 20000)), [], OK, None),
    ("16-bit PNG", _sixteen_bit, [], OK, None),
    ("CMYK JPEG", _image("CMYK", (40, 30), "JPEG"), [], OK, None),
    ("grayscale", _image("L", (33, 17)), [], OK, None),
    ("RGBA", _image("RGBA", (31, 45)), [], OK, None),
    ("palette with transparency", _palette_transparent, [], OK, None),
]


@pytest.mark.parametrize(("images", "flags", "status", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], images, flags, status: int, expected: str | None
) -> None:
    paths = images(tmp_path)
    argv = ["predict", "--checkpoint", run, *[f.format(dir=tmp_path, run=run) for f in flags], *paths]
    assert _code(argv) == status
    captured = capsys.readouterr()
    _no_traceback(captured.err)
    err = captured.err.strip().splitlines()
    if status == OK:
        assert err == [], err
        listed = list_images(paths)
        assert len(captured.out.splitlines()) == len(listed) >= 1
        assert [line.split(": ")[0] for line in captured.out.splitlines()] == [str(p) for p, _ in listed]
    elif status == USAGE:
        assert len(err) == 1 and expected in err[0] and err[0].startswith("pdevision predict: error: "), err
        assert captured.out == ""
    else:
        assert len(err) == 2 and err[0].startswith(f"{paths[0]}: FAILED: ") and expected in err[0], err
        assert err[1] == "pdevision predict: 1 of 1 images could not be read" and captured.out == ""
    assert len(CASES) >= 30
