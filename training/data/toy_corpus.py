"""An embedded parallel corpus: a controlled fragment of English → "Toy Teutonic" (``tt``).

The training entry point needs a default data set that is offline, deterministic and not a copying task.
This module generates one in code: every sentence is first sampled as an abstract structure (clauses,
noun phrases, lexemes) and then rendered into both languages, so the translation is a function of the
English sentence — one correct target for each source. The target language is invented and German-like:
its own lexicon, three genders, case-marked articles, adjectives *after* the noun and agreeing with it,
verb-second main clauses, verb-final subordinate clauses, person/number verb endings, plural classes
with a few irregulars, ``niht``/``nain`` negation and German-style numbers ("one and twenty").
``training/data/TOY_CORPUS.md`` describes the grammar with examples.

Usage::

    corpus = generate_corpus(num_train=40000, seed=0)   # {"train": [{"en": ..., "tt": ...}, ...], ...}
    python -m hf_vaswani_training.data.toy_corpus --out data/toy   # writes train/validation/test .jsonl
"""

from __future__ import annotations

import argparse
import bisect
import functools
import itertools
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .toy_lexicon import (
    ADJECTIVE_ENDINGS,
    ADJECTIVES,
    COMPLEMENTIZER,
    COORDINATORS,
    COPULA_EN,
    COPULA_TT,
    DEFINITE_ARTICLE,
    DO_EN,
    EIN_ENDINGS,
    INDEFINITE_STEM_TT,
    MANNER_ADVERBS,
    NEGATION_TT,
    NEGATIVE_STEM_TT,
    NOUNS,
    POSSESSORS,
    PREPOSITIONS,
    PRONOUNS,
    SUBORDINATORS,
    TIME_ADVERBS,
    VERB_ENDINGS,
    VERBS_BY_VALENCY,
    Adjective,
    Noun,
    Verb,
    number_words,
)

if TYPE_CHECKING:
    import datasets

logger = logging.getLogger(__name__)

SOURCE_LANG = "en"
TARGET_LANG = "tt"
SPLITS = ("train", "validation", "test")
# The default split sizes (generate_corpus, this module's command line, vaswani-train's --toy_num_* options).
NUM_TRAIN, NUM_VALIDATION, NUM_TEST = 40000, 1000, 1000

# Sentences outside these bounds (in space-separated English tokens, punctuation included) are resampled.
MIN_SOURCE_TOKENS = 4
MAX_SOURCE_TOKENS = 25

# ----------------------------------------------------------------------------------------------------------
# Abstract sentences
# ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NounPhrase:
    noun: Noun
    plural: bool = False
    determiner: str = "the"  # "the", "a", "poss" or "num"
    possessor: str | None = None  # a PRONOUNS key when determiner == "poss"
    number: int | None = None  # 2..99 when determiner == "num"
    adjective: Adjective | None = None

    @property
    def person(self) -> str:
        return "3pl" if self.plural else "3sg"


@dataclass(frozen=True)
class Pronoun:
    key: str  # a PRONOUNS key

    @property
    def person(self) -> str:
        return self.key[:3]


@dataclass(frozen=True)
class PrepPhrase:
    preposition: str  # a PREPOSITIONS key
    noun_phrase: NounPhrase


@dataclass(frozen=True)
class Clause:
    subject: NounPhrase | Pronoun
    verb: Verb | None = None  # None = copula with a predicative adjective
    obj: NounPhrase | Pronoun | None = None
    predicate: Adjective | None = None
    negated: bool = False
    manner: str | None = None  # a MANNER_ADVERBS key
    prep_phrase: PrepPhrase | None = None


@dataclass(frozen=True)
class Sentence:
    """One of: "simple", "sub_after" (main + subordinate), "sub_first" (subordinate + main),
    "that" (main with a "that" clause), "coord" (main + and/but + main), "question" (yes/no)."""

    kind: str
    main: Clause
    second: Clause | None = None
    conjunction: str | None = None  # English subordinator/coordinator for sub_*, coord
    adverb: str | None = None  # fronted TIME_ADVERBS key (simple, sub_after, that, coord)


# ----------------------------------------------------------------------------------------------------------
# Rendering: English
# ----------------------------------------------------------------------------------------------------------


def render_noun_phrase_en(phrase: NounPhrase | Pronoun, role: str = "subject") -> list[str]:
    """English words of a noun phrase; role is "subject" or "object" (pronouns only differ)."""
    if isinstance(phrase, Pronoun):
        forms = PRONOUNS[phrase.key]
        return [forms.en_subject if role == "subject" else forms.en_object]
    words = [phrase.noun.en_plural if phrase.plural else phrase.noun.en]
    if phrase.adjective is not None:
        words.insert(0, phrase.adjective.en)
    if phrase.determiner == "the":
        return ["the", *words]
    if phrase.determiner == "a":
        return ["an" if words[0][0] in "aeiou" else "a", *words]
    if phrase.determiner == "poss":
        return [PRONOUNS[phrase.possessor].en_possessive, *words]
    return [*number_words(phrase.number)[0], *words]


def render_clause_en(clause: Clause, question: bool = False) -> list[str]:
    """English is SVO throughout; negation and questions use do-support ("does not see", "does ... see")."""
    subject = render_noun_phrase_en(clause.subject, "subject")
    person = clause.subject.person
    tail: list[str] = []
    if clause.prep_phrase is not None:
        tail = [clause.prep_phrase.preposition, *render_noun_phrase_en(clause.prep_phrase.noun_phrase)]
    if clause.verb is None:
        be = COPULA_EN[person]
        if question:
            return [be, *subject, clause.predicate.en, *tail]
        return [*subject, be, *(["not"] if clause.negated else []), clause.predicate.en, *tail]
    if clause.manner is not None:
        tail = [clause.manner, *tail]
    if clause.obj is not None:
        tail = [*render_noun_phrase_en(clause.obj, "object"), *tail]
    if question:
        return [DO_EN[person], *subject, clause.verb.en, *tail]
    if clause.negated:
        return [*subject, DO_EN[person], "not", clause.verb.en, *tail]
    return [*subject, clause.verb.en_3sg if person == "3sg" else clause.verb.en, *tail]


# ----------------------------------------------------------------------------------------------------------
# Rendering: Toy Teutonic
# ----------------------------------------------------------------------------------------------------------


def render_noun_phrase_tt(phrase: NounPhrase | Pronoun, case: str = "nom", negative: bool = False) -> list[str]:
    """Target words: determiner, noun, then the adjective (English adj-noun becomes noun-adj).

    case is "nom", "acc" or "dat"; negative turns an indefinite article into the negative one (German
    "kein") — the caller decides when negation is absorbed that way.
    """
    if isinstance(phrase, Pronoun):
        forms = PRONOUNS[phrase.key]
        return [forms.tt_subject if case == "nom" else forms.tt_object]
    agreement = "pl" if phrase.plural else phrase.noun.gender
    words = [phrase.noun.tt_plural if phrase.plural else phrase.noun.tt]
    if phrase.adjective is not None:
        words.append(phrase.adjective.tt + ADJECTIVE_ENDINGS[agreement])
    if phrase.determiner == "the":
        return [DEFINITE_ARTICLE[agreement, case], *words]
    if phrase.determiner == "a":
        stem = NEGATIVE_STEM_TT if negative else INDEFINITE_STEM_TT
        return [stem + EIN_ENDINGS[agreement, case], *words]
    if phrase.determiner == "poss":
        return [PRONOUNS[phrase.possessor].tt_possessive + EIN_ENDINGS[agreement, case], *words]
    return [*number_words(phrase.number)[1], *words]


def conjugate_tt(verb: Verb | None, person: str) -> str:
    """Finite target verb: stem + person ending; None is the (irregular) copula."""
    if verb is None:
        return COPULA_TT[person]
    stem = verb.tt_2sg_3sg if person in ("2sg", "3sg") else verb.tt
    ending = VERB_ENDINGS[person]
    if ending in ("st", "t") and stem[-1] in "tdsz":
        ending = "e" + ending
    return stem + ending


def render_clause_tt(clause: Clause, order: str = "main") -> list[str]:
    """Target clause in one of four word orders, around the same "middle field".

    main      subject  VERB  middle          (declarative main clause)
    inverted  VERB  subject  middle          (verb-second after a fronted adverb or clause)
    final     subject  middle  VERB          (subordinate clause: verb-final)
    question  VERB  subject  middle          (yes/no question: verb-first)

    middle = object, negation, manner adverb, prepositional phrase (for the copula: negation, adjective,
    prepositional phrase). Negation of an indefinite object is carried by its article (nain-) instead of
    the particle "niht", as German "kein".
    """
    subject = render_noun_phrase_tt(clause.subject, "nom")
    verb = conjugate_tt(clause.verb, clause.subject.person)
    absorbed = clause.negated and isinstance(clause.obj, NounPhrase) and clause.obj.determiner == "a"
    middle: list[str] = []
    if clause.obj is not None:
        middle += render_noun_phrase_tt(clause.obj, "acc", negative=absorbed)
    if clause.negated and not absorbed:
        middle.append(NEGATION_TT)
    if clause.verb is None:
        middle.append(clause.predicate.tt)
    if clause.manner is not None:
        middle.append(MANNER_ADVERBS[clause.manner])
    if clause.prep_phrase is not None:
        preposition = PREPOSITIONS[clause.prep_phrase.preposition][0]
        middle += [preposition, *render_noun_phrase_tt(clause.prep_phrase.noun_phrase, "dat")]
    if order == "main":
        return [*subject, verb, *middle]
    if order in ("inverted", "question"):
        return [verb, *subject, *middle]
    if order == "final":
        return [*subject, *middle, verb]
    raise ValueError(f"order={order!r} must be one of 'main', 'inverted', 'final', 'question'")


# ----------------------------------------------------------------------------------------------------------
# Rendering: sentences
# ----------------------------------------------------------------------------------------------------------


def _capitalize_first(words: list[str]) -> str:
    words = list(words)
    words[0] = words[0][0].upper() + words[0][1:]
    return " ".join(words)


def render_en(sentence: Sentence) -> str:
    """The English sentence: space-separated tokens, punctuation included, first word capitalised."""
    if sentence.kind not in ("simple", "sub_after", "sub_first", "that", "coord", "question"):
        raise ValueError(f"unknown sentence kind {sentence.kind!r}")
    adverb = [sentence.adverb] if sentence.adverb else []
    main = render_clause_en(sentence.main, question=sentence.kind == "question")
    if sentence.kind == "simple":
        words = [*adverb, *main, "."]
    elif sentence.kind == "question":
        words = [*main, "?"]
    elif sentence.kind == "sub_first":
        words = [sentence.conjunction, *render_clause_en(sentence.second), ",", *main, "."]
    else:
        linker = COMPLEMENTIZER[0] if sentence.kind == "that" else sentence.conjunction
        words = [*adverb, *main, linker, *render_clause_en(sentence.second), "."]
    return _capitalize_first(words)


def render_tt(sentence: Sentence) -> str:
    """The Toy Teutonic translation, tokenised like render_en."""
    adverb = [TIME_ADVERBS[sentence.adverb]] if sentence.adverb else []
    # A fronted adverb takes the first position, so the finite verb comes second (V2).
    head = [*adverb, *render_clause_tt(sentence.main, "inverted" if adverb else "main")]
    if sentence.kind == "simple":
        words = [*head, "."]
    elif sentence.kind == "question":
        words = [*render_clause_tt(sentence.main, "question"), "?"]
    elif sentence.kind == "sub_after":
        conjunction = SUBORDINATORS[sentence.conjunction]
        words = [*head, ",", conjunction, *render_clause_tt(sentence.second, "final"), "."]
    elif sentence.kind == "sub_first":
        # The subordinate clause fills the first position: the main clause inverts.
        conjunction = SUBORDINATORS[sentence.conjunction]
        second = render_clause_tt(sentence.second, "final")
        words = [conjunction, *second, ",", *render_clause_tt(sentence.main, "inverted"), "."]
    elif sentence.kind == "that":
        words = [*head, ",", COMPLEMENTIZER[1], *render_clause_tt(sentence.second, "final"), "."]
    elif sentence.kind == "coord":
        # Coordinated clauses keep main-clause order; "ak" (but) takes a comma, "jah" (and) does not.
        comma = [","] if sentence.conjunction == "but" else []
        conjunction = COORDINATORS[sentence.conjunction]
        words = [*head, *comma, conjunction, *render_clause_tt(sentence.second, "main"), "."]
    else:
        raise ValueError(f"unknown sentence kind {sentence.kind!r}")
    return _capitalize_first(words)


def render_pair(sentence: Sentence) -> dict[str, str]:
    """Render one abstract sentence in both languages, as an HF translation dict {"en": ..., "tt": ...}."""
    return {SOURCE_LANG: render_en(sentence), TARGET_LANG: render_tt(sentence)}


# ----------------------------------------------------------------------------------------------------------
# Sampling
# ----------------------------------------------------------------------------------------------------------


def _weights(options: dict[str, float]) -> tuple[tuple[str, ...], list[float]]:
    return tuple(options), list(itertools.accumulate(options.values()))


def _pick(rng: random.Random, table: tuple[tuple[str, ...], list[float]]) -> str:
    # Same draw as rng.choices(values, cum_weights=cumulative)[0], without its per-call overhead.
    values, cumulative = table
    return values[bisect.bisect(cumulative, rng.random() * cumulative[-1])]


_SENTENCE_KINDS = _weights({"simple": 34, "sub_after": 20, "sub_first": 12, "that": 10, "coord": 12, "question": 12})
_VALENCIES = _weights({"copula": 16, "i": 34, "t": 50})
_DETERMINERS = _weights({"the": 50, "a": 22, "poss": 14, "num": 14})
_NUMBERS_SMALL = tuple(range(2, 13))
_NUMBERS_ALL = tuple(range(2, 100))
_TIME_ADVERB_KEYS = tuple(TIME_ADVERBS)
_MANNER_ADVERB_KEYS = tuple(MANNER_ADVERBS)
_CONJUNCTIONS = {
    "coord": tuple(COORDINATORS),
    "sub_after": tuple(SUBORDINATORS),
    "sub_first": tuple(SUBORDINATORS),
}
_PREPOSITION_KEYS = {
    motion: tuple(p for p, (_, _, needs_motion) in PREPOSITIONS.items() if motion or not needs_motion)
    for motion in (False, True)
}


def _kind_matches(kind: str, kinds: str) -> bool:
    return kind in kinds or (kind == "r" and "o" in kinds)


@functools.cache
def _nouns_of_kinds(kinds: str) -> tuple[Noun, ...]:
    return tuple(n for n in NOUNS if _kind_matches(n.kind, kinds))


@functools.cache
def _pronouns_of_kinds(kinds: str, excluded: str | None = None) -> tuple[str, ...]:
    return tuple(key for key, forms in PRONOUNS.items() if forms.kind in kinds and key != excluded)


_ADJECTIVES_BY_KIND = {kind: tuple(a for a in ADJECTIVES if _kind_matches(kind, a.kinds)) for kind in "hafopr"}


def _sample_noun_phrase(rng: random.Random, kinds: str, adjective_p: float = 0.35) -> NounPhrase:
    noun = rng.choice(_nouns_of_kinds(kinds))
    determiner = _pick(rng, _DETERMINERS)
    plural = determiner == "num" or (determiner in ("the", "poss") and rng.random() < 0.35)
    possessor = rng.choice(POSSESSORS) if determiner == "poss" else None
    number = None
    if determiner == "num":
        number = rng.choice(_NUMBERS_SMALL if rng.random() < 0.6 else _NUMBERS_ALL)
    adjective = None
    if rng.random() < adjective_p:
        adjective = rng.choice(_ADJECTIVES_BY_KIND[noun.kind])
    return NounPhrase(noun, plural, determiner, possessor, number, adjective)


def _sample_subject(rng: random.Random, kinds: str) -> NounPhrase | Pronoun:
    if rng.random() < 0.3:
        return Pronoun(rng.choice(_pronouns_of_kinds(kinds)))
    return _sample_noun_phrase(rng, kinds)


def _sample_object(rng: random.Random, kinds: str, subject: NounPhrase | Pronoun) -> NounPhrase | Pronoun:
    if rng.random() < 0.15:
        # English would need a reflexive ("I see myself") when subject and object are the same person.
        keys = _pronouns_of_kinds(kinds, subject.key if isinstance(subject, Pronoun) else None)
        if keys:
            return Pronoun(rng.choice(keys))
    return _sample_noun_phrase(rng, kinds)


def _subject_kind(subject: NounPhrase | Pronoun) -> str:
    return PRONOUNS[subject.key].kind if isinstance(subject, Pronoun) else subject.noun.kind


def _sample_prep_phrase(rng: random.Random, motion: bool) -> PrepPhrase:
    preposition = rng.choice(_PREPOSITION_KEYS[motion])
    return PrepPhrase(preposition, _sample_noun_phrase(rng, PREPOSITIONS[preposition][1], adjective_p=0.2))


def _sample_clause(rng: random.Random, valency: str | None = None, question: bool = False) -> Clause:
    if valency is None:
        valency = _pick(rng, _VALENCIES)
    negated = not question and rng.random() < 0.2
    if valency == "copula":
        subject = _sample_subject(rng, "hafop")
        predicate = rng.choice(_ADJECTIVES_BY_KIND[_subject_kind(subject)])
        prep_phrase = _sample_prep_phrase(rng, motion=False) if rng.random() < 0.2 else None
        return Clause(subject, None, None, predicate, negated, None, prep_phrase)
    verb = rng.choice(VERBS_BY_VALENCY[valency])
    subject = _sample_subject(rng, verb.subject_kinds)
    if valency == "c":
        return Clause(subject, verb, negated=negated)
    obj = _sample_object(rng, verb.object_kinds, subject) if valency == "t" else None
    manner = rng.choice(_MANNER_ADVERB_KEYS) if rng.random() < 0.12 else None
    prep_phrase = _sample_prep_phrase(rng, verb.motion) if rng.random() < 0.3 else None
    return Clause(subject, verb, obj, None, negated, manner, prep_phrase)


def sample_sentence(rng: random.Random) -> Sentence:
    """One random abstract sentence (any length; generate_corpus filters by length)."""
    kind = _pick(rng, _SENTENCE_KINDS)
    adverb = None
    if kind in ("simple", "sub_after", "that", "coord") and rng.random() < 0.3:
        adverb = rng.choice(_TIME_ADVERB_KEYS)
    if kind == "simple":
        return Sentence(kind, _sample_clause(rng), adverb=adverb)
    if kind == "question":
        return Sentence(kind, _sample_clause(rng, question=True))
    if kind == "that":
        return Sentence(kind, _sample_clause(rng, "c"), _sample_clause(rng), adverb=adverb)
    conjunction = rng.choice(_CONJUNCTIONS[kind])
    return Sentence(kind, _sample_clause(rng), _sample_clause(rng), conjunction, adverb)


# ----------------------------------------------------------------------------------------------------------
# Corpus
# ----------------------------------------------------------------------------------------------------------


def generate_corpus(
    num_train: int = NUM_TRAIN, num_validation: int = NUM_VALIDATION, num_test: int = NUM_TEST, seed: int = 0
) -> dict[str, list[dict[str, str]]]:
    """Deterministic parallel corpus {"train"|"validation"|"test": [{"en": ..., "tt": ...}, ...]}.

    Source sentences are unique across all splits. Test and validation are drawn first, so for a given
    seed they do not change when num_train does.
    """
    sizes = {"test": num_test, "validation": num_validation, "train": num_train}
    for name, size in sizes.items():
        if size < 0:
            raise ValueError(f"num_{name}={size} must be >= 0")
    total = sum(sizes.values())
    start = time.perf_counter()
    rng = random.Random(seed)
    seen: set[str] = set()
    pairs: list[dict[str, str]] = []
    # The sentence space is astronomically larger than any sensible request; the cap only turns a
    # pathological request into an error instead of an endless loop.
    max_draws = 20 * total + 1000
    draws = 0
    while len(pairs) < total:
        draws += 1
        if draws > max_draws:
            raise RuntimeError(f"found only {len(pairs)} unique sentences in {max_draws} draws")
        sentence = sample_sentence(rng)
        source = render_en(sentence)
        if source in seen or not MIN_SOURCE_TOKENS <= source.count(" ") + 1 <= MAX_SOURCE_TOKENS:
            continue
        seen.add(source)
        pairs.append({SOURCE_LANG: source, TARGET_LANG: render_tt(sentence)})
    corpus = {
        "test": pairs[:num_test],
        "validation": pairs[num_test : num_test + num_validation],
        "train": pairs[num_test + num_validation :],
    }
    logger.info("generated %d toy sentence pairs (%d draws) in %.2fs", total, draws, time.perf_counter() - start)
    return {split: corpus[split] for split in SPLITS}


def corpus_as_dataset_dict(
    num_train: int = NUM_TRAIN, num_validation: int = NUM_VALIDATION, num_test: int = NUM_TEST, seed: int = 0
) -> datasets.DatasetDict:
    """generate_corpus as a datasets.DatasetDict with one column "translation" (datasets.Translation)."""
    # Imported here: the generator itself needs only the standard library, and datasets is slow to import.
    import datasets

    features = datasets.Features({"translation": datasets.Translation(languages=[SOURCE_LANG, TARGET_LANG])})
    corpus = generate_corpus(num_train, num_validation, num_test, seed)
    return datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict({"translation": pairs}, features=features)
            for split, pairs in corpus.items()
        }
    )


def write_jsonl(corpus: dict[str, list[dict[str, str]]], out_dir: str | Path) -> dict[str, Path]:
    """Write each split as OUT_DIR/<split>.jsonl, one {"translation": {"en": ..., "tt": ...}} per line."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, pairs in corpus.items():
        path = out_dir / f"{split}.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for pair in pairs:
                handle.write(json.dumps({"translation": pair}, ensure_ascii=False) + "\n")
        paths[split] = path
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="directory for train/validation/test .jsonl")
    parser.add_argument("--num-train", type=int, default=NUM_TRAIN)
    parser.add_argument("--num-validation", type=int, default=NUM_VALIDATION)
    parser.add_argument("--num-test", type=int, default=NUM_TEST)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=8, help="number of training pairs to print")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    corpus = generate_corpus(args.num_train, args.num_validation, args.num_test, args.seed)
    for split, path in write_jsonl(corpus, args.out).items():
        print(f"{split}: {len(corpus[split])} pairs -> {path}")
    for pair in corpus["train"][: args.show]:
        print(f"\n{SOURCE_LANG}: {pair[SOURCE_LANG]}\n{TARGET_LANG}: {pair[TARGET_LANG]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
