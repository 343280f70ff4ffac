"""Does a saved folder load and decode the same on every transformers release? Prints a table.

For each release asked for (by default the latest patch of every 5.x minor, plus 4.57's as the refused case), the
script builds an environment (`pip install --target .transformers_envs/<version> --no-deps transformers==<version>`
plus whichever of its requirements the current environment does not satisfy, cached and git-ignored), then runs a
remote-code check in a fresh process where neither hf_vaswani nor hf_vaswani_training is importable: a folder
written by `save_pretrained` from this checkout (model, tokenizer, generation config) is loaded with AutoConfig,
AutoTokenizer and AutoModelForSeq2SeqLM (`trust_remote_code=True`), and generate() runs with the folder's defaults
(beam 4, GNMT alpha 0.6, source + 50), its four hypotheses per source with their scores, greedy, and sampling with a
fixed seed. The tokens (and the beam scores, to 1e-4) are compared with the same check run on the current
environment's transformers (the reference).

    python scripts/check_transformers_versions.py                      # every 5.x minor, and 4.57
    python scripts/check_transformers_versions.py --versions 5.0.0     # one release (what CI runs)

Exit status 1 when a release inside the supported range fails or gives other tokens, or a release outside it is
not refused with the one-line message.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ENVS = ROOT / ".transformers_envs"
SENTENCES = [
    "Ein Hund läuft über die Straße .",
    "Zwei Männer sitzen auf einer Bank und eine Frau liest ein Buch .",
    "Die Kinder spielen im Garten .",
    "Ein Mädchen springt .",
    "Ein Mann in einem blauen Hemd fährt mit dem Fahrrad durch die Stadt , während es regnet .",
]

# Runs in a fresh process, with the environment's transformers first on sys.path.
CHECK = textwrap.dedent(
    """
    import json, logging, sys
    sys.modules["hf_vaswani"] = None  # as on a machine where the package was never installed
    sys.modules["hf_vaswani_training"] = None
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

    folder, sentences = sys.argv[1], json.loads(sys.argv[2])
    result = {"transformers": transformers.__version__, "transformers_file": transformers.__file__}
    messages = []

    class Keep(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())

    code_logger = logging.getLogger("transformers_modules")
    code_logger.setLevel(logging.DEBUG)
    code_logger.addHandler(Keep())
    try:
        AutoConfig.from_pretrained(folder, trust_remote_code=True)
    except ImportError as error:
        result["refused"] = str(error)
        print(json.dumps(result))
        raise SystemExit(0)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    result["input_ids"] = batch["input_ids"].tolist()
    with torch.no_grad():
        result["default"] = model.generate(**batch).tolist()
        # All four hypotheses of each source and their scores: the GNMT normalisation shows in the scores.
        beams = model.generate(**batch, num_return_sequences=4, output_scores=True, return_dict_in_generate=True)
        result["beams"] = beams.sequences.tolist()
        result["beam_scores"] = beams.sequences_scores.tolist()
        result["greedy"] = model.generate(**batch, num_beams=1).tolist()
        torch.manual_seed(0)
        result["sampling"] = model.generate(**batch, num_beams=1, do_sample=True).tolist()
    result["text"] = tokenizer.batch_decode(result["default"], skip_special_tokens=True)
    result["paths"] = sorted({m for m in messages if m.startswith("hf-vaswani")})
    print(json.dumps(result))
    """
)


def latest_patches(include: str = "5.") -> list[str]:
    """The latest patch release of every minor whose version starts with `include`, oldest first (pip index)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "transformers"], capture_output=True, text=True, check=True
    ).stdout
    versions = re.search(r"Available versions: (.*)", listed).group(1).split(", ")
    latest: dict[tuple[int, int], tuple[int, ...]] = {}
    for version in versions:
        if not version.startswith(include) or not re.fullmatch(r"\d+\.\d+\.\d+", version):
            continue
        parts = tuple(int(part) for part in version.split("."))
        latest[parts[:2]] = max(latest.get(parts[:2], parts), parts)
    return [".".join(map(str, parts)) for _, parts in sorted(latest.items())]


# Run with the environment first on sys.path: which requirements of the packages installed there are not met?
UNMET = textwrap.dedent(
    """
    import json, sys
    from importlib import metadata
    from packaging.requirements import Requirement
    env = sys.argv[1]
    unmet = []
    for dist in metadata.distributions(path=[env]):
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            try:
                installed = metadata.version(requirement.name)
            except metadata.PackageNotFoundError:
                installed = None
            if installed is None or not requirement.specifier.contains(installed, prereleases=True):
                unmet.append(f"{requirement.name}{requirement.specifier}")
    print(json.dumps(sorted(set(unmet))))
    """
)


def _pip(*args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args], check=True
    )


def build_env(version: str, envs: Path) -> Path:
    """transformers==version in its own --target folder, with the requirements the current environment lacks."""
    env = envs / version
    if (env / ".complete").exists():
        return env
    _pip("--no-deps", "--upgrade", "--target", str(env), f"transformers=={version}")
    for _ in range(5):
        unmet = json.loads(_run_in(env, [sys.executable, "-c", UNMET, str(env)]).stdout)
        if not unmet:
            (env / ".complete").touch()
            return env
        _pip("--no-deps", "--upgrade", "--target", str(env), *unmet)
    raise RuntimeError(f"transformers {version}: requirements still unmet after 5 rounds: {unmet}")


def _run_in(env: Path | None, command: list[str], cwd: Path | None = None, timeout: int = 600, extra=None):
    environ = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environ.update(extra or {})
    if env is not None:
        environ["PYTHONPATH"] = str(env)
    environ.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(command, env=environ, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def make_folder(folder: Path) -> None:
    """A tiny model fitted for a few steps to copy German sentences, saved with its tokenizer (current environment)."""
    import torch

    from hf_vaswani import VaswaniConfig, VaswaniForConditionalGeneration
    from hf_vaswani_training.data.tokenizer import train_joint_bpe

    corpus = [sentence for sentence in SENTENCES for _ in range(4)]
    tokenizer = train_joint_bpe(corpus, vocab_size=120, min_frequency=2, model_max_length=64)
    torch.manual_seed(0)
    config = VaswaniConfig(
        vocab_size=len(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        dropout=0.0,
        max_position_embeddings=128,
    )
    model = VaswaniForConditionalGeneration(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, betas=(0.9, 0.98), eps=1e-9)
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        # Copy random spans of the sentences: outputs of several lengths, EOS neither immediate nor never.
        rows = [SENTENCES[i] for i in torch.randint(len(SENTENCES), (16,), generator=generator).tolist()]
        batch = tokenizer(rows, text_target=rows, padding=True, return_tensors="pt")
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def run_check(folder: Path, env: Path | None, workdir: Path) -> dict:
    """The remote-code check in a fresh process (env first on sys.path, or the current environment).

    Offline, with its own Hugging Face cache in `workdir`: the copied code is the folder's, nothing outside is used.
    """
    hf_home = workdir / f"hf_home_{env.name if env is not None else 'reference'}"
    completed = _run_in(
        env,
        [sys.executable, "-c", CHECK, str(folder), json.dumps(SENTENCES)],
        cwd=workdir,
        extra={"HF_HOME": str(hf_home), "HF_MODULES_CACHE": str(hf_home / "modules"), "HF_HUB_OFFLINE": "1"},
    )
    if completed.returncode != 0:
        lines = [line for line in completed.stderr.strip().splitlines() if line.strip()]
        return {"error": lines[-1] if lines else f"exit status {completed.returncode}"}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def supported_range() -> str:
    from hf_vaswani.configuration_vaswani import SUPPORTED_TRANSFORMERS

    return SUPPORTED_TRANSFORMERS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", help="releases to check (default: latest patch of each 5.x minor)")
    parser.add_argument("--envs", type=Path, default=DEFAULT_ENVS, help="where the environments are built and kept")
    args = parser.parse_args(argv)

    from packaging.specifiers import SpecifierSet

    supported = SpecifierSet(supported_range())
    versions = args.versions or ["4.57.6", *latest_patches("5.")]
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        folder, workdir = scratch / "folder", scratch / "elsewhere"
        workdir.mkdir()
        make_folder(folder)
        reference = run_check(folder, None, workdir)
        if "error" in reference:
            print(f"reference run failed: {reference['error']}")
            return 1
        print(f"reference: transformers {reference['transformers']}; supported range {supported}")
        print(
            f"{'transformers':<13}| {'result':<22}| {'loops (greedy, beam)':<28}| same tokens as {reference['transformers']}"
        )
        failures, reasons = 0, {}
        for version in versions:
            try:
                env = build_env(version, args.envs)
            except (subprocess.CalledProcessError, RuntimeError) as error:
                result = {"error": f"environment not built: {error}"}
            else:
                result = run_check(folder, env, workdir)
            inside = supported.contains(version, prereleases=True)
            if result.get("transformers") not in (None, version):
                result = {"error": f"ran {result['transformers']} from {result['transformers_file']}"}
            loops = "-"
            if "error" in result:
                outcome, same = f"FAILS: {result['error']}"[:300], "-"
                failures += 1
            elif "refused" in result:
                outcome, same = "refused at import", "-"
                reasons.setdefault(f"refused: {result['refused']}", []).append(version)
                failures += inside
            else:
                modes = ("default", "beams", "greedy", "sampling")
                same_modes = [mode for mode in modes if result[mode] == reference[mode]]
                scores = zip(result["beam_scores"], reference["beam_scores"], strict=True)
                if all(abs(score - expected) <= 1e-4 for score, expected in scores):
                    same_modes.append("beam scores")
                same = "yes" if len(same_modes) == 5 and result["input_ids"] == reference["input_ids"] else "NO"
                if same != "yes":
                    same = f"NO (same: {', '.join(same_modes) or 'none'})"
                outcome = "works"
                loops = ", ".join(
                    _loop(result["paths"], search, reasons, version) for search in ("greedy", "beam search")
                )
                failures += (not inside) or same != "yes"
            print(f"{version:<13}| {outcome:<22}| {loops:<28}| {same}", flush=True)
        for reason, where in reasons.items():
            print(f"{', '.join(where)}: {reason}")
    return 1 if failures else 0


def _loop(paths: list[str], search: str, reasons: dict, version: str) -> str:
    """'rows dropped' or 'stock' for one search, from the debug lines the model code logged; reasons are collected."""
    for path in paths:
        prefix = f"hf-vaswani generation: {search}: "
        if path.startswith(prefix):
            loop = path.removeprefix(prefix).rsplit(" (transformers ", 1)[0]
            if loop == "row-dropping loop":
                return "rows dropped"
            if loop.startswith("stock loop, as "):
                where = reasons.setdefault(f"stock loops, as {loop.removeprefix('stock loop, as ')}", [])
                if version not in where:
                    where.append(version)
            return "stock"
    return "?"


if __name__ == "__main__":
    raise SystemExit(main())
