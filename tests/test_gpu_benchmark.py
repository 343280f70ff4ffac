"""`python -m benchmarks.gpu --tiny` end to end on the CPU, its `--dry_run` plan of the GPU run, one row in its own
process, and the choice of the CPU's native dtype: the device command cannot rot between device runs.

Checks the table's structure and that every measured number is finite and positive; never a wall-clock value.
"""

import json
import math
import re
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO_ROOT

TRAINING_FIELDS = ("first_step_s", "target_tokens_per_s", "tokens_per_s", "step_ms_median", "flop_per_s",
                   "mfu_percent", "source_tokens_per_update", "target_tokens_per_update")  # fmt: skip
DECODING_FIELDS = ("first_batch_s", "sentences_per_s", "generated_tokens_per_s", "mean_output_tokens")
DEVICE_TIMEOUT_S = 480  # benchmarks/gpu_device.sh stops the run there


def run_module(*args, timeout=300, env=None):
    completed = subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                               timeout=timeout, env=env)  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed.stdout


def positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu")
    out = folder / "gpu.json"
    stdout = run_module("benchmarks.gpu", "--tiny", "--out", str(out), "--work_dir", str(folder / "work"))
    return json.loads(out.read_text()), out.with_suffix(".md").read_text(), stdout, folder / "work"


@pytest.mark.slow
def test_every_planned_row_is_measured_cold_and_warm_or_says_why_not(tiny_run):
    report, _, _, _ = tiny_run
    precision = report["meta"]["precision"]
    rows = {row["name"]: row["result"] for row in report["rows"]}
    for path in ("trainer", "marian", "lean"):
        result = rows[f"tiny {path} {precision}"]
        assert result["status"] == "ok" and set(result["passes"]) == {"cold", "warm"}, result
        assert all(p["status"] == "ok" for p in result["passes"].values()), result
    for search in ("beam4", "greedy"):
        for model in ("ours", "marian"):
            result = rows[f"tiny generate {model} {search} eager"]
            assert result["status"] == "ok" and all(p["status"] == "ok" for p in result["passes"].values())
    # What needs CUDA is listed, not dropped.
    for name in (f"tiny trainer {precision} compiled", "tiny generate ours beam4 static cache+compile",
                 "tiny generate marian beam4 static cache+compile"):  # fmt: skip
        assert rows[name]["status"] == "skipped: no CUDA"
    assert report["meta"]["decode_weights"].endswith("on this device")


@pytest.mark.slow
def test_measured_numbers_are_finite_and_positive(tiny_run):
    report, _, _, _ = tiny_run
    assert positive(report["meta"]["matmul_peak_tflops"])
    assert report["meta"]["datasheet_peak_tflops"] is None  # a CPU has no datasheet row
    for row in report["rows"]:
        result = row["result"]
        if result["status"] != "ok":
            continue
        for name, measured in result.get("passes", {}).items():
            if row["kind"] == "train":
                assert all(positive(measured[field]) for field in TRAINING_FIELDS), (row["name"], name, measured)
                assert measured["timed_updates"] == measured["updates"] - 1 >= 1
                assert measured["tokens_per_s"] > measured["target_tokens_per_s"]  # sources count too
                assert measured["step_ms_p10"] <= measured["step_ms_median"] <= measured["step_ms_p90"]
                assert 0 <= measured["padding_fraction"] < 1
                assert 1 <= measured["distinct_shapes"] <= measured["micro_batches"]
                assert "peak_memory_gib" not in measured  # GPU memory only
            elif row["kind"] == "decode":
                assert all(positive(measured[field]) for field in DECODING_FIELDS), (row["name"], name, measured)
                assert measured["sentences"] >= 1
    targets = report["targets"]
    assert {t["measure"] for t in targets} >= {
        "tiny: trainer cold / trainer warm, tgt tok/s",
        "tiny: trainer / lean loop warm, tgt tok/s",
        "tiny: trainer / Marian stock cold, tgt tok/s",
        "tiny: generate beam4 ours / Marian warm, sent/s",
    }
    assert all(positive(t["value"]) and t["met"] in (True, False) for t in targets if t["value"] is not None)
    assert sum(t["value"] is not None for t in targets) >= 8  # all but the compiled one


@pytest.mark.slow
def test_the_warm_pass_runs_the_batches_of_the_cold_pass(tiny_run):
    report, _, _, _ = tiny_run
    for row in report["rows"]:
        if row["kind"] == "train" and row["result"]["status"] == "ok":
            cold, warm = row["result"]["passes"]["cold"], row["result"]["passes"]["warm"]
            for key in ("updates", "micro_batches", "distinct_shapes", "padding_fraction",
                        "source_tokens_per_update", "target_tokens_per_update"):  # fmt: skip
                assert cold[key] == warm[key], (row["name"], key)
            assert row["accumulation"] == 2 and cold["micro_batches"] == 2 * cold["updates"]


@pytest.mark.slow
def test_batch_shapes_are_reported_bucketed_and_exact(tiny_run):
    report, markdown, _, _ = tiny_run
    census = {entry["label"]: entry for entry in report["meta"]["batch_shapes"]}
    bucketed = next(entry for label, entry in census.items() if "bucketed" in label)
    exact = next(entry for label, entry in census.items() if "exact" in label)
    assert bucketed["batches"] == exact["batches"] == 1000
    assert 1 <= bucketed["distinct_shapes"] <= exact["distinct_shapes"]
    assert "| the recipe's batches | micro-batches | distinct shapes | padding |" in markdown


@pytest.mark.slow
def test_the_table_is_printed_last_and_written_as_markdown(tiny_run):
    report, markdown, stdout, _ = tiny_run
    assert stdout.rstrip().endswith(markdown.rstrip())
    for row in report["rows"]:
        if row["kind"] != "decode_weights":
            assert f"| {row['name']} |" in markdown
    assert "| cold: first step s |" in markdown and "| warm: tgt tok/s |" in markdown
    assert "| target | value | wanted | |" in markdown


@pytest.mark.slow
def test_the_precision_is_the_cpus_native_one(tiny_run):
    from benchmarks.lib.machine import cpu_has_native_bf16

    meta = tiny_run[0]["meta"]
    native = cpu_has_native_bf16()
    assert meta["precision"] == ("bf16" if native else "fp32")
    assert meta["matmul_dtype"] == ("bfloat16" if native else "float32")


@pytest.mark.slow
def test_a_row_runs_in_its_own_process(tiny_run, tmp_path):
    """The GPU run's path: the row as a `python -m benchmarks.training_speed` process, its result back as JSON."""
    from benchmarks import gpu

    report, _, _, work_dir = tiny_run
    lean = next(row for row in report["rows"] if row["kind"] == "train" and row["path"] == "lean")
    spec = {key: lean[key] for key in lean if key not in ("skip", "result")}
    spec.update(cuda=False, seed=0, batch_shapes="auto", vocab_size=report["meta"]["vocab_size"], peak=None, steps=2)
    data = next(work_dir.glob("data-*"))
    result = gpu.run_isolated("benchmarks.training_speed", ["--data", str(data)], spec, 240, tmp_path)
    assert result["status"] == "ok", result
    assert [p["updates"] for p in result["passes"].values()] == [2, 2]
    assert list(tmp_path.glob("row-caches-*/")), "the row's compiler caches are its own"


def test_the_dry_run_plans_the_gpu_run_inside_the_device_timeout():
    stdout = run_module("benchmarks.gpu", "--dry_run", "--device", "cuda", timeout=120)
    assert "rows each in its own process" in stdout
    for name in ("base trainer bf16", "big marian bf16", "base lean bf16", "base generate ours beam4 eager",
                 "base trainer bf16 compiled", "base generate marian beam4 static cache+compile"):  # fmt: skip
        assert f"| {name}" in stdout
    planned = float(re.search(r"rows: about (\d+) s", stdout).group(1))
    assert planned + 30 <= DEVICE_TIMEOUT_S  # rows plus data and peak fit the device script's timeout


def test_a_cpu_without_native_bf16_measures_and_trains_in_float32(monkeypatch):
    from benchmarks.lib import machine

    cpu = torch.device("cpu")
    monkeypatch.delenv(machine.CPU_BF16_ENV, raising=False)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2", "fma"})  # an AVX2-only EPYC
    assert machine.native_precision(cpu) == "fp32" and machine.matmul_dtype(cpu) == torch.float32
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512f", "avx512_bf16", "amx_bf16"})
    assert machine.native_precision(cpu) == "bf16" and machine.matmul_dtype(cpu) == torch.bfloat16
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # oneDNN's bf16 kernels off: torch's generic bf16 GEMM
    assert machine.native_precision(cpu) == "fp32"
    monkeypatch.setenv(machine.CPU_BF16_ENV, "1")
    assert machine.native_precision(cpu) == "bf16"
    monkeypatch.setenv(machine.CPU_BF16_ENV, "0")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert machine.native_precision(cpu) == "fp32"
