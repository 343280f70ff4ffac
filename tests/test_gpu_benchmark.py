"""benchmarks/gpu.py --tiny end to end on the CPU: the device command cannot rot between device runs.

Checks the table's structure and that every measured number is finite and positive; never a wall-clock value.
"""

import json
import math
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

TRAINING_FIELDS = ("target_tokens_per_s", "tokens_per_s", "step_ms_median", "flop_per_s", "mfu_measured_percent")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu") / "gpu.json"
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "gpu.py"), "--tiny", "--out", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return json.loads(out.read_text()), out.with_suffix(".md").read_text(), completed.stdout


@pytest.mark.slow
def test_every_planned_row_is_measured_or_says_why_not(tiny_run):
    report, _, _ = tiny_run
    rows = {row["name"]: row["result"] for row in report["rows"]}
    for path in ("trainer", "marian", "lean"):
        assert rows[f"tiny {path} bf16"]["status"] == "ok"
    for search in ("beam4", "greedy"):
        for model in ("ours", "marian"):
            assert rows[f"tiny generate {model} {search} eager"]["status"] == "ok"
    # What needs CUDA is listed, not dropped.
    for name in ("tiny trainer fp16", "tiny trainer bf16 compiled", "tiny lean bf16 compiled",
                 "tiny generate ours beam4 static cache+compile", "tiny generate marian beam4 static cache+compile"):  # fmt: skip
        assert rows[name]["status"] == "skipped: no CUDA"
    assert all(result["status"] == "ok" or result["status"].startswith("skipped") for result in rows.values())


@pytest.mark.slow
def test_measured_numbers_are_finite_and_positive(tiny_run):
    report, _, _ = tiny_run

    def positive(value):
        return isinstance(value, (int, float)) and math.isfinite(value) and value > 0

    assert positive(report["meta"]["matmul_peak_tflops"])
    assert report["meta"]["datasheet_peak_tflops"] is None  # a CPU has no datasheet row
    for row in report["rows"]:
        result = row["result"]
        if result["status"] != "ok":
            continue
        if row["kind"] == "train":
            assert all(positive(result[field]) for field in TRAINING_FIELDS), (row["name"], result)
            assert result["timed_steps"] >= 1
            assert result["tokens_per_s"] > result["target_tokens_per_s"]  # sources count too
            assert result["step_ms_p10"] <= result["step_ms_median"] <= result["step_ms_p90"]
            assert 0 <= result["padding_fraction"] < 1
            assert "peak_memory_gib" not in result  # GPU memory only
        else:
            assert result["sentences"] >= 1
            assert positive(result["sentences_per_s"]) and positive(result["generated_tokens_per_s"])
    targets = report["targets"]
    assert {t["measure"] for t in targets} >= {
        "tiny: trainer / Marian stock, tgt tok/s",
        "tiny: trainer / lean loop, tgt tok/s",
        "tiny: generate beam4 ours / Marian, sent/s",
    }
    assert all(positive(t["value"]) and t["met"] in (True, False) for t in targets)


@pytest.mark.slow
def test_the_table_is_printed_last_and_written_as_markdown(tiny_run):
    report, markdown, stdout = tiny_run
    assert stdout.rstrip().endswith(markdown.rstrip())
    for row in report["rows"]:
        assert f"| {row['name']} |" in markdown
    assert "| training run | tgt tok/s | all tok/s |" in markdown and "| target | value | wanted |" in markdown
