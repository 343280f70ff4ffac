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

import logging
import os
from collections.abc import Iterable, Iterator

from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

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
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise RuntimeError(f"special token {token!r} got id {tokenizer.token_to_id(token)}, expected {expected_id}")
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}",
        pair=f"$A {EOS_TOKEN} $B:1 {EOS_TOKEN}:1",
        special_tokens=[(EOS_TOKEN, EOS_TOKEN_ID)],
    )
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


def _both_sides(dataset: Dataset, source_lang: str, target_lang: str, batch_size: int = 1000) -> Iterator[str]:
    for batch in dataset.iter(batch_size=batch_size):
        for pair in batch["translation"]:
            yield pair[source_lang]
            yield pair[target_lang]


def load_or_train_tokenizer(
    tokenizer_name_or_path: str | os.PathLike[str] | None,
    train_dataset: Dataset,
    source_lang: str,
    target_lang: str,
    vocab_size: int,
    min_frequency: int = 2,
    model_max_length: int = 1024,
    save_dir: str | os.PathLike[str] | None = None,
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
    tokenizer = train_joint_bpe(
        _both_sides(train_dataset, source_lang, target_lang),
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        model_max_length=model_max_length,
        length=2 * len(train_dataset),
        show_progress=len(train_dataset) > 100_000,
    )
    if save_dir is not None:
        tokenizer.save_pretrained(save_dir)
        logger.info("saved the tokenizer to %s", save_dir)
    return tokenizer
