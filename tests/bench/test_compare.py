"""The benchmark harness runs end to end on small settings and writes every output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pdevision.bench.compare import _ratio_table, ratio_rows
from pdevision.bench.operators import fit_exponent
from pdevision.cli import main


def test_fit_exponent_recovers_power_law() -> None:
    tokens = [196, 784, 3136, 12544]
    assert fit_exponent(tokens, [1e-6 * t**1.5 for t in tokens]) == pytest.approx(1.5)


@pytest.mark.slow
def test_bench_cli_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    argv = ["bench", "--models", "vheat_micro", "resnet18", "--resolutions", "64", "--batch", "2"]
    argv += ["--repeats", "2", "--train-resolutions", "64", "--operator-sides", "8", "16", "--out", str(out)]
    argv += ["--dtype", "fp32", "bf16", "--fused-peers"]
    assert main(argv) == 0
    result = json.loads((out / "results.json").read_text())
    assert {(r["model"], r["dtype"]) for r in result["rows"]} == {
        (m, d) for m in ("vheat_micro", "resnet18", "resnet18+fused") for d in ("fp32", "bf16")
    }
    assert set(result["machine"]["matmul_gflops_by_dtype"]) == {"fp32", "bf16"}
    assert result["machine"]["allocator"] == "steady"  # glibc here: freed memory kept in the process
    rows = {r["model"]: r for r in result["rows"] if r["dtype"] == "fp32"}
    for name, row in rows.items():
        assert row["infer_img_s"] > 0 and row["peak_mem_mib"] >= 0
        assert 0 < row["fraction_of_matmul"] < 5
        # the +fused variant trains as its peer does: timed once, under the peer's name
        assert (row["train_img_s"] is None) == name.endswith("+fused")
    assert rows["vheat_micro"]["params_m"] == pytest.approx(2.12, abs=0.01)
    assert result["machine"]["matmul_gflops"] > 0
    ops = result["operators"]
    assert {"hco_matrix", "hco_fft", "wave_matrix", "global_attention", "window_attention_7x7"} == set(ops["exponents"])
    for name in ("results.csv", "results.md", "cost_vs_resolution.png", "operators.png"):
        assert (out / name).stat().st_size > 100
    assert "| vheat_micro | 64 | 2 | fp32 |" in capsys.readouterr().out


def test_ratio_rows_pair_each_model_with_its_measured_peers() -> None:
    def row(model: str, img_s: float, dtype: str = "fp32") -> dict[str, object]:
        return {"model": model, "img_size": 224, "dtype": dtype, "infer_img_s": img_s}

    rows = [
        row("vheat_tiny", 30.0),
        row("convnext_tiny", 20.0),
        row("pderesnet50", 10.0),
        row("vheat_tiny", 8.0, "bf16"),
    ]
    ratios = ratio_rows(rows)
    # swin was not measured and resnet50 neither: only the one measured pair, in its dtype
    assert ratios == [{"model": "vheat_tiny", "peer": "convnext_tiny", "img_size": 224, "dtype": "fp32", "ratio": 1.5}]
    table = "\n".join(_ratio_table(ratios))
    assert "| vheat_tiny | convnext_tiny | fp32 | 1.50x |" in table


def test_bench_folds_pderesnet_and_the_peers_batchnorms() -> None:
    import torch

    from pdevision.bench.models import create_for_bench

    ours = create_for_bench("pderesnet_micro", 64, torch.device("cpu"))
    assert ours.folded
    peer = create_for_bench("resnet18", 64, torch.device("cpu"))
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in peer.modules())


def test_fused_peer_computes_the_peer_function_on_the_fused_kernels() -> None:
    import torch

    from pdevision.bench.models import create_for_bench
    from pdevision.fastpath.modules import FusedLinear

    torch.manual_seed(0)
    peer = create_for_bench("convnext_tiny", 64, torch.device("cpu"))
    torch.manual_seed(0)
    fused = create_for_bench("convnext_tiny+fused", 64, torch.device("cpu"))
    assert not any(isinstance(m, FusedLinear) for m in peer.modules())
    assert sum(isinstance(m, FusedLinear) for m in fused.modules()) > 10
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), peer(x), atol=1e-4, rtol=1e-4)
    # ratios against the fused variant are reported beside those against the peer as timm ships it
    rows = [
        {"model": m, "img_size": 224, "dtype": "fp32", "infer_img_s": v}
        for m, v in (("vheat_tiny", 30.0), ("convnext_tiny", 20.0), ("convnext_tiny+fused", 25.0))
    ]
    assert [(r["peer"], r["ratio"]) for r in ratio_rows(rows)] == [("convnext_tiny", 1.5), ("convnext_tiny+fused", 1.2)]


def test_bench_unknown_model_is_clear(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--models", "vheat_tinyy"]) == 2
    assert "did you mean vheat_tiny" in capsys.readouterr().err


def test_compiled_models_are_compared_with_compiled_peers() -> None:
    rows = [
        {"model": m, "img_size": 224, "dtype": "bf16", "infer_img_s": v}
        for m, v in (
            ("vheat_tiny", 30.0),
            ("convnext_tiny", 20.0),
            ("vheat_tiny+compiled", 33.0),
            ("convnext_tiny+compiled", 40.0),
        )
    ]
    pairs = [(r["model"], r["peer"], r["ratio"]) for r in ratio_rows(rows)]
    assert pairs == [
        ("vheat_tiny", "convnext_tiny", 1.5),
        ("vheat_tiny+compiled", "convnext_tiny+compiled", pytest.approx(0.825)),
    ]


@pytest.mark.slow
def test_bench_compile_measures_compiled_models_beside_eager(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    argv = ["bench", "--models", "vheat_micro", "resnet18", "--resolutions", "32", "48", "--batch", "1"]
    argv += ["--repeats", "1", "--train-resolutions", "--no-operators", "--compile", "--out", str(out)]
    assert main(argv) == 0  # the same model class compiled at a second size (static shapes, no dynamic recompile)
    result = json.loads((out / "results.json").read_text())
    assert len(result["rows"]) == 8
    rows = {r["model"]: r for r in result["rows"] if r["img_size"] == 48}
    assert set(rows) == {"vheat_micro", "resnet18", "vheat_micro+compiled", "resnet18+compiled"}
    assert rows["vheat_micro+compiled"]["gmacs"] == rows["vheat_micro"]["gmacs"]  # the same function
    assert rows["vheat_micro+compiled"]["peak_mem_mib"] is None and rows["vheat_micro+compiled"]["infer_img_s"] > 0
    assert "NAME+compiled = the folded model through torch.compile" in (out / "results.md").read_text()


@pytest.mark.slow
def test_compiled_bench_model_computes_the_folded_function() -> None:
    import torch

    from pdevision.bench.models import create_for_bench

    torch.manual_seed(0)
    eager = create_for_bench("vheat_micro", 32, torch.device("cpu"))
    torch.manual_seed(0)
    compiled = create_for_bench("vheat_micro+compiled", 32, torch.device("cpu"))
    x = torch.randn(1, 3, 32, 32)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), eager(x), atol=1e-4, rtol=1e-4)


@pytest.mark.slow  # a real torch.compile attempt (12-16 s)
def test_bench_compile_failure_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch._inductor.config as inductor_config

    # a machine without a C++ compiler: inductor's CPU code cannot be built (its caches are bypassed); set through
    # inductor's own patch, which restores its config whole (a monkeypatched attribute broke later compiles)
    argv = ["bench", "--models", "resnet18", "--resolutions", "32", "--batch", "1", "--repeats", "1"]
    argv += ["--train-resolutions", "--no-operators", "--compile", "--out", str(tmp_path / "bench")]
    with inductor_config.patch({"cpp.cxx": ("no-such-compiler-here",), "force_disable_caches": True}):
        code = main(argv)
    assert code == 1  # the machine, not the arguments: "failed", not a usage error
    err = capsys.readouterr().err
    assert "torch.compile of resnet18 failed" in err and "run without --compile" in err
    assert "Traceback" not in err


_FREED_AND_RETURNED = """
import sys, torch
from pdevision.bench.measure import _rss_status, steady_allocator
if sys.argv[1] == "steady":
    assert steady_allocator()
blocks = [torch.empty(3 * 2**19).fill_(1.0) for _ in range(3)]  # 3 x 6 MiB, touched
before = _rss_status()["VmRSS"]
del blocks
print(before - _rss_status()["VmRSS"])
"""


def _returned_on_free(mode: str) -> int:
    """Bytes of resident memory a fresh process gives back when it frees three touched 6 MiB blocks."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _FREED_AND_RETURNED, mode], capture_output=True, text=True, check=True)
    return int(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_steady_allocator_keeps_freed_memory_mapped() -> None:
    """After ``steady_allocator`` freed blocks stay in the process (the next forward reuses them without page
    faults), where glibc's default unmaps them. Each side in a fresh process, so that no heap history decides it."""
    assert _returned_on_free("steady") < 2 * 2**20
    assert _returned_on_free("default") >= 16 * 2**20


def test_bench_device_auto_runs_where_the_parser_accepts_it(tmp_path: Path) -> None:
    """``--device auto`` passed the parser but failed inside the bench (torch has no device "auto")."""
    argv = ["bench", "--models", "resnet18", "--resolutions", "64", "--batch", "1", "--repeats", "1"]
    argv += ["--train-resolutions", "--no-operators", "--device", "auto", "--out", str(tmp_path / "b")]
    assert main(argv) == 0
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert json.loads((tmp_path / "b" / "results.json").read_text())["machine"]["device"] == want


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--resolutions", "16"], "vheat_micro takes images of at least 32 px, got a resolution of 16"),
        (["--train-resolutions", "24"], "vheat_micro takes images of at least 32 px, got a resolution of 24"),
        (["--operator-sides", "14", "14"], "--operator-sides needs at least two different sides"),
    ],
)
def test_bench_refuses_sizes_it_cannot_measure_before_timing(
    extra: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A size below a model's minimum failed minutes into the run with the probe's whole traceback; one operator
    side fitted an exponent to a single point."""
    out = tmp_path / "b"
    argv = ["bench", "--models", "vheat_micro", "--resolutions", "64", "--train-resolutions", "--out", str(out)]
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1
    assert not out.exists()  # nothing measured, nothing written


def test_a_failed_memory_probe_is_one_line() -> None:
    """It passed on the last 2,000 characters of the probe process's traceback, cut mid-word."""
    from pdevision.bench.measure import probe_model

    with pytest.raises(RuntimeError) as exc:
        probe_model("vheat_micro", [(16, 1)], torch.device("cpu"))  # below the model's minimum size
    message = str(exc.value)
    assert message.startswith("probe of vheat_micro failed: ValueError: expected height and width of at least 32")
    assert "\n" not in message and "Traceback" not in message


@pytest.mark.parametrize("runs", ["1", "2"])
def test_bench_out_never_replaces_a_users_results(
    runs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench --out`` replaced a user's results.csv without a word, where ``train`` refuses the same (issue 37)."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "results.csv").write_text("my own numbers\n")
    (out / "notes.txt").write_text("mine\n")
    argv = ["bench", "--models", "vheat_micro", "--resolutions", "32", "--train-resolutions", "32"]
    assert main([*argv, "--no-operators", "--repeats", "1", "--runs", runs, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"--out {out} holds files that are not a bench record" in err and "results.csv" in err
    assert (out / "results.csv").read_text() == "my own numbers\n" and sorted(p.name for p in out.iterdir()) == [
        "notes.txt",
        "results.csv",
    ]


def test_an_earlier_bench_record_and_other_files_are_no_clash(tmp_path: Path) -> None:
    from pdevision.bench.compare import check_bench_folder

    (tmp_path / "results.json").write_text(json.dumps({"machine": {}, "rows": []}))
    (tmp_path / "results.csv").write_text("model\n")
    check_bench_folder(tmp_path)  # an earlier bench's record: re-measured into the same folder
    (tmp_path / "results.json").write_text("[" * 100_000)  # not a record (and deeper than json can read)
    with pytest.raises(ValueError, match=r"results\.csv, results\.json"):
        check_bench_folder(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    check_bench_folder(other)  # files of other names are left beside the record


def test_the_runs_an_interrupted_series_left_are_no_clash_and_files_of_their_names_are(tmp_path: Path) -> None:
    """A series cut off before its record leaves only its staging folder of run folders: the same command again
    replaces it (it was refused, so an interrupted bench could not be re-run into its folder). A user's file named
    like the staging folder or a run folder is refused, where it was deleted or stood in the way of a run."""
    from pdevision.bench.compare import STAGING, check_bench_folder

    (tmp_path / STAGING / "run1").mkdir(parents=True)
    (tmp_path / STAGING / "run1" / "results.json").write_text("{")  # cut off while writing
    check_bench_folder(tmp_path)
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / "results.json").write_text(json.dumps({"machine": {}, "rows": []}))
    check_bench_folder(tmp_path)  # a run folder holding a bench record of its own
    for name in ("run3", STAGING):
        mine = tmp_path / name.strip(".")
        mine.mkdir()
        (mine / name).write_text("my notes")
        with pytest.raises(ValueError, match=name):
            check_bench_folder(mine)
    (tmp_path / STAGING / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=STAGING):
        check_bench_folder(tmp_path)  # the staging folder holds a file that no run wrote


def test_the_mac_count_of_pdeformer_works_with_trainable_parameters() -> None:
    """``bench --train-resolutions N`` always failed for pdeformer_micro: the probe's MAC count ("'NoneType' object
    has no attribute 'next_functions'": its mixers hand a parameter on as an input); the parameters stay trainable."""
    import torch

    from pdevision.bench.measure import macs_and_peak_memory
    from pdevision.models.factory import create_model

    model = create_model("pdeformer_micro").eval()
    x = torch.randn(2, 3, 32, 32)
    macs, _ = macs_and_peak_memory(model, x[:1], x, torch.device("cpu"))
    assert macs > 1e6 and all(p.requires_grad for p in model.parameters())
