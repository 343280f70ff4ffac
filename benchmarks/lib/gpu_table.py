"""The report of benchmarks/gpu.py: the issue's targets read from the rows of one run, and the markdown tables (one for
training, cold and warm side by side; one for decoding; the batch shapes; the targets) that it prints last."""

from __future__ import annotations

import json
from pathlib import Path

TARGETS = {  # issue 25
    "trainer_cold_over_warm": 0.8,
    "trainer_over_lean": 0.9,
    "trainer_over_marian": 1.5,
    "mfu_big": 40.0,  # % of the measured matrix peak, warm, at the one-GPU settings
    "mfu_base": 30.0,
    "generate_over_marian": 1.5,
    "compiled_over_eager": 1.2,
}


def fmt(value, spec=".1f") -> str:
    return "" if value is None else format(value, spec)


def passes(row: dict) -> dict:
    result = row.get("result", {})
    return result.get("passes", {}) if result.get("status") == "ok" else {}


def value(rows_by_name: dict, name: str, pass_name: str, key: str):
    measured = passes(rows_by_name.get(name, {})).get(pass_name, {})
    return measured.get(key) if measured.get("status") == "ok" else None


def ratios(rows: list[dict]) -> list[dict]:
    """The issue's targets, read from the rows of this run (None where a row is missing or failed)."""
    by_name = {row["name"]: row for row in rows}
    out = []

    def add(label, a, b, target, unit="x"):
        ratio = a / b if a is not None and b else None
        out.append({"measure": label, "value": ratio, "target": target, "unit": unit,
                    "met": None if ratio is None else ratio >= target})  # fmt: skip

    train = [row for row in rows if row["kind"] == "train" and not row["compile"]]
    for preset in dict.fromkeys(row["preset"] for row in train):
        precision = next(row["precision"] for row in train if row["preset"] == preset)
        trainer = f"{preset} trainer {precision}"
        tok = "target_tokens_per_s"
        add(f"{preset}: trainer cold / trainer warm, tgt tok/s", value(by_name, trainer, "cold", tok),
            value(by_name, trainer, "warm", tok), TARGETS["trainer_cold_over_warm"])  # fmt: skip
        for other, key in (("lean", "trainer_over_lean"), ("marian", "trainer_over_marian")):
            for pass_name in ("cold", "warm"):
                add(f"{preset}: trainer / {'lean loop' if other == 'lean' else 'Marian stock'} {pass_name}, tgt tok/s",
                    value(by_name, trainer, pass_name, tok),
                    value(by_name, f"{preset} {other} {precision}", pass_name, tok), TARGETS[key])  # fmt: skip
        target = TARGETS.get(f"mfu_{preset}")
        if target is not None:
            mfu = value(by_name, trainer, "warm", "mfu_percent")
            out.append({"measure": f"{preset}: trainer warm MFU vs measured peak", "value": mfu, "target": target,
                        "unit": "%", "met": None if mfu is None else mfu >= target})  # fmt: skip
        add(f"{preset}: trainer compiled warm / eager warm, tgt tok/s",
            value(by_name, f"{trainer} compiled", "warm", tok), value(by_name, trainer, "warm", tok),
            TARGETS["compiled_over_eager"])  # fmt: skip
    for row in rows:
        if row["kind"] == "decode" and row["model"] == "ours" and not row["compile"]:
            marian = row["name"].replace(" ours ", " marian ")
            for pass_name in ("cold", "warm"):
                add(f"{row['preset']}: generate {row['search']} ours / Marian {pass_name}, sent/s",
                    value(by_name, row["name"], pass_name, "sentences_per_s"),
                    value(by_name, marian, pass_name, "sentences_per_s"), TARGETS["generate_over_marian"])  # fmt: skip
    return out


def _status(row) -> str:
    result = row.get("result", {"status": "not run yet"})
    if result.get("status") != "ok":
        return result["status"]
    bad = [f"{name}: {p['status']}" for name, p in result["passes"].items() if p.get("status") != "ok"]
    return "; ".join(bad) or "ok"


def _train_cells(measured: dict) -> list[str]:
    if measured.get("status") != "ok":
        return [fmt(measured.get("first_step_s"), ".2f"), "", "", ""]
    step = f"{fmt(measured['step_ms_median'])} ({fmt(measured['step_ms_p10'])}–{fmt(measured['step_ms_p90'])})"
    return [fmt(measured["first_step_s"], ".2f"), step, fmt(measured["target_tokens_per_s"], ",.0f"),
            fmt(measured.get("mfu_percent"))]  # fmt: skip


def markdown(report: dict) -> str:
    meta = report["meta"]
    rows = report["rows"]
    lines = [
        f"GPU benchmark: {meta['device']}, {meta['date']}, commit {meta['commit']}, torch {meta['torch']}, "
        f"transformers {meta['transformers']}",
        f"matmul peak measured: {fmt(meta['matmul_peak_tflops'], '.3g')} TFLOP/s ({meta['matmul_dtype']}); "
        f"{meta['datasheet']}; vocabulary {meta['vocab_size']}; --batch_shapes {meta['batch_shapes_option']}; "
        f"{meta['isolation']}",
        "",
        "| training run | micro-batch tokens × accumulation | real src/tgt tokens an update | cold: first step s "
        "| cold: step ms median (p10–p90) | cold: tgt tok/s | cold: MFU % | warm: first step s "
        "| warm: step ms median (p10–p90) | warm: tgt tok/s | warm: MFU % | shapes / micro-batches (cold) "
        "| padding | graphs compiled cold/warm | peak GiB | status |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if row["kind"] != "train":
            continue
        p = passes(row)
        cold, warm = p.get("cold", {}), p.get("warm", {})
        tokens = ""
        if warm.get("status") == "ok":
            tokens = f"{warm['source_tokens_per_update']:,.0f} / {warm['target_tokens_per_update']:,.0f}"
        shapes = f"{cold['distinct_shapes']} / {cold['micro_batches']}" if cold.get("status") == "ok" else ""
        graphs = ""
        if row["compile"] and cold:
            graphs = f"{cold.get('graphs_compiled', '')} / {warm.get('graphs_compiled', '')}"
        peak = max((x.get("peak_memory_gib") or 0 for x in (cold, warm)), default=0) or None
        cells = [row["name"], f"{row['max_tokens']:,} × {row['accumulation']}", tokens, *_train_cells(cold),
                 *_train_cells(warm), shapes, fmt(cold.get("padding_fraction"), ".1%"), graphs, fmt(peak, ".2f"),
                 _status(row)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| decoding run | sentences | cold: first batch s | cold: sent/s | warm: first batch s | warm: sent/s "
        "| warm: gen tok/s | tokens a sentence (references) | graphs compiled cold/warm | status |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if row["kind"] != "decode":
            continue
        p = passes(row)
        cold, warm = p.get("cold", {}), p.get("warm", {})
        reference = row.get("result", {}).get("reference_mean_tokens")
        length = f"{fmt(warm.get('mean_output_tokens'))} ({fmt(reference)})" if warm else ""
        graphs = f"{cold.get('graphs_compiled', '')} / {warm.get('graphs_compiled', '')}" if row["compile"] else ""
        cells = [row["name"], str(cold.get("sentences", "")), fmt(cold.get("first_batch_s"), ".2f"),
                 fmt(cold.get("sentences_per_s")), fmt(warm.get("first_batch_s"), ".2f"),
                 fmt(warm.get("sentences_per_s")), fmt(warm.get("generated_tokens_per_s"), ",.0f"), length, graphs,
                 _status(row)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    census = meta.get("batch_shapes") or []
    if census:
        lines += ["", "| the recipe's batches | micro-batches | distinct shapes | padding |", "|---|---:|---:|---:|"]
        for entry in census:
            lines.append(f"| {entry['label']} | {entry['batches']:,} | {entry['distinct_shapes']} | "
                         f"{entry['padding_fraction']:.1%} |")  # fmt: skip
    lines += ["", "| target | value | wanted | |", "|---|---:|---:|---|"]
    for target in report["targets"]:
        met = "" if target["met"] is None else ("met" if target["met"] else "MISSED")
        lines.append(f"| {target['measure']} | {fmt(target['value'], '.2f')} | >= {target['target']:g}{target['unit']} "
                     f"| {met} |")  # fmt: skip
    lines.append(f"\ndecoding weights: {meta.get('decode_weights')}; {meta.get('seconds', 0):.0f} s in all")
    return "\n".join(lines) + "\n"


def write(report: dict, out: Path | None) -> None:
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
