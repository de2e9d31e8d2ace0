"""QB-Heat's published predictor is one flag: constraint="none" is uncapped unless a cap is given."""

from __future__ import annotations

import pytest

from pdevision.models.qbheat import QBHeat, resolve_max_rate


def test_constraint_none_alone_is_the_published_uncapped_form() -> None:
    assert QBHeat("pderesnet_micro", img_size=64, decoder_depth=1, constraint="none").predictor.max_rate is None
    assert QBHeat("pderesnet_micro", img_size=64, decoder_depth=1).predictor.max_rate == 0.25  # skew: capped
    capped = QBHeat("pderesnet_micro", img_size=64, decoder_depth=1, constraint="none", max_rate=0.5)
    assert capped.predictor.max_rate == 0.5  # an explicit cap still applies
    assert resolve_max_rate("skew", None) is None
    with pytest.raises(ValueError, match="'auto'"):
        resolve_max_rate("none", "fast")
