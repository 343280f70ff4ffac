"""A joint source+target BPE vocabulary, wrapped as a `transformers` fast tokenizer.

The paper shares one embedding matrix between encoder input, decoder input and softmax (§3.4), which only
makes sense with one vocabulary for both languages: "byte-pair encoding, which has a shared source-target
vocabulary of about 37000 tokens" (§5.1). So the BPE model is trained on both sides of the training split.

Text handling is SentencePiece-like (Metaspace), so `decode` gives back the text, not a re-spaced version:

* NFKC normalisation first: compatibility characters are folded (`ﬁ` → `fi`, full-width `Ａ` → `A`,
  no-break space → space); text already in NFKC comes back unchanged.
* Every space becomes `▁` and starts a new piece, and a `▁` is prepended to the sentence. Runs of spaces
  therefore survive (`"a  b"` decodes to `"a  b"`, the extra space being a lone `▁` piece), and so does
  spacing around punctuation (`"Hund , läuft"` stays as it is, no Moses-style re-joining). The one thing
  lost is a single leading space, which the decoder cannot tell apart from the prepended `▁`; the data
  loader strips sentences, so training text has none.
* Each punctuation character is a piece of its own (as SentencePiece's script splitting does), so merges
  never glue a word to the comma after it. Decoding concatenates the pieces, so this costs no spacing.
* Characters never seen in training become `<unk>` (there is no byte fallback); tabs and newlines are
  ordinary characters, not separators.

Special tokens and ids are fixed, in fairseq's order: `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3 (the defaults of
`VaswaniConfig`; a pad id of 0 would make generate()'s beam search pad with EOS). Every encoded sequence, source or
target, ends with `</s>` and has no `<s>` (Marian's convention); `<s>` is the decoder start token, which the
model prepends when it shifts the labels right.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from itertools import chain
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from ..staging import staged_files, staged_folder
from ..usage import TRAINED_WITH_FILE  # what a tokenizer was trained with (written beside it)

logger = logging.getLogger(__name__)

BOS_TOKEN, PAD_TOKEN, EOS_TOKEN, UNK_TOKEN = "<s>", "<pad>", "</s>", "<unk>"
# The order fixes the ids: bos=0, pad=1, eos=2, unk=3 (fairseq's dictionary, VaswaniConfig's defaults).
SPECIAL_TOKENS = (BOS_TOKEN, PAD_TOKEN, EOS_TOKEN, UNK_TOKEN)
BOS_TOKEN_ID, PAD_TOKEN_ID, EOS_TOKEN_ID, UNK_TOKEN_ID = range(len(SPECIAL_TOKENS))


def train_joint_bpe(
    texts: Iterable[str],
    vocab_size: int,
    min_frequency: int = 2,
    model_max_length: int = 1024,
    *,
    length: int | None = None,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a BPE tokenizer on `texts` (source and target sentences together) and wrap it for transformers.

    Args:
        texts: training sentences of both languages; any iterable, consumed once.
        vocab_size: the largest vocabulary wanted, special tokens and single characters included. The result
            can be smaller when the texts have too few frequent pairs to merge.
        min_frequency: a pair is merged only if it occurs at least this often.
        model_max_length: the length `truncation=True` cuts to.
        length: the number of texts, if known (only for the progress bar).
        show_progress: show the `tokenizers` progress bar (for real corpora).
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(
            f"vocab_size={vocab_size} leaves no room beyond the {len(SPECIAL_TOKENS)} special tokens "
            f"{list(SPECIAL_TOKENS)}"
        )
    if min_frequency < 1:
        raise ValueError(f"min_frequency={min_frequency} must be at least 1")

    tokenizer = Tokenizer(models.BPE(unk_token=UNK_TOKEN))
    _set_pipeline(tokenizer)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        # The BPE trainer keeps every character it sees even past vocab_size; capping the alphabet keeps
        # the vocabulary within the request (the rarest characters become <unk>).
        limit_alphabet=vocab_size - len(SPECIAL_TOKENS),
        show_progress=show_progress,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer, length=length)
    release_free_heap()
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"special token {token!r} got id {tokenizer.token_to_id(token)}, expected {expected_id}")
    tokenizer.post_processor = _post_processor()
    logger.info("trained joint BPE: %d tokens (requested %d)", tokenizer.get_vocab_size(), vocab_size)

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=UNK_TOKEN,
        model_max_length=model_max_length,
        padding_side="right",
        # The Metaspace decoder already restores the spacing; HF's clean-up would glue " ." to ".".
        clean_up_tokenization_spaces=False,
    )


def release_free_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc `malloc_trim`; nothing elsewhere).

    The BPE trainer's word and pair tables are freed when training ends, but glibc keeps most of those pages (450 MB
    of 910 MB after training on 450k pairs); the data path keeps running for minutes after, and forks workers.
    """
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _set_pipeline(tokenizer: Tokenizer) -> None:
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True),
            # Beyond plain Metaspace, like SentencePiece's split_by_unicode_script: no merge crosses a
            # punctuation mark, so "Straße." and "Straße" share "▁Straße". Decoding is unaffected.
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)


def _post_processor() -> processors.TemplateProcessing:
    return processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}",
        pair=f"$A {EOS_TOKEN} $B:1 {EOS_TOKEN}:1",
        special_tokens=[(EOS_TOKEN, EOS_TOKEN_ID)],
    )


def joint_bpe_pipeline_json() -> dict:
    """The normalizer, pre-tokenizer and post-processor of `train_joint_bpe`, as `tokenizer.json` writes them.

    training/data/cache.py encodes word by word only for a tokenizer whose pipeline is exactly this one.
    """
    reference = Tokenizer(models.BPE(vocab={"a": 0}, merges=[], unk_token=UNK_TOKEN))
    _set_pipeline(reference)
    reference.post_processor = _post_processor()
    described = json.loads(reference.to_str())
    return {key: described[key] for key in ("normalizer", "pre_tokenizer", "post_processor")}


def _both_sides(dataset: Dataset, source_lang: str, target_lang: str, batch_size: int = 1000) -> Iterator[list[str]]:
    """Batches of sentences, source then target, read as Arrow record batches (memory bounded by a batch).

    Small batches: `train_from_iterator` buffers 256 items of the iterator, here 256 x 1000 sentences (~40 MB).
    Each batch goes to the trainer as one text, its sentences joined by spaces (see `_joined`).
    """
    normalizer = normalizers.NFKC()
    for table in dataset.with_format("arrow").iter(batch_size=batch_size):
        pairs = table.column("translation")
        for lang in (source_lang, target_lang):
            yield _joined(pc.struct_field(pairs, [lang]).to_pylist(), normalizer)


def _joined(texts: list[str], normalizer: normalizers.Normalizer) -> list[str]:
    """`texts` as one text joined by spaces, plus the sentences that must stay apart: the same words for the trainer.

    The BPE trainer only counts the words the pre-tokenizer makes of each text. Metaspace splits at every space and
    gives the first word of a text the `▁` a space gives every other word, so joining sentences with one space gives
    the trainer the same words (and the same vocabulary) with one text to handle per batch instead of a thousand
    (a fifth less CPU time at 45k pairs, the same tokenizer.json). Not for a sentence that is empty or starts with a
    space or a `▁` after NFKC (a no-break space, `¨`, ...): Metaspace prepends no `▁` to a text that starts with one,
    so alone it has no extra `▁` piece, joined it would; those are passed as they are.
    """
    joined: list[str] = []
    apart: list[str] = []
    for text in texts:
        first = text[:1]
        if first.isascii():
            separate = first in ("", " ")
        else:
            separate = normalizer.normalize_str(first)[:1] in (" ", "\u2581")
        if separate:
            apart.append(text)
        else:
            joined.append(text)
    return [" ".join(joined), *apart] if joined else apart


def load_or_train_tokenizer(
    tokenizer_name_or_path: str | os.PathLike[str] | None,
    train_dataset: Dataset,
    source_lang: str,
    target_lang: str,
    vocab_size: int,
    min_frequency: int = 2,
    model_max_length: int = 1024,
    save_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> PreTrainedTokenizerBase:
    """Load the tokenizer at `tokenizer_name_or_path`, or train a joint BPE on both sides of `train_dataset`.

    A given tokenizer is used as it is (its vocabulary and special tokens win over `vocab_size`); failing to
    load it is an error rather than a silent retrain. A trained tokenizer is saved to `save_dir` when given,
    so a later run (and the saved model) can reuse it.

    Args:
        tokenizer_name_or_path: a folder written by `save_pretrained` (or a Hub name), or None to train.
        train_dataset: the train split, a `translation` column of `{source_lang: str, target_lang: str}`.
        source_lang, target_lang: the keys of the translation dicts.
        vocab_size, min_frequency, model_max_length: see `train_joint_bpe`.
        save_dir: where to save a newly trained tokenizer.
        cache_dir: where trained tokenizers are kept by what they were trained on (the train split's `datasets`
            fingerprint, which for local files follows their content) and with: the same data and options load the
            earlier result instead of training again (after checking it against its record, CACHE_RECORD_FILE: a damaged
            one is named in a warning and trained again). None (or an in-memory train split) trains every time.
    """
    if tokenizer_name_or_path is not None:
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name_or_path)
        for attribute in ("pad_token", "eos_token"):
            if getattr(tokenizer, attribute) is None:
                raise ValueError(
                    f"tokenizer {str(tokenizer_name_or_path)!r} has no {attribute}; translation training "
                    "needs one (padding and end of sentence)"
                )
        logger.info("loaded tokenizer from %s (%d tokens)", tokenizer_name_or_path, len(tokenizer))
        return tokenizer

    if "translation" not in train_dataset.column_names:
        raise ValueError(f"train_dataset has no 'translation' column (columns: {train_dataset.column_names})")
    logger.info(
        "training a joint %s+%s BPE tokenizer (vocab_size=%d) on %d sentence pairs",
        source_lang,
        target_lang,
        vocab_size,
        len(train_dataset),
    )
    cached = None
    if cache_dir is not None and train_dataset.cache_files:
        key_source = json.dumps(
            [_BPE_VERSION, train_dataset._fingerprint, source_lang, target_lang, vocab_size, min_frequency,
             model_max_length]
        )  # fmt: skip
        cached = Path(cache_dir) / f"bpe-{hashlib.sha256(key_source.encode()).hexdigest()[:24]}"
        tokenizer = _open_cached_bpe(cached) if cached.exists() else None
        if tokenizer is not None:
            logger.info("loaded the BPE trained earlier on the same data and options from %s", cached)
            if save_dir is not None:
                _save_trained(tokenizer, save_dir, vocab_size, min_frequency, source_lang, target_lang, train_dataset)
            return tokenizer
    tokenizer = train_joint_bpe(
        _both_sides(train_dataset, source_lang, target_lang),
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        model_max_length=model_max_length,
        length=2 * len(train_dataset),
        show_progress=len(train_dataset) > 100_000,
    )
    if cached is not None:
        _save_to_cache(tokenizer, cached)
    if save_dir is not None:
        _save_trained(tokenizer, save_dir, vocab_size, min_frequency, source_lang, target_lang, train_dataset)
    return tokenizer


# Bump when train_joint_bpe changes what it produces, so cached tokenizers from older code are not reused.
# 2: the cache folder holds a record (CACHE_RECORD_FILE) that opening checks.
_BPE_VERSION = 2
# In a cached BPE folder, written last: the SHA-256 of tokenizer.json and the vocabulary size, checked on opening.
CACHE_RECORD_FILE = "cache_record.json"


def _open_cached_bpe(folder: Path) -> PreTrainedTokenizerBase | None:
    """The tokenizer cached in `folder` when it is whole: its record parses, tokenizer.json has the recorded SHA-256,
    and the loaded tokenizer has the recorded number of tokens. Otherwise (what a crash without fsync leaves: an empty
    or cut file) a one-line warning naming the folder, the folder removed, and None: the caller trains again."""
    try:
        record = json.loads((folder / CACHE_RECORD_FILE).read_text(encoding="utf-8"))
        digest = hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
        if digest != record["sha256"]:
            raise ValueError("tokenizer.json is not the file that was saved (its SHA-256 differs)")
        tokenizer = AutoTokenizer.from_pretrained(folder)
        if len(tokenizer) != record["tokens"]:
            raise ValueError(f"it has {len(tokenizer)} tokens, the record says {record['tokens']}")
    except Exception as error:  # noqa: BLE001  whatever a damaged file makes the loaders raise: rebuild
        text = str(error).strip()
        reason = text.splitlines()[0] if text else type(error).__name__
        logger.warning("the cached BPE tokenizer %s is damaged (%s); training it again", folder, reason)
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return tokenizer


def _save_trained(tokenizer, save_dir, vocab_size, min_frequency, source_lang, target_lang, train_dataset) -> None:
    trained_with = {
        "vocab_size": vocab_size,
        "min_frequency": min_frequency,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "train_pairs": len(train_dataset),
        "tokens": len(tokenizer),
    }
    save_trained_tokenizer(tokenizer, save_dir, trained_with)
    logger.info("saved the tokenizer to %s", save_dir)


def _save_to_cache(tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """Save into a staging folder renamed into place, so a killed run never leaves a half tokenizer to reuse; when
    another process (rank) saved the same one first, its folder is kept once its record is there."""
    with staged_folder(folder, is_complete=lambda found: (found / CACHE_RECORD_FILE).is_file()) as staging:
        tokenizer.save_pretrained(staging)
        record = {
            "sha256": hashlib.sha256((staging / "tokenizer.json").read_bytes()).hexdigest(),
            "tokens": len(tokenizer),
        }
        (staging / CACHE_RECORD_FILE).write_text(json.dumps(record) + "\n", encoding="utf-8")


def save_trained_tokenizer(tokenizer: PreTrainedTokenizerBase, save_dir: str | os.PathLike[str], trained_with: dict):
    """Save `tokenizer` into `save_dir` with a record of what it was trained with, all or nothing.

    The files are written into a staging folder inside `save_dir` and moved in, the record last (training/staging.py's
    `staged_files`): a run killed on the way leaves either a complete tokenizer with its record, or files without a
    record, which the next run refuses instead of silently reusing them."""
    with staged_files(save_dir, seal=TRAINED_WITH_FILE) as staging:
        tokenizer.save_pretrained(staging)
        (staging / TRAINED_WITH_FILE).write_text(json.dumps(trained_with, indent=2) + "\n", encoding="utf-8")


# ---- the word cache: encoding a corpus with this BPE, one distinct word at a time ----------------------------------


def flatten_ids(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Rows of token ids as (lengths, values): the ragged form the data cache stores."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    return lengths, np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))


class WordIndex(dict):
    """Word -> word number, -1 for a word not seen yet (so that lookups over a batch run in C, misses included)."""

    def __missing__(self, word: str) -> int:
        return -1


class WordCache:
    """Encode sentences word by word through a cache, for the joint BPE above.

    Its pre-tokenizer (Metaspace, split on every space, then punctuation isolated) never lets a piece cross a space,
    so after NFKC a sentence's ids are the ids of its space-separated words, each encoded alone (Metaspace gives
    every word its leading `▁`), followed by the EOS of the post-processor. Natural text repeats its words (Zipf),
    so each distinct word goes through the Rust tokenizer once per cache lifetime instead of once per occurrence:
    the Rust pre-tokenizer costs ~100 µs a sentence on this project's CPU, a dictionary lookup well under 1 µs a word.

    Used only when the tokenizer's normalizer, pre-tokenizer, BPE model and post-processor are exactly the joint
    BPE's (compared as JSON), and checked on the first batch against the tokenizer's own `encode_batch`: any
    difference turns it off for the run. Sentences the rule does not cover (empty, starting with a space after
    normalisation, or holding a `▁`) go to the tokenizer as they are.

    The cache is a dictionary from word to word number and the words' ids in one array (`pool`, with each word's
    start and length), so that a batch is encoded with one dictionary lookup per word in C (`map`) and array
    operations, not a Python loop over its sentences.
    """

    MAX_WORDS = 2_000_000  # cleared when full: bounds memory (~250 MB) on corpora with a very long tail

    def __init__(self, backend, suffix: list[int], space_ids: list[int], nfkc: bool):
        self.backend = backend
        self.suffix = suffix
        self.nfkc = nfkc
        self.space_ids = space_ids
        self._clear()
        self.verified = False

    def _clear(self) -> None:
        self.index = WordIndex()
        self.pool = np.zeros(0, dtype=np.int64)
        self.word_starts = np.zeros(0, dtype=np.int64)
        self.word_lengths = np.zeros(0, dtype=np.int64)
        self._add([""], [self.space_ids])  # two spaces in a row leave a lone `▁` piece

    def _add(self, words: list[str], ids: list[list[int]]) -> None:
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        starts = len(self.pool) + np.cumsum(lengths) - lengths
        values = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        self.pool = np.concatenate([self.pool, values])
        self.word_starts = np.concatenate([self.word_starts, starts])
        self.word_lengths = np.concatenate([self.word_lengths, lengths])
        self.index.update(zip(words, range(len(self.index), len(self.index) + len(words))))

    @classmethod
    def for_backend(cls, backend) -> WordCache | None:
        try:
            described = json.loads(backend.to_str())
        except (ValueError, AttributeError):
            return None
        expected = joint_bpe_pipeline_json()
        if any(described.get(key) != value for key, value in expected.items()):
            return None
        model = described.get("model") or {}
        if model.get("type") != "BPE" or model.get("dropout") not in (None, 0.0):
            return None
        if backend.encode("", add_special_tokens=False).ids:
            return None
        space_ids = backend.encode("a  a", add_special_tokens=False).ids
        word_ids = backend.encode("a", add_special_tokens=False).ids
        if space_ids[: len(word_ids)] != word_ids or space_ids[-len(word_ids) :] != word_ids:
            return None
        return cls(backend, backend.encode("").ids, space_ids[len(word_ids) : -len(word_ids)], nfkc=True)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids per sentence, all ids concatenated), as `_SplitBuilder._encode` returns them."""
        if not self.verified:
            return self._verify(texts)
        return self._encode(texts)

    def _reference(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch_fast(texts, add_special_tokens=True)]

    def _verify(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        reference = flatten_ids(self._reference(texts))
        mine = self._encode(texts)
        self.verified = True
        if all(np.array_equal(a, b) for a, b in zip(mine, reference, strict=True)):
            return reference
        ends = np.cumsum(mine[0])
        rows = np.split(mine[1], ends[:-1]) if len(texts) else []
        first = next(i for i, (a, b) in enumerate(zip(rows, self._reference(texts), strict=True)) if a.tolist() != b)
        logger.warning(
            "word-cache encoding differs from the tokenizer on %r; encoding sentence by sentence", texts[first]
        )
        self._clear()
        self.encode = lambda batch: flatten_ids(self._reference(batch))
        return reference

    def _encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Batch-wide: the sentences joined by spaces and split once give every sentence's words in order (each
        sentence has `count(" ") + 1` of them), so the lookups, the ids and the lengths are whole-batch operations
        instead of a Python loop over the sentences."""
        if not texts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        normalizer = self.backend.normalizer
        if len(self.index) > self.MAX_WORDS:
            self._clear()
        if normalizer is not None:
            # NFKC leaves ASCII unchanged, so only other text pays for the normaliser call.
            texts = [text if text.isascii() else normalizer.normalize_str(text) for text in texts]
        joined = " ".join(texts)
        if "\u2581" in joined or not all(text and text[0] != " " for text in texts):
            return self._encode_mixed(texts)
        words = joined.split(" ")
        numbers = np.fromiter(map(self.index.__getitem__, words), dtype=np.int64, count=len(words))
        misses = np.flatnonzero(numbers < 0).tolist()
        if misses:
            new = list(dict.fromkeys(words[i] for i in misses))
            self._add(new, [e.ids for e in self.backend.encode_batch_fast(new, add_special_tokens=False)])
            numbers[misses] = [self.index[words[i]] for i in misses]
        piece_lengths = self.word_lengths[numbers]
        word_counts = np.fromiter((text.count(" ") + 1 for text in texts), dtype=np.int64, count=len(texts))
        first_words = np.cumsum(word_counts) - word_counts
        # Each word's ids gathered from the pool: position = the word's start + the index within the word.
        piece_ends = np.cumsum(piece_lengths)
        within = np.arange(int(piece_ends[-1])) - np.repeat(piece_ends - piece_lengths, piece_lengths)
        word_ids = self.pool[np.repeat(self.word_starts[numbers], piece_lengths) + within]
        suffix = np.asarray(self.suffix, dtype=np.int64)
        lengths = np.add.reduceat(piece_lengths, first_words) + len(suffix)
        if not len(suffix):
            return lengths, word_ids
        # The suffix (the EOS) after each sentence's word ids: scatter the word ids around the suffix positions.
        values = np.empty(int(lengths.sum()), dtype=np.int64)
        is_suffix = np.zeros(len(values), dtype=bool)
        suffix_positions = (np.cumsum(lengths) - len(suffix))[:, None] + np.arange(len(suffix))
        is_suffix[suffix_positions.ravel()] = True
        values[is_suffix] = np.tile(suffix, len(texts))
        values[~is_suffix] = word_ids
        return lengths, values

    def _encode_mixed(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Sentences the word rule does not cover go to the tokenizer as they are, the others through `_encode`; then
        back in order. Not covered: empty, starting with a space after normalisation, or holding a `▁` (Metaspace adds
        no `▁` to a text that starts with one, so a word `▁b` encoded alone lacks the lone `▁` piece it gets after a
        space inside a sentence)."""
        covered = [bool(text) and text[0] != " " and "\u2581" not in text for text in texts]
        whole = [i for i, ok in enumerate(covered) if not ok]
        rule = [i for i, ok in enumerate(covered) if ok]
        rows: list[list[int] | None] = [None] * len(texts)
        for index, ids in zip(whole, self._reference([texts[i] for i in whole]), strict=True):
            rows[index] = ids
        if rule:
            lengths, values = self._encode([texts[i] for i in rule])
            for index, ids in zip(rule, np.split(values, np.cumsum(lengths)[:-1]), strict=True):
                rows[index] = ids.tolist()
        return flatten_ids(rows)
