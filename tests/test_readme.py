"""The README's Python example runs as written, in a scratch directory, and its relative links lead to files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_readme_python_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 1
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}  # as a script: timm's register_model needs a module
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert tuple(namespace["logits"].shape) == (2, 10)
    assert "torch.Size([2, 10])" in capsys.readouterr().out


def test_readme_relative_links_lead_to_files() -> None:
    links = re.findall(r"\]\(([^)#\s]+)", README.read_text())
    relative = [link for link in links if "://" not in link]
    assert any(link.startswith("docs/") for link in relative)
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
    assert len(README.read_text().splitlines()) < 250
