"""The README's Python examples run as written, in order, in a scratch directory."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}  # as a script: timm's register_model needs a module
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert os.path.exists("vheat_micro.onnx")
