"""One size limit (``pdevision.models.factory.MAX_SIZE``) for model arguments, checkpoint image sizes, restoration
patches and segmentation decoder widths: each accepts the limit where that builds nothing, and refuses one above it
with the limit in its message."""

from __future__ import annotations

import pytest

from pdevision.engine.checkpoint import CheckpointError
from pdevision.engine.modeling import checked_model_args
from pdevision.models.factory import MAX_SIZE, UnsafeModelArgumentError, check_model_args
from pdevision.tasks.restore import restoration_model_from_meta
from pdevision.tasks.segment import segmenter_from_meta


def test_model_arguments_are_bounded_by_the_size_limit() -> None:
    assert check_model_args({"dims": MAX_SIZE}) == {"dims": MAX_SIZE}
    with pytest.raises(UnsafeModelArgumentError, match=f"dims={MAX_SIZE + 1} given is above {MAX_SIZE}"):
        check_model_args({"dims": MAX_SIZE + 1})


def test_a_checkpoints_image_size_is_bounded_by_the_size_limit() -> None:
    meta = {"model": "vheat_micro", "model_args": {}}
    assert checked_model_args({**meta, "img_size": MAX_SIZE}) == {}
    with pytest.raises(CheckpointError, match=f"image size {MAX_SIZE + 1} .* from 1 to {MAX_SIZE}$"):
        checked_model_args({**meta, "img_size": MAX_SIZE + 1})


def test_a_restoration_patch_is_bounded_by_the_size_limit() -> None:
    meta = {"model": "dncnn_micro", "in_chans": 3, "patch_size": MAX_SIZE + 1}
    with pytest.raises(CheckpointError, match=f"patch size {MAX_SIZE + 1}"):
        restoration_model_from_meta(meta, {})


def test_a_segmentation_decoder_width_is_bounded_by_the_size_limit() -> None:
    meta = {"model": "vheat_micro", "classes": ["a", "b"], "head": "fpn", "decoder_channels": MAX_SIZE + 1}
    with pytest.raises(ValueError, match=f"decoder_channels {MAX_SIZE + 1} is not an integer from 1 to {MAX_SIZE}$"):
        segmenter_from_meta(meta, {})
