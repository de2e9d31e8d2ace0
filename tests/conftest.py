"""Shared test settings: deterministic seeds and a small thread count for the 2-core CI machine."""

from __future__ import annotations

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
