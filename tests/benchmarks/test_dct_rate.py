"""benchmarks/dct_rate: the DCT timing script, and its even/odd split against scipy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.fft
import torch
from benchmarks.dct_rate import dct_rate


def test_even_odd_split_is_the_dct_with_frequencies_reordered() -> None:
    x = torch.randn(2, 10, 6, 3, dtype=torch.float64)
    want = scipy.fft.dct(x.numpy(), type=2, norm="ortho", axis=1)
    order = np.r_[0:10:2, 1:10:2]
    np.testing.assert_allclose(dct_rate.even_odd_dct(x, 1).numpy(), want[:, order], atol=1e-12)


@pytest.mark.slow
def test_tiny_run_writes_a_row_per_shape(tmp_path: Path) -> None:
    md = tmp_path / "d.md"
    assert dct_rate.main(["--shapes", "8x6x4", "--repeats", "1", "--threads", "1", "--md", str(md)]) == 0
    assert "| 8, 6, 4 |" in md.read_text()
    with pytest.raises(SystemExit, match="dct_rate: shapes are HxWxC with even H and W"):
        dct_rate.main(["--shapes", "7x6x4", "--md", str(md)])


def test_a_count_that_is_not_positive_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        dct_rate.main(["--repeats", "0"])
    assert exc.value.code == 2 and "must be a positive integer" in capsys.readouterr().err
