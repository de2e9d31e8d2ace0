"""QB-Heat's published predictor is one flag: constraint="none" is uncapped unless a cap is given."""

from __future__ import annotations

import pytest

from pdevision.cli import build_parser
from pdevision.ssl.qbheat import QBHeat, resolve_max_rate


def test_constraint_none_alone_is_the_published_uncapped_form() -> None:
    assert QBHeat("pderesnet_micro", img_size=64, decoder_depth=1, constraint="none").predictor.max_rate is None
    assert QBHeat("pderesnet_micro", img_size=64, decoder_depth=1).predictor.max_rate == 0.25  # skew: capped
    capped = QBHeat("pderesnet_micro", img_size=64, decoder_depth=1, constraint="none", max_rate=0.5)
    assert capped.predictor.max_rate == 0.5  # an explicit cap still applies
    assert resolve_max_rate("skew", None) is None
    with pytest.raises(ValueError, match="'auto'"):
        resolve_max_rate("none", "fast")


def test_cli_flags() -> None:
    parser = build_parser()
    args = parser.parse_args(["pretrain", "--constraint", "none"])
    assert resolve_max_rate(args.constraint, args.max_rate) is None
    args = parser.parse_args(["pretrain", "--constraint", "none", "--max-rate", "0.3"])
    assert resolve_max_rate(args.constraint, args.max_rate) == 0.3
    assert resolve_max_rate("skew", parser.parse_args(["pretrain"]).max_rate) == 0.25
