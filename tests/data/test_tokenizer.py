"""Tests for training/data/tokenizer.py: exact round trip, fixed special ids, shared vocabulary, save/load."""

from __future__ import annotations

from pathlib import Path

import pytest
from datasets import Dataset
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from hf_vaswani_training.data.tokenizer import load_or_train_tokenizer, train_joint_bpe

GERMAN = [
    "Ein Hund läuft über die Straße.",
    "Zwei Männer sitzen auf einer Bank, und eine Frau liest ein Buch.",
    "Die Kinder spielen im Garten; es ist 15:30 Uhr.",
    "Größere Äpfel kosten 3,50 € pro Kilo!",
    "Ein Mädchen in einem blauen Kleid springt über eine Pfütze.",
    "Warum? Weil die Sonne scheint.",
]
ENGLISH = [
    "A dog runs across the street.",
    "Two men are sitting on a bench, and a woman reads a book.",
    "The children are playing in the garden; it is 3:30 pm.",
    "Bigger apples cost $3.50 per kilo!",
    "A girl in a blue dress jumps over a puddle.",
    "Why? Because the sun is shining.",
]
CORPUS = (GERMAN + ENGLISH) * 20


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return train_joint_bpe(CORPUS, vocab_size=400, min_frequency=2, model_max_length=64)


@pytest.mark.parametrize(
    "sentence",
    [
        *GERMAN,
        *ENGLISH,
        "Größere 1.000 Äpfel , 53 Birnen und 5 Männer !",  # Moses-style spaced punctuation stays spaced
        "Zwei  Hunde   spielen.",  # runs of spaces survive as lone ▁ pieces
        "Ein Hund läuft.  ",  # so do trailing spaces
    ],
)
def test_decode_of_encode_is_identity(tokenizer: PreTrainedTokenizerFast, sentence: str) -> None:
    ids = tokenizer(sentence)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == sentence


def test_documented_normalisation(tokenizer: PreTrainedTokenizerFast) -> None:
    def round_trip(text: str) -> str:
        return tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True)

    assert round_trip("ﬁ") == "fi"  # NFKC folds the ligature
    assert round_trip("Warum…") == "Warum..."  # and the ellipsis
    assert round_trip("Ａ dog") == "A dog"  # and full-width letters
    assert round_trip("A\u00a0dog") == "A dog"  # and the no-break space
    assert round_trip(" A dog") == "A dog"  # a single leading space is the one thing lost


def test_special_token_ids(tokenizer: PreTrainedTokenizerFast) -> None:
    assert tokenizer.convert_tokens_to_ids(["<s>", "<pad>", "</s>", "<unk>"]) == [0, 1, 2, 3]
    assert (
        tokenizer.pad_token_id,
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.unk_token_id,
    ) == (
        1,
        0,
        2,
        3,
    )
    assert tokenizer.padding_side == "right"
    assert tokenizer.model_max_length == 64


def test_eos_appended_and_no_bos(tokenizer: PreTrainedTokenizerFast) -> None:
    batch = tokenizer(["Ein Hund", "Zwei Männer sitzen"], text_target=["A dog", "Two men sit"], padding=True)
    for ids, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True):
        real = [i for i, m in zip(ids, mask, strict=True) if m]
        assert real[-1] == tokenizer.eos_token_id
        assert tokenizer.bos_token_id not in real
        assert real.count(tokenizer.eos_token_id) == 1
        assert ids[len(real) :] == [tokenizer.pad_token_id] * (len(ids) - len(real))  # right padding
    for labels in batch["labels"]:
        assert tokenizer.eos_token_id in labels
        assert labels[0] != tokenizer.bos_token_id


def test_save_and_autotokenizer_load_give_identical_ids(tokenizer: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = [*GERMAN, *ENGLISH, "Zwei  Hunde , 7 Äpfel", "unseen ж character"]
    assert loaded(texts)["input_ids"] == tokenizer(texts)["input_ids"]
    assert loaded(text_target=texts)["input_ids"] == tokenizer(text_target=texts)["input_ids"]
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id, loaded.unk_token_id) == (
        1,
        0,
        2,
        3,
    )
    assert loaded.padding_side == "right"
    assert loaded.model_max_length == 64
    ids = loaded(GERMAN[3])["input_ids"]
    assert loaded.decode(ids, skip_special_tokens=True) == GERMAN[3]


def test_truncation_keeps_eos(tokenizer: PreTrainedTokenizerFast) -> None:
    ids = tokenizer(" ".join(GERMAN), truncation=True, max_length=8)["input_ids"]
    assert len(ids) == 8
    assert ids[-1] == tokenizer.eos_token_id


@pytest.mark.parametrize("vocab_size", [40, 120, 300])
def test_vocab_size_is_at_most_requested(vocab_size: int) -> None:
    # The corpus has more distinct characters than 40, so the smallest size also checks the alphabet cap.
    assert len(set("".join(CORPUS))) > 40
    tok = train_joint_bpe(CORPUS, vocab_size=vocab_size)
    assert len(tok) <= vocab_size
    assert tok.backend_tokenizer.get_vocab_size() <= vocab_size


def test_vocab_size_must_leave_room_for_tokens() -> None:
    with pytest.raises(ValueError, match="vocab_size=4"):
        train_joint_bpe(CORPUS, vocab_size=4)


def test_both_languages_are_covered(tokenizer: PreTrainedTokenizerFast) -> None:
    for word in ("Straße", "Männer", "Pfütze", "puddle", "shining", "children"):
        pieces = tokenizer.tokenize(word)
        assert "<unk>" not in pieces, (word, pieces)
        assert tokenizer.unk_token_id not in tokenizer(word)["input_ids"]
    # Frequent words of either language become single tokens: the merges saw both sides.
    assert tokenizer.tokenize("Straße") == ["▁Straße"]
    assert tokenizer.tokenize("puddle") == ["▁puddle"]
    # A character neither side had is <unk>.
    assert tokenizer.unk_token_id in tokenizer("ж")["input_ids"]


def test_load_or_train_trains_on_both_sides_then_reloads(tmp_path: Path) -> None:
    # Target-only words must enter the vocabulary: train only sees them on the target side.
    dataset = Dataset.from_dict(
        {"translation": [{"de": de, "en": en} for de, en in zip(GERMAN, ENGLISH, strict=True)] * 20}
    )
    trained = load_or_train_tokenizer(None, dataset, "de", "en", vocab_size=400, save_dir=tmp_path / "tok")
    assert trained.tokenize("puddle") == ["▁puddle"]
    assert trained.tokenize("Pfütze") == ["▁Pfütze"]
    reloaded = load_or_train_tokenizer(tmp_path / "tok", dataset, "de", "en", vocab_size=50)
    assert len(reloaded) == len(trained)  # the saved vocabulary wins over vocab_size
    assert reloaded(GERMAN)["input_ids"] == trained(GERMAN)["input_ids"]
    with pytest.raises(OSError):
        load_or_train_tokenizer(tmp_path / "missing", dataset, "de", "en", vocab_size=300)
