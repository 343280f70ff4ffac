"""The translation pipeline that ships with the model (hf_vaswani/pipeline_vaswani.py).

transformers 5.23 removed its own `translation` task; this one is saved into the model folder (`custom_pipelines` in
config.json plus the code file), so `pipeline("translation", model=folder, trust_remote_code=True)` works where
hf_vaswani is not installed. Its output must be the text of `generate()` on the same batch.
"""

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import pipeline

from hf_vaswani import VaswaniTranslationPipeline
from hf_vaswani_training.data.tokenizer import train_joint_bpe
from tests.conftest import tiny_model

CORPUS = [
    "Ein Hund läuft durch den Park .",
    "A dog runs through the park .",
    "Zwei Katzen schlafen auf dem Sofa .",
    "Two cats sleep on the sofa .",
    "Ein Mann fährt Fahrrad .",
    "A man rides a bicycle .",
]
SOURCES = [
    "Ein Hund läuft .",
    "Zwei Katzen schlafen auf dem Sofa im Park .",
    "Ein Mann .",
    "Der Hund schläft .",
    "Zwei Männer fahren Fahrrad durch den Park .",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_joint_bpe(CORPUS * 5, vocab_size=80, min_frequency=1)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(seed=3, vocab_size=len(tokenizer))


@pytest.fixture(scope="module")
def folder(model, tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipeline") / "model"
    VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu").save_pretrained(folder)
    return folder


def _generate_texts(model, tokenizer, sources, batch_size, **generate_kwargs):
    """What the pipeline must return: generate() on `tokenizer(batch, padding=True)`, decoded, batch by batch."""
    texts = []
    for start in range(0, len(sources), batch_size):
        batch = tokenizer(sources[start : start + batch_size], padding=True, return_tensors="pt")
        with torch.no_grad():
            output_ids = model.generate(**batch, **generate_kwargs)
        texts += tokenizer.batch_decode(output_ids, skip_special_tokens=True)
    return texts


@pytest.mark.parametrize("batch_size", [1, 2, 5])
def test_batched_pipeline_gives_the_text_of_generate(model, tokenizer, batch_size):
    pipe = VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")
    results = pipe(SOURCES, batch_size=batch_size)
    expected = _generate_texts(model, tokenizer, SOURCES, batch_size)
    assert [result["translation_text"] for result in results] == expected
    assert all(text for text in expected)  # not a comparison of empty strings


def test_default_decoding_is_the_papers_and_generation_kwargs_override_it(model, tokenizer):
    pipe = VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")
    assert (model.generation_config.num_beams, model.generation_config.length_penalty_type) == (4, "gnmt")
    beam = [r["translation_text"] for r in pipe(SOURCES, batch_size=5)]
    greedy_kwargs = dict(num_beams=1, min_new_tokens=3)
    greedy = [r["translation_text"] for r in pipe(SOURCES, batch_size=5, **greedy_kwargs)]
    assert greedy == _generate_texts(model, tokenizer, SOURCES, 5, **greedy_kwargs)
    assert greedy != beam  # the keyword arguments changed the decoding
    # The paper's default explicitly: beam 4, GNMT alpha 0.6, source + 50.
    paper = dict(num_beams=4, length_penalty=0.6, length_penalty_type="gnmt", max_length_offset=50)
    assert beam == _generate_texts(model, tokenizer, SOURCES, 5, **paper)
    # Set at construction, they apply to every call.
    assert [r["translation_text"] for r in VaswaniTranslationPipeline(
        model=model, tokenizer=tokenizer, device="cpu", **greedy_kwargs
    )(SOURCES, batch_size=5)] == greedy  # fmt: skip


def test_output_format(model, tokenizer):
    pipe = VaswaniTranslationPipeline(model=model, tokenizer=tokenizer, device="cpu")
    single = pipe(SOURCES[0])
    assert isinstance(single, list) and len(single) == 1 and set(single[0]) == {"translation_text"}
    several = pipe(SOURCES[:2], num_beams=4, num_return_sequences=3)
    assert [len(result) for result in several] == [3, 3]
    beams = model.generate(**tokenizer(SOURCES[:1], return_tensors="pt"), num_beams=4, num_return_sequences=3)
    assert [r["translation_text"] for r in several[0]] == tokenizer.batch_decode(beams, skip_special_tokens=True)
    with_ids = pipe(SOURCES[0], return_tensors=True, return_text=False)[0]
    assert set(with_ids) == {"translation_token_ids"}
    assert (
        tokenizer.decode(with_ids["translation_token_ids"], skip_special_tokens=True) == single[0]["translation_text"]
    )
    with pytest.raises(TypeError, match="string or a list of strings"):
        pipe([1, 2])


def test_overlong_source_is_truncated_with_a_warning(tokenizer, caplog):
    short_model = tiny_model(seed=3, vocab_size=len(tokenizer), max_position_embeddings=12)
    pipe = VaswaniTranslationPipeline(model=short_model, tokenizer=tokenizer, device="cpu")
    long_source = " ".join(SOURCES)
    assert len(tokenizer(long_source).input_ids) > 12
    with caplog.at_level(logging.WARNING):
        result = pipe(long_source, num_beams=1)[0]["translation_text"]
    assert any("longer than the 12 this model takes" in record.getMessage() for record in caplog.records)
    truncated = tokenizer(long_source, truncation=True, max_length=12, return_tensors="pt")
    assert truncated.input_ids.shape[1] == 12 and truncated.input_ids[0, -1] == tokenizer.eos_token_id
    expected = tokenizer.decode(short_model.generate(**truncated, num_beams=1)[0], skip_special_tokens=True)
    assert result == expected

    # truncation=False: the whole source, as generate() would take it.
    whole = pipe(long_source, num_beams=1, truncation=False)[0]["translation_text"]
    full = tokenizer(long_source, return_tensors="pt")
    assert whole == tokenizer.decode(short_model.generate(**full, num_beams=1)[0], skip_special_tokens=True)

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        pipe(SOURCES[0], num_beams=1)
    assert not any("this model takes" in record.getMessage() for record in caplog.records)


def test_saved_folder_carries_the_pipeline(folder):
    config = json.loads((folder / "config.json").read_text())
    assert config["custom_pipelines"] == {
        "translation": {"impl": "pipeline_vaswani.VaswaniTranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"]}
    }
    for name in ("pipeline_vaswani.py", "modeling_vaswani.py", "tokenizer.json", "model.safetensors"):
        assert (folder / name).is_file(), name


def test_plain_model_resave_keeps_the_pipeline_loadable(folder, tmp_path):
    """A folder loaded and re-saved with model.save_pretrained alone (not through the pipeline) keeps
    custom_pipelines in config.json, so it must also keep the code file that entry names."""
    from transformers import AutoModelForSeq2SeqLM

    resaved = tmp_path / "resaved"
    AutoModelForSeq2SeqLM.from_pretrained(folder).save_pretrained(resaved)
    assert "translation" in json.loads((resaved / "config.json").read_text())["custom_pipelines"]
    assert (resaved / "pipeline_vaswani.py").read_text() == (folder / "pipeline_vaswani.py").read_text()


def test_pipeline_from_folder_with_the_package_imported(folder, model, tokenizer):
    expected = _generate_texts(model, tokenizer, SOURCES, 2)
    local = pipeline("translation", model=str(folder), pipeline_class=VaswaniTranslationPipeline, device="cpu")
    assert type(local) is VaswaniTranslationPipeline
    assert [r["translation_text"] for r in local(SOURCES, batch_size=2)] == expected
    # With trust_remote_code the pipeline class comes from the folder; the model stays the installed package's.
    remote = pipeline("translation", model=str(folder), trust_remote_code=True, device="cpu")
    assert type(remote).__name__ == "VaswaniTranslationPipeline" and type(remote) is not VaswaniTranslationPipeline
    assert type(remote.model).__module__ == "hf_vaswani.modeling_vaswani"
    assert [r["translation_text"] for r in remote(SOURCES, batch_size=2)] == expected


_FRESH_PROCESS = textwrap.dedent(
    """
    import json
    import sys
    import warnings

    sys.modules["hf_vaswani"] = None  # as on a machine where the package was never installed
    warnings.simplefilter("always")
    from transformers import pipeline

    folder, sources = sys.argv[1], json.loads(sys.argv[2])
    with warnings.catch_warnings(record=True) as caught:
        pipe = pipeline("translation", model=folder, trust_remote_code=True, device="cpu")
        batched = pipe(sources, batch_size=2)
        greedy = pipe(sources, batch_size=5, num_beams=1, min_new_tokens=3)
        single = pipe(sources[0])
    print(json.dumps({
        "pipeline_module": type(pipe).__module__,
        "model_module": type(pipe.model).__module__,
        "batched": [r["translation_text"] for r in batched],
        "greedy": [r["translation_text"] for r in greedy],
        "single": single,
        "warnings": [str(w.message) for w in caught],
    }))
    """
)


def test_remote_code_pipeline_in_a_fresh_process(folder, model, tokenizer, tmp_path):
    home = tmp_path / "hf_home"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "TRANSFORMERS_CACHE")}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(home), HF_MODULES_CACHE=str(home / "modules"), OMP_NUM_THREADS="1")
    completed = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(folder), json.dumps(SOURCES)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["pipeline_module"].startswith("transformers_modules.")
    assert result["model_module"].startswith("transformers_modules.")
    assert result["batched"] == _generate_texts(model, tokenizer, SOURCES, 2)
    assert result["greedy"] == _generate_texts(model, tokenizer, SOURCES, 5, num_beams=1, min_new_tokens=3)
    assert result["single"] == [{"translation_text": result["batched"][0]}]
    assert result["warnings"] == []
    assert "Do you wish to run the custom code" not in completed.stdout + completed.stderr
