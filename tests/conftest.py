"""Shared test settings: deterministic seeds and a small thread count for the 2-core CI machine."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch

from pdevision.data import DigitsDataset

torch.set_num_threads(2)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_data_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A PDEVISION_DATA_CACHE of the shell does not reach the tests (they would write to it)."""
    monkeypatch.delenv("PDEVISION_DATA_CACHE", raising=False)


# shared by the refusal tests of the CLI and of the checkpoint formats
@pytest.fixture(scope="module")
def digit_png(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("images") / "digit.png"
    DigitsDataset("val", img_size=32)[0][0].save(path)
    return path


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Every attempt to open a network connection is recorded and fails."""
    attempts: list[tuple] = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(("connect", address))
        raise OSError("network access attempted in a test")

    def refuse_create(address, *args, **kwargs):
        attempts.append(("create_connection", address))
        raise OSError("network access attempted in a test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse_create)
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: refuse_create(a))
    return attempts
