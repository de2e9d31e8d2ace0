"""Issue 61, item 2 for export: a checkpoint whose image size is within the limit but whose traced program needs more
memory than there is is one line, exit 2, with nothing written (it was exit 1 with the allocator's message)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import timm

from pdevision.engine.save import save_checkpoint


def _limit_memory() -> None:  # 4 GB of data: the 2 x 3 x 16384^2 float input alone is 6.4 GB
    resource.setrlimit(resource.RLIMIT_DATA, (4 << 30, 4 << 30))


def test_an_export_that_runs_out_of_memory_is_one_line(tmp_path: Path) -> None:
    meta = {"model": "pderesnet_micro", "kind": "classify", "classes": ["a", "b"], "model_args": {}, "img_size": 16384}
    save_checkpoint(tmp_path / "run", "best", timm.create_model("pderesnet_micro", num_classes=2), meta)
    output = tmp_path / "model.onnx"
    code = "import sys; from pdevision.cli import main; sys.exit(main(sys.argv[1:]))"
    argv = ["export", str(tmp_path / "run"), "--format", "onnx", "--output", str(output)]
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, preexec_fn=_limit_memory, env=os.environ
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "16384 px needs more memory" in done.stderr
    assert not output.exists()
