"""Tests for the embedded English → Toy Teutonic corpus (training/data/toy_corpus.py)."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from hf_vaswani_training.data import toy_corpus as tc
from hf_vaswani_training.data import toy_lexicon
from hf_vaswani_training.data.toy_corpus import (
    Clause,
    NounPhrase,
    PrepPhrase,
    Pronoun,
    Sentence,
    generate_corpus,
    render_clause_tt,
    render_en,
    render_noun_phrase_en,
    render_noun_phrase_tt,
    render_pair,
    render_tt,
)

PUNCTUATION = {".", ",", "?"}


def noun(en: str) -> toy_lexicon.Noun:
    return next(n for n in toy_lexicon.NOUNS if n.en == en)


def adjective(en: str) -> toy_lexicon.Adjective:
    return next(a for a in toy_lexicon.ADJECTIVES if a.en == en)


def verb(en: str) -> toy_lexicon.Verb:
    return next(v for v in toy_lexicon.VERBS if v.en == en)


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[dict[str, str]]]:
    return generate_corpus()  # the default size, as the training entry point uses it


# ----------------------------------------------------------------------------------------------------------
# The corpus as a whole
# ----------------------------------------------------------------------------------------------------------


def test_language_codes() -> None:
    assert (tc.SOURCE_LANG, tc.TARGET_LANG) == ("en", "tt")


def test_split_sizes_and_format(corpus: dict[str, list[dict[str, str]]]) -> None:
    assert list(corpus) == ["train", "validation", "test"]
    assert [len(corpus[split]) for split in corpus] == [40000, 1000, 1000]
    for pairs in corpus.values():
        assert all(set(pair) == {"en", "tt"} for pair in pairs)
    assert [len(split) for split in generate_corpus(7, 3, 5, seed=1).values()] == [7, 3, 5]


def test_same_seed_same_corpus_different_seed_different() -> None:
    first = generate_corpus(300, 30, 30, seed=3)
    assert first == generate_corpus(300, 30, 30, seed=3)
    other = generate_corpus(300, 30, 30, seed=4)
    assert first["train"] != other["train"]
    assert first["test"] != other["test"]


def test_generation_does_not_touch_the_global_rng() -> None:
    random.seed(123)
    expected = random.random()
    random.seed(123)
    generate_corpus(50, 5, 5, seed=0)
    assert random.random() == expected


def test_evaluation_splits_do_not_depend_on_train_size() -> None:
    small, large = generate_corpus(10, 40, 40, seed=2), generate_corpus(500, 40, 40, seed=2)
    assert small["test"] == large["test"]
    assert small["validation"] == large["validation"]


def test_source_sentences_are_unique_and_splits_disjoint(corpus: dict[str, list[dict[str, str]]]) -> None:
    sources = {split: [pair["en"] for pair in pairs] for split, pairs in corpus.items()}
    for split, sentences in sources.items():
        assert len(set(sentences)) == len(sentences), split
    assert not set(sources["train"]) & set(sources["validation"])
    assert not set(sources["train"]) & set(sources["test"])
    assert not set(sources["validation"]) & set(sources["test"])


def test_negative_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="num_test=-1"):
        generate_corpus(10, 10, -1)


def test_sentence_shape(corpus: dict[str, list[dict[str, str]]]) -> None:
    lengths = []
    for pair in corpus["train"]:
        source, target = pair["en"].split(" "), pair["tt"].split(" ")
        lengths.append(len(source))
        assert tc.MIN_SOURCE_TOKENS <= len(source) <= tc.MAX_SOURCE_TOKENS, pair
        assert source[-1] == target[-1] and source[-1] in {".", "?"}, pair
        assert source[0][0].isupper() and target[0][0].isupper(), pair
        assert all(source) and all(target), pair  # single spaces only: no empty tokens
    assert 10 <= statistics.mean(lengths) <= 12


def test_vocabulary_sizes(corpus: dict[str, list[dict[str, str]]]) -> None:
    source_vocab = {word for pair in corpus["train"] for word in pair["en"].split()}
    target_vocab = {word for pair in corpus["train"] for word in pair["tt"].split()}
    # A few hundred lexemes; the target has more forms because it inflects articles, adjectives and verbs.
    assert 400 <= len(source_vocab) <= 700
    assert 1000 <= len(target_vocab) <= 1600
    assert len(target_vocab) > 1.5 * len(source_vocab)


def test_target_is_not_a_copy(corpus: dict[str, list[dict[str, str]]]) -> None:
    shared_fraction = []
    for pair in corpus["train"]:
        source = {word.lower() for word in pair["en"].split()}
        target = [word.lower() for word in pair["tt"].split() if word not in PUNCTUATION]
        shared_fraction.append(sum(word in source for word in target) / len(target))
    assert max(shared_fraction) == 0.0
    # Nor a word-by-word substitution: the number of words changes in many sentences.
    changed = sum(len(p["en"].split()) != len(p["tt"].split()) for p in corpus["train"])
    assert changed > 0.3 * len(corpus["train"])


def test_translation_is_a_function_of_the_source() -> None:
    rng = random.Random(11)
    seen: dict[str, str] = {}
    repeats = 0
    for _ in range(20000):
        pair = render_pair(tc.sample_sentence(rng))
        if pair["en"] in seen:
            repeats += 1
            assert seen[pair["en"]] == pair["tt"], pair["en"]
        seen[pair["en"]] = pair["tt"]
    assert repeats > 200  # the check above did run on many repeated sources


def test_target_nouns_are_capitalised(corpus: dict[str, list[dict[str, str]]]) -> None:
    noun_forms = {form.lower() for n in toy_lexicon.NOUNS for form in (n.tt, n.tt_plural)}
    seen = 0
    for pair in corpus["validation"]:
        for word in pair["tt"].split()[1:]:
            if word.lower() in noun_forms:
                seen += 1
                assert word[0].isupper(), pair
            else:
                assert word.islower() or word in PUNCTUATION, pair
    assert seen > 1000


def test_every_phenomenon_occurs_in_the_corpus(corpus: dict[str, list[dict[str, str]]]) -> None:
    targets = [pair["tt"] for pair in corpus["train"]]
    words = {word for target in targets for word in target.split()}
    words |= {target.split()[0].lower() for target in targets}  # fronted words are capitalised
    required = {
        "subordinate clauses": set(toy_lexicon.SUBORDINATORS.values()) | {"thata"},
        "coordination": set(toy_lexicon.COORDINATORS.values()),
        "fronted adverbs": set(toy_lexicon.TIME_ADVERBS.values()),
        "manner adverbs": set(toy_lexicon.MANNER_ADVERBS.values()),
        "negation": {"niht", "nainen", "naina", "nain"},
        "case-marked articles": set(toy_lexicon.DEFINITE_ARTICLE.values()),
        "irregular plurals": {"Gumen", "Hüser", "Müse", "Gänse", "Büke", "Kuninginnen"},
        "zero plurals": {"Larar", "Swin"},
        "regular plurals": {"Huntor", "Kattan", "Hrose", "Frastir"},
        "compound numbers": {"unda", "twaitig"},
        "copula": set(toy_lexicon.COPULA_TT.values()),
        "verb persons": {"slape", "slapst", "slapt", "slapam", "slapen"},
        "vowel change": {"siht", "sihst", "sahe", "sahen"},
        "adjective agreement": {"groter", "grote", "grotes", "groten"},
    }
    for phenomenon, forms in required.items():
        assert forms <= words, (phenomenon, forms - words)
    assert sum(target.endswith("?") for target in targets) > 1000


def test_subordinate_clauses_are_verb_final_in_the_corpus() -> None:
    rng = random.Random(5)
    checked = 0
    for _ in range(3000):
        sentence = tc.sample_sentence(rng)
        if sentence.kind not in ("sub_after", "that"):
            continue
        second = sentence.second
        finite = tc.conjugate_tt(second.verb, second.subject.person)
        assert render_tt(sentence).split()[-2] == finite, render_tt(sentence)
        checked += 1
    assert checked > 500


# ----------------------------------------------------------------------------------------------------------
# Each phenomenon on a constructed example
# ----------------------------------------------------------------------------------------------------------


def test_adjective_follows_the_noun_in_the_target() -> None:
    phrase = NounPhrase(noun("dog"), adjective=adjective("big"))
    assert render_noun_phrase_en(phrase) == ["the", "big", "dog"]
    assert render_noun_phrase_tt(phrase) == ["dor", "Hunto", "groter"]


@pytest.mark.parametrize(
    ("en", "plural", "expected"),
    [
        ("dog", False, ["dor", "Hunto", "groter"]),
        ("cat", False, ["dia", "Katta", "grote"]),
        ("horse", False, ["dat", "Hros", "grotes"]),
        ("horse", True, ["dei", "Hrose", "groten"]),
    ],
)
def test_article_and_adjective_agree_with_gender_and_number(en: str, plural: bool, expected: list[str]) -> None:
    assert render_noun_phrase_tt(NounPhrase(noun(en), plural, adjective=adjective("big"))) == expected


def test_plural_morphology() -> None:
    plurals = {n.en: (n.en_plural, n.tt_plural) for n in toy_lexicon.NOUNS}
    assert plurals["dog"] == ("dogs", "Huntor")  # m, vowel-final: -r
    assert plurals["fox"] == ("foxes", "Fuhsar")  # m, consonant-final: -ar
    assert plurals["goat"] == ("goats", "Geiten")  # f: -en
    assert plurals["rabbit"] == ("rabbits", "Kanine")  # n: -e
    assert plurals["city"] == ("cities", "Burgen")
    assert plurals["man"] == ("men", "Gumen")  # irregular on both sides
    assert plurals["house"] == ("houses", "Hüser")  # umlaut plural
    assert plurals["teacher"] == ("teachers", "Larar")  # zero plural: the article shows the number
    english_plurals = [n.en_plural for n in toy_lexicon.NOUNS]
    assert len(set(english_plurals)) == len(toy_lexicon.NOUNS)
    assert not set(english_plurals) & {n.en for n in toy_lexicon.NOUNS}  # number is always visible in English


def test_case_marking_of_articles() -> None:
    dog, cat = NounPhrase(noun("dog")), NounPhrase(noun("cat"))
    clause = Clause(dog, verb("see"), cat, prep_phrase=PrepPhrase("in", NounPhrase(noun("garden"))))
    assert render_pair(Sentence("simple", clause)) == {
        "en": "The dog sees the cat in the garden .",
        "tt": "Dor Hunto siht dia Katta inna dom Gard .",
    }
    reverse = Clause(cat, verb("see"), dog)
    assert render_tt(Sentence("simple", reverse)) == "Dia Katta siht don Hunto ."  # dor → don as object


def test_subject_verb_agreement() -> None:
    forms_en, forms_tt = set(), set()
    for key in ("1sg", "2sg", "3sg.m", "1pl", "3pl"):
        pair = render_pair(Sentence("simple", Clause(Pronoun(key), verb("sleep"))))
        forms_en.add(pair["en"].split()[1])
        forms_tt.add(pair["tt"].split()[1])
    assert forms_en == {"sleep", "sleeps"}  # English marks only the 3rd singular
    assert forms_tt == {"slape", "slapst", "slapt", "slapam", "slapen"}
    assert tc.conjugate_tt(verb("wait"), "3sg") == "beidet"  # -e- inserted after a dental
    assert tc.conjugate_tt(verb("see"), "1sg") == "sahe" and tc.conjugate_tt(verb("see"), "3sg") == "siht"
    plural_subject = Clause(NounPhrase(noun("dog"), plural=True), verb("sleep"))
    assert render_pair(Sentence("simple", plural_subject)) == {
        "en": "The dogs sleep .",
        "tt": "Dei Huntor slapen .",
    }


def test_verb_second_after_a_fronted_adverb() -> None:
    clause = Clause(NounPhrase(noun("dog")), verb("see"), NounPhrase(noun("cat")))
    assert render_pair(Sentence("simple", clause, adverb="today")) == {
        "en": "Today the dog sees the cat .",
        "tt": "Hiudag siht dor Hunto dia Katta .",
    }


def test_verb_final_in_subordinate_clauses() -> None:
    main = Clause(NounPhrase(noun("dog")), verb("sleep"))
    second = Clause(NounPhrase(noun("cat")), verb("eat"), NounPhrase(noun("apple")))
    assert render_pair(Sentence("sub_after", main, second, "because")) == {
        "en": "The dog sleeps because the cat eats the apple .",
        "tt": "Dor Hunto slapt , wanda dia Katta don Apal itet .",
    }
    # A fronted subordinate clause takes the first position, so the main clause inverts (verb-second).
    assert render_pair(Sentence("sub_first", main, second, "when")) == {
        "en": "When the cat eats the apple , the dog sleeps .",
        "tt": "Bithe dia Katta don Apal itet , slapt dor Hunto .",
    }
    that = Sentence("that", Clause(Pronoun("1sg"), verb("know")), second)
    assert render_tt(that) == "Ek wite , thata dia Katta don Apal itet ."


def test_coordination_keeps_main_clause_order() -> None:
    first = Clause(NounPhrase(noun("dog")), verb("sleep"))
    second = Clause(NounPhrase(noun("cat")), verb("run"))
    assert render_tt(Sentence("coord", first, second, "and")) == "Dor Hunto slapt jah dia Katta rennt ."
    assert render_tt(Sentence("coord", first, second, "but")) == "Dor Hunto slapt , ak dia Katta rennt ."


def test_negation_placement() -> None:
    man, dog = NounPhrase(noun("man")), NounPhrase(noun("dog"))
    negated = Clause(man, verb("see"), dog, negated=True, prep_phrase=PrepPhrase("in", NounPhrase(noun("park"))))
    assert render_pair(Sentence("simple", negated)) == {
        "en": "The man does not see the dog in the park .",
        "tt": "Dor Gumo siht don Hunto niht inna dom Lund .",
    }
    # In a subordinate clause the particle stays in the middle field, before the final verb.
    assert render_tt(Sentence("sub_after", Clause(dog, verb("sleep")), negated, "because")).endswith(
        "wanda dor Gumo don Hunto niht inna dom Lund siht ."
    )
    # An indefinite object absorbs the negation into its article (German "kein").
    indefinite = Clause(man, verb("see"), NounPhrase(noun("dog"), determiner="a"), negated=True)
    assert render_tt(Sentence("simple", indefinite)) == "Dor Gumo siht nainen Hunto ."
    copula = Clause(Pronoun("3pl"), predicate=adjective("happy"), negated=True)
    assert render_pair(Sentence("simple", copula)) == {
        "en": "They are not happy .",
        "tt": "Thai eru niht frow .",
    }


def test_questions_put_the_verb_first() -> None:
    clause = Clause(NounPhrase(noun("dog")), verb("see"), Pronoun("1sg"))
    assert render_pair(Sentence("question", clause)) == {
        "en": "Does the dog see me ?",
        "tt": "Siht dor Hunto mik ?",
    }
    assert render_clause_tt(clause, "final") == ["dor", "Hunto", "mik", "siht"]


def test_unknown_sentence_kind_and_word_order_are_rejected() -> None:
    clause = Clause(Pronoun("1sg"), verb("sleep"))
    with pytest.raises(ValueError, match="bogus"):
        render_en(Sentence("bogus", clause))
    with pytest.raises(ValueError, match="bogus"):
        render_tt(Sentence("bogus", clause))
    with pytest.raises(ValueError, match="order='sov'"):
        render_clause_tt(clause, "sov")


def test_numbers() -> None:
    assert toy_lexicon.number_words(7) == (["seven"], ["sibun"])
    assert toy_lexicon.number_words(13) == (["thirteen"], ["thritaihun"])
    assert toy_lexicon.number_words(24) == (["twenty", "four"], ["fidwor", "unda", "twaitig"])  # units first
    assert toy_lexicon.number_words(90) == (["ninety"], ["niuntig"])
    phrase = NounPhrase(noun("goose"), plural=True, determiner="num", number=21, adjective=adjective("white"))
    assert render_noun_phrase_en(phrase) == ["twenty", "one", "white", "geese"]
    assert render_noun_phrase_tt(phrase) == ["ain", "unda", "twaitig", "Gänse", "hwiten"]
    with pytest.raises(ValueError, match="value=100"):
        toy_lexicon.number_words(100)


def test_indefinite_and_possessive_determiners() -> None:
    apple = NounPhrase(noun("apple"), determiner="a", adjective=adjective("old"))
    assert render_noun_phrase_en(apple) == ["an", "old", "apple"]
    assert render_noun_phrase_tt(apple, "acc") == ["oinen", "Apal", "alder"]
    assert render_noun_phrase_tt(apple, "dat") == ["oinem", "Apal", "alder"]
    cats = NounPhrase(noun("cat"), plural=True, determiner="poss", possessor="3sg.f")
    assert render_noun_phrase_en(cats) == ["her", "cats"]
    assert render_noun_phrase_tt(cats, "dat") == ["hizen", "Kattan"]


# ----------------------------------------------------------------------------------------------------------
# Lexicon and output files
# ----------------------------------------------------------------------------------------------------------


def test_lexicon_is_invented_and_unambiguous() -> None:
    target_stems = (
        [n.tt for n in toy_lexicon.NOUNS] + [a.tt for a in toy_lexicon.ADJECTIVES] + [v.tt for v in toy_lexicon.VERBS]
    )
    assert len(set(target_stems)) == len(target_stems)
    assert len({n.en for n in toy_lexicon.NOUNS}) == len(toy_lexicon.NOUNS)
    assert (
        80 <= len(toy_lexicon.NOUNS) <= 100
        and 40 <= len(toy_lexicon.ADJECTIVES) <= 60
        and 50 <= len(toy_lexicon.VERBS) <= 80
    )
    assert {n.gender for n in toy_lexicon.NOUNS} == {"m", "f", "n"}
    english_words = (
        {n.en for n in toy_lexicon.NOUNS} | {a.en for a in toy_lexicon.ADJECTIVES} | {v.en for v in toy_lexicon.VERBS}
    )
    assert not english_words & {stem.lower() for stem in target_stems}


def test_jsonl_round_trip_and_cli(tmp_path, capsys) -> None:
    corpus = generate_corpus(20, 5, 6, seed=9)
    paths = tc.write_jsonl(corpus, tmp_path / "direct")
    for split, path in paths.items():
        lines = path.read_text(encoding="utf-8").splitlines()
        assert [json.loads(line)["translation"] for line in lines] == corpus[split]

    argv = ["--out", str(tmp_path / "cli"), "--num-train", "20", "--num-validation", "5", "--num-test", "6"]
    assert tc.main([*argv, "--seed", "9", "--show", "2"]) == 0
    for split in tc.SPLITS:
        assert (tmp_path / "cli" / f"{split}.jsonl").read_bytes() == paths[split].read_bytes()
    printed = capsys.readouterr().out
    assert corpus["train"][1]["tt"] in printed and corpus["train"][2]["tt"] not in printed


def test_dataset_dict_has_a_translation_column() -> None:
    datasets = pytest.importorskip("datasets")
    dataset_dict = tc.corpus_as_dataset_dict(30, 4, 5, seed=6)
    expected = generate_corpus(30, 4, 5, seed=6)
    assert list(dataset_dict) == list(tc.SPLITS)
    for split, dataset in dataset_dict.items():
        assert dataset.column_names == ["translation"]
        assert isinstance(dataset.features["translation"], datasets.Translation)
        assert dataset.features["translation"].languages == ["en", "tt"]
        assert dataset["translation"] == expected[split]
