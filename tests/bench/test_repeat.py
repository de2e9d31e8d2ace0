"""``pdevision bench --runs N``: the bench in N fresh processes, and one record of their medians and spread."""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdevision.bench.compare import markdown_table
from pdevision.bench.repeat import STAGING, combine_runs, failure_message, run_in_processes
from pdevision.cli import main


def _record(
    ratio: float, img_s: float, seconds: float, op_seconds: float = 1e-3, mm: float = 800.0
) -> dict[str, object]:
    """A results.json of one run: vheat_tiny and convnext_tiny at 512 px in bf16, and the token-mixer timings."""
    row = {"img_size": 512, "batch": 1, "dtype": "bf16", "params_m": 30.0, "gmacs": 25.0, "train_img_s": None}
    rows = [
        dict(row, model="vheat_tiny", infer_img_s=img_s * ratio, achieved_gflops=1.0, fraction_of_matmul=0.5),
        dict(row, model="convnext_tiny", infer_img_s=img_s, achieved_gflops=1.0, fraction_of_matmul=0.5),
    ]
    for r in rows:
        r.update(infer_ms_per_batch=1000 / r["infer_img_s"], peak_mem_mib=100.0)
    ops = [
        {"operator": name, "side": side, "tokens": side * side, "seconds": op_seconds * side**k}
        for name, k in (("hco_matrix", 3), ("hco_fft", 2))
        for side in (8, 16)
    ]
    return {
        "machine": {
            "cpu": "test",
            "cores": 2,
            "threads": 2,
            "torch": "x",
            "device": "cpu",
            "matmul_gflops": mm,
            "matmul_gflops_by_dtype": {"bf16": {"torch_mm": mm, "onednn": mm + 10, "limit": mm + 10}},
        },
        "repeats": 5,
        "rows": rows,
        "ratios": [{"model": "vheat_tiny", "peer": "convnext_tiny", "img_size": 512, "dtype": "bf16", "ratio": ratio}],
        "operators": {"rows": ops, "exponents": {"hco_matrix": 0.0, "hco_fft": 0.0}, "faster_hco": {}, "dim": 96},
        "seconds": seconds,
    }


def test_combined_record_is_the_median_over_runs_with_each_ratio_range() -> None:
    runs = [_record(0.96, 10.0, 100.0, mm=500.0), _record(1.03, 12.0, 110.0), _record(0.99, 11.0, 105.0, mm=900.0)]
    combined = combine_runs(runs)
    assert combined["runs"] == 3 and combined["run_seconds"] == [100.0, 110.0, 105.0]
    # one low matrix-multiply measurement in the first run does not become the record's rate
    assert combined["machine"]["matmul_gflops"] == 800.0
    assert combined["machine"]["matmul_gflops_by_dtype"]["bf16"] == {"torch_mm": 800.0, "onednn": 810.0, "limit": 810.0}
    (ratio,) = combined["ratios"]
    # the median of the runs' ratios, not the ratio of the median throughputs
    assert ratio["ratio"] == 0.99 and ratio["min"] == 0.96 and ratio["max"] == 1.03
    assert ratio["runs"] == [0.96, 1.03, 0.99]
    rows = {r["model"]: r for r in combined["rows"]}
    assert rows["convnext_tiny"]["infer_img_s"] == 11.0
    assert rows["vheat_tiny"]["infer_img_s"] == pytest.approx(statistics.median([9.6, 12.36, 10.89]))
    assert rows["vheat_tiny"]["train_img_s"] is None  # not measured in any run: stays absent
    # the token mixers: median seconds per size, exponent fitted again on them (time ~ side^3 = tokens^1.5)
    assert combined["operators"]["exponents"]["hco_matrix"] == pytest.approx(1.5)
    assert combined["operators"]["exponents"]["hco_fft"] == pytest.approx(1.0)
    text = markdown_table(combined)
    assert "3 runs of the same command, one after the other, each a fresh process (100, 110, 105 s)" in text
    assert "| vheat_tiny | convnext_tiny | bf16 | 0.99x (0.96-1.03) |" in text
    assert "| vheat_tiny | convnext_tiny | bf16 | 512 | 0.960 | 1.030 | 0.990 | 0.990 |" in text


def test_one_run_keeps_the_single_run_table() -> None:
    text = markdown_table(_record(0.96, 10.0, 100.0))
    assert "Median of 5 interleaved repeats after warm-up" in text
    assert "| vheat_tiny | convnext_tiny | bf16 | 0.96x |" in text and "Each run's ratios" not in text


def test_runs_of_different_commands_are_not_combined() -> None:
    other = _record(1.0, 10.0, 100.0)
    other["rows"] = other["rows"][:1]  # type: ignore[index]
    with pytest.raises(ValueError, match="bench run 2 measured other models, sizes or dtypes than run 1"):
        combine_runs([_record(1.0, 10.0, 100.0), other])
    with pytest.raises(ValueError, match="no bench runs"):
        combine_runs([])


@pytest.mark.slow
def test_bench_runs_in_fresh_processes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench"
    (out / "run3").mkdir(parents=True)  # a run folder of an earlier, longer series, beside its record
    (out / "results.json").write_text(json.dumps({"machine": {}, "rows": []}))
    (out / STAGING / "run1").mkdir(parents=True)  # and the first run of a series interrupted after it
    argv = ["bench", "--models", "vheat_micro", "--resolutions", "64", "--batch", "2", "--repeats", "1"]
    argv += ["--train-resolutions", "--no-operators", "--runs", "2", "--threads", "1", "--out", str(out)]
    assert main(argv) == 0
    runs = [json.loads((out / f"run{i}" / "results.json").read_text()) for i in (1, 2)]
    combined = json.loads((out / "results.json").read_text())
    assert combined["runs"] == 2 and combined["run_seconds"] == [r["seconds"] for r in runs]
    assert runs[0]["machine"]["threads"] == 1  # the child processes take the thread count
    for row in combined["rows"]:
        each = [next(r for r in run["rows"] if r["model"] == row["model"])["infer_img_s"] for run in runs]
        assert row["infer_img_s"] == pytest.approx(sum(each) / 2)  # the median of two
    # the folder holds this series only: no run of the earlier one, no staging folder
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["run1", "run2"]
    assert (out / "results.md").read_text().startswith("Machine:")
    assert (out / "cost_vs_resolution.png").stat().st_size > 100
    err = capsys.readouterr().err
    assert "bench run 1 of 2: done" in err and "bench run 2 of 2: done" in err


@pytest.mark.slow
def test_a_failed_run_stops_the_series_and_leaves_the_record(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    (out / "run1").mkdir(parents=True)
    earlier = {"machine": {"cpu": "the record of an earlier series"}, "rows": []}
    (out / "results.json").write_text(json.dumps(earlier))
    kwargs = {"models": ["no_such_model"], "resolutions": [64], "repeats": 1, "train_resolutions": ()}
    with pytest.raises(RuntimeError, match=r"bench run 1 of 2 failed: .*no_such_model.*the runs finished before it"):
        run_in_processes(2, out, 1, {**kwargs, "operators": False})
    assert json.loads((out / "results.json").read_text()) == earlier
    assert (out / "run1").is_dir() and not (out / "run2").exists()


@pytest.mark.slow
def test_ctrl_c_during_a_series_is_one_line_and_keeps_the_record(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    out.mkdir()
    earlier = json.dumps({"machine": {}, "rows": []})
    (out / "results.json").write_text(earlier)
    argv = ["bench", "--models", "vheat_micro", "--resolutions", "64", "--batch", "1", "--repeats", "1"]
    argv += ["--train-resolutions", "--no-operators", "--runs", "2", "--threads", "1", "--out", str(out)]
    # a shell that starts the tests in the background hands SIGINT down ignored, and Python then never raises
    # KeyboardInterrupt: the command gets the disposition of an interactive terminal
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdevision.cli", *argv],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not (out / STAGING / "run1").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # until the first run's process is at work
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "pdevision bench: interrupted" in err and "Traceback" not in err
    assert (out / "results.json").read_text() == earlier  # the record of the earlier series is untouched


@pytest.mark.parametrize("runs", ["0", "21", "two"])
def test_bench_runs_out_of_range_is_a_usage_error(runs: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--runs", runs])
    assert exc.value.code == 2
    assert "--runs" in capsys.readouterr().err


def test_a_killed_run_says_how_it_ended() -> None:
    """A run killed by a signal (the out-of-memory killer) writes nothing; the message still says what happened."""
    kill = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    proc = subprocess.run([sys.executable, "-c", kill], capture_output=True, text=True, check=False)
    assert failure_message(2, 3, proc) == "bench run 2 of 3 failed: killed by SIGKILL, no message (out of memory?)"
    silent = subprocess.run([sys.executable, "-c", "raise SystemExit(3)"], capture_output=True, text=True, check=False)
    assert failure_message(1, 3, silent) == "bench run 1 of 3 failed: exit code 3, no message"
