"""Segmentation and detection tasks: metrics against scikit-learn / pycocotools, the CLI through the one loop,
--init-from, predict on dense checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from sklearn.metrics import accuracy_score, jaccard_score
from sklearn.metrics import confusion_matrix as sk_confusion

import pdevision.models  # noqa: F401
from pdevision.cli import main
from pdevision.engine import RunConfig
from pdevision.engine.save import save_checkpoint
from pdevision.tasks.dense import DenseConfig
from pdevision.tasks.detect import DetectTask
from pdevision.tasks.segment import confusion_matrix, segmentation_scores
from tests.data.test_dense_data import _coco, _write_mask_folder


def test_confusion_and_scores_match_sklearn() -> None:
    rng = np.random.default_rng(0)
    n = 5
    target = rng.integers(0, n, (4, 20, 30))
    pred = np.where(rng.random(target.shape) < 0.6, target, rng.integers(0, n, target.shape))
    pred[pred == 4] = 3  # class 4 is never predicted
    target[0, :5] = 255  # ignored pixels
    conf = confusion_matrix(torch.from_numpy(pred), torch.from_numpy(target), n)
    keep = target != 255
    ref = sk_confusion(target[keep], pred[keep], labels=list(range(n)))
    np.testing.assert_array_equal(conf.numpy(), ref)
    scores = segmentation_scores(conf)
    iou = jaccard_score(target[keep], pred[keep], labels=list(range(n)), average=None)
    assert scores["miou"] == pytest.approx(iou.mean() * 100)
    assert scores["pixel_acc"] == pytest.approx(accuracy_score(target[keep], pred[keep]) * 100)
    # a class absent from labels and predictions has no IoU and does not lower the mean
    padded = np.pad(conf.numpy(), ((0, 1), (0, 1)))
    assert segmentation_scores(padded)["miou"] == pytest.approx(scores["miou"])
    assert segmentation_scores(padded)["iou"][-1] is None


class _Ctx:
    """The loop's evaluation context in one process, on the CPU."""

    device = torch.device("cpu")
    batch_size = 4

    def __init__(self, collate) -> None:
        self.collate = collate

    def loader(self, dataset, batch_size=None):
        return torch.utils.data.DataLoader(dataset, batch_size=batch_size or 4, collate_fn=self.collate)

    def to_device(self, batch):
        return batch

    def autocast(self):
        return torch.autocast("cpu", enabled=False)

    def sum(self, values):
        return values


class _Oracle(torch.nn.Module):
    """A detector whose outputs are the targets with a known shift: what the metric must score."""

    def __init__(self, dataset, shift: float) -> None:
        super().__init__()
        self.dataset, self.shift = dataset, shift

    def forward(self, images):
        out = []
        for img in images:
            idx = next(i for i in range(len(self.dataset)) if torch.equal(self.dataset[i][0], img))
            t = self.dataset[idx][1]
            boxes = t["boxes"].as_subclass(torch.Tensor).clone()
            boxes[:, [0, 2]] += self.shift
            masks = t["masks"].as_subclass(torch.Tensor).float()[:, None]
            out.append(dict(boxes=boxes, labels=t["labels"], scores=torch.linspace(0.9, 0.5, len(boxes)), masks=masks))
        return out


def _coco_box_map(dataset, shift: float) -> float:
    """Box mAP straight from pycocotools' COCOeval, for the same predictions."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    images, anns, dets = [], [], []
    for i in range(len(dataset)):
        img, t = dataset[i]
        images.append(dict(id=i, height=img.shape[1], width=img.shape[2]))
        boxes = t["boxes"].as_subclass(torch.Tensor)
        scores = torch.linspace(0.9, 0.5, len(boxes))
        for j, (b, lab) in enumerate(zip(boxes.tolist(), t["labels"].tolist(), strict=True)):
            w, h = b[2] - b[0], b[3] - b[1]
            anns.append(
                dict(id=len(anns) + 1, image_id=i, category_id=lab, bbox=[b[0], b[1], w, h], area=w * h, iscrowd=0)
            )
            dets.append(dict(image_id=i, category_id=lab, bbox=[b[0] + shift, b[1], w, h], score=float(scores[j])))
    gt = COCO()
    gt.dataset = dict(images=images, annotations=anns, categories=[dict(id=c) for c in range(1, 12)])
    gt.createIndex()
    ev = COCOeval(gt, gt.loadRes(dets), "bbox")
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    return float(ev.stats[0]) * 100


@pytest.mark.parametrize("shift", [0.0, 2.7])  # not a whole pixel: no IoU sits exactly on a threshold
def test_detection_map_matches_pycocotools(shift: float) -> None:
    task = DetectTask(DenseConfig(val_scenes=6))
    task.datasets()
    r = task.evaluate(_Oracle(task.val_set, shift), _Ctx(task.collate_fn))
    assert r["map"] == pytest.approx(_coco_box_map(task.val_set, shift), abs=1e-4)  # float32 boxes there
    if shift == 0:
        assert r["map"] == pytest.approx(100.0) and r["map50"] == pytest.approx(100.0)
        assert r["mask_map"] == pytest.approx(100.0)
    else:
        assert 0 < r["map"] < 100


def _run(argv: list[str]) -> int:
    return main([str(a) for a in argv])


def test_cli_train_segment_and_predict(tmp_path: Path, capsys) -> None:
    _write_mask_folder(tmp_path / "masks", n=6, size=(40, 48))
    out = tmp_path / "seg"
    argv = ["train", "--task", "segment", "--head", "fpn", "--model", "pderesnet_micro", "--epochs", "1"]
    argv += ["--data", tmp_path / "masks", "--img-size", "32", "--batch-size", "2", "--output", out, "--no-progress"]
    assert _run(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert 0 <= summary["best_val_miou"] <= 100 and summary["head"] == "fpn"
    assert summary["classes"] == ["background", "cat", "dog"] and summary["train_images"] == 5
    assert "best val mIoU" in capsys.readouterr().out
    photo = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (37, 53, 3), dtype=np.uint8)).save(photo)
    pred_dir = tmp_path / "pred"
    assert _run(["predict", "--checkpoint", out, photo, "--output", pred_dir]) == 0
    result = json.loads((pred_dir / "predictions.json").read_text())
    assert result[0]["size"] == [37, 53]
    label_map = np.asarray(Image.open(pred_dir / "photo_labels.png"))
    assert label_map.shape == (37, 53) and label_map.max() < 3
    assert Image.open(pred_dir / "photo_overlay.png").size == (53, 37)
    # an image smaller than the deepest stride twice over (the decoder's GroupNorm refused it, exit 1): padded for
    # the model, its class map cropped back to its own size
    tiny = tmp_path / "tiny.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(tiny)
    assert _run(["predict", "--checkpoint", out, tiny, "--output", tmp_path / "tiny_pred"]) == 0
    assert np.asarray(Image.open(tmp_path / "tiny_pred" / "tiny_labels.png")).shape == (20, 30)
    # hostile inputs to predict on a dense checkpoint: a file that is not an image, a 16-bit image
    capsys.readouterr()
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    assert _run(["predict", "--checkpoint", out, bad, "--output", pred_dir]) == 3  # unreadable: named, counted
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err) and len(err) == 2, err
    assert err[0].startswith(f"{bad}: FAILED: ") and err[1] == "pdevision predict: 1 of 1 images could not be read"
    # a folder: walked through its sub-folders as classify's predict walks it; two images of one name both kept
    tree = tmp_path / "tree"
    for sub in ("a", "b"):
        (tree / sub).mkdir(parents=True)
        Image.fromarray(np.random.default_rng(1).integers(0, 255, (37, 53, 3), dtype=np.uint8)).save(
            tree / sub / "x.png"
        )
    (tree / "b" / "broken.png").write_bytes(b"\x89PNG cut short")
    assert _run(["predict", "--checkpoint", out, tree, "--output", tmp_path / "tree_pred"]) == 3
    captured = capsys.readouterr()
    assert "segment: 2 images" in captured.out and "1 of 3 images could not be read" in captured.err
    assert {p.name for p in (tmp_path / "tree_pred").glob("*_overlay.png")} == {"x_overlay.png", "x-2_overlay.png"}
    listed = [r["image"] for r in json.loads((tmp_path / "tree_pred" / "predictions.json").read_text())]
    assert listed == [str(tree / "a" / "x.png"), str(tree / "b" / "x.png")]
    deep = tmp_path / "deep.png"
    Image.fromarray(np.full((37, 53), 65535, dtype=np.uint16)).save(deep)
    assert _run(["predict", "--checkpoint", out, deep, "--output", pred_dir]) == 0
    assert Image.open(pred_dir / "deep_overlay.png").size == (53, 37)


def test_cli_train_detect_init_from_and_predict(tmp_path: Path) -> None:
    clf = timm.create_model("pderesnet_micro", num_classes=3)
    save_checkpoint(tmp_path, "clf", clf, {"model": "pderesnet_micro", "classes": ["a", "b", "c"]})
    _coco(tmp_path / "coco", "train")
    _coco(tmp_path / "coco", "val")
    out = tmp_path / "det"
    argv = ["train", "--task", "detect", "--head", "faster_rcnn", "--model", "pderesnet_micro", "--epochs", "1"]
    argv += ["--data", tmp_path / "coco", "--batch-size", "2", "--img-size", "64"]
    argv += ["--init-from", tmp_path / "clf", "--output", out, "--no-progress"]
    assert _run(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {"best_val_map", "best_val_map50"} <= set(summary) and summary["head"] == "faster_rcnn"
    assert summary["classes"] == ["dog", "cat"]
    photo = tmp_path / "photo.jpg"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (50, 70, 3), dtype=np.uint8)).save(photo)
    assert _run(["predict", "--checkpoint", out, photo, "--output", tmp_path / "pred"]) == 0
    dets = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    assert isinstance(dets, list)
    for d in dets:  # COCO result format, the json's own category ids
        assert set(d) >= {"image_id", "category_id", "bbox", "score"} and len(d["bbox"]) == 4
        assert d["category_id"] in (3, 7)
        assert d["bbox"][0] + d["bbox"][2] <= 70 + 1e-3
    assert Image.open(tmp_path / "pred" / "photo_overlay.png").size == (70, 50)
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(photo.read_bytes())
    (folder / "cut.jpg").write_bytes(photo.read_bytes()[:100])
    assert _run(["predict", "--checkpoint", out, folder, "--output", tmp_path / "pred2"]) == 3
    assert (tmp_path / "pred2" / "a_overlay.png").is_file() and not (tmp_path / "pred2" / "cut_overlay.png").exists()
    # a 1 x 1 image, as segmentation's small-image case: torchvision's detector transform resizes it, the overlay
    # keeps its own size
    dot = tmp_path / "dot.png"
    Image.fromarray(np.zeros((1, 1, 3), dtype=np.uint8)).save(dot)
    assert _run(["predict", "--checkpoint", out, dot, "--output", tmp_path / "pred3"]) == 0
    assert Image.open(tmp_path / "pred3" / "dot_overlay.png").size == (1, 1)


def test_cli_dense_errors(tmp_path: Path, capsys) -> None:
    for argv, expected in [
        (["--task", "segment", "--recipe", "mask_rcnn_swin_1x"], "--recipe: invalid choice: 'mask_rcnn_swin_1x'"),
        (["--task", "detect", "--head", "upernet"], "--head: invalid choice: 'upernet'"),
        (["--recipe", "upernet_swin"], "--recipe: invalid choice: 'upernet_swin'"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            _run(["train", *argv, "--output", tmp_path])
        assert exit_info.value.code == 2 and expected in capsys.readouterr().err
    clf = timm.create_model("hcnet_micro", num_classes=2)
    save_checkpoint(tmp_path, "clf", clf, {"model": "hcnet_micro"})
    argv = ["train", "--task", "segment", "--model", "vheat_micro", "--init-from", tmp_path / "clf"]
    assert _run([*argv, "--output", tmp_path / "x"]) == 2
    assert "holds a 'hcnet_micro' backbone" in capsys.readouterr().err


def test_embedded_default_runs_its_fixed_epochs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No --data, --epochs or --time-budget: the run is the embedded default's fixed number of epochs."""
    import pdevision.tasks.dense as dense
    import pdevision.tasks.segment as segment

    monkeypatch.setitem(dense.EMBEDDED_EPOCHS, "segment", 2)
    config = DenseConfig(
        model="pderesnet_micro", head="fpn", train_scenes=16, val_scenes=4, run=RunConfig(output=str(tmp_path))
    )
    summary = segment.train(config)
    assert summary["status"] == "completed"
    assert summary["epochs_run"] == 2 and summary["steps"] == 4


def test_seed_moves_the_training_not_the_scenes() -> None:
    """--seed varies the training; the embedded scenes stay the fixed split (scene_seed)."""
    from pdevision.tasks.detect import DetectTask
    from pdevision.tasks.segment import SegmentTask

    for task in (SegmentTask(DenseConfig(run=RunConfig(seed=5))), DetectTask(DenseConfig(run=RunConfig(seed=5)))):
        train, val = task.datasets()
        assert train.seed == val.seed == 0
    other = SegmentTask(DenseConfig(scene_seed=2, run=RunConfig(seed=5)))
    assert other.datasets()[0].seed == 2
