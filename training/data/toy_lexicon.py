"""The toy corpus's lexicon and inflection tables: English and "Toy Teutonic" (``tt``) words with their semantic
classes, genders, plurals, verb valencies and endings, articles, pronouns, prepositions, adverbs, conjunctions and
number words. Data for training/data/toy_corpus.py, which samples and renders sentences with it;
``training/data/TOY_CORPUS.md`` describes the grammar. Standard library only.
"""

from __future__ import annotations

from typing import NamedTuple

# Semantic classes keep sentences plausible ("the dog eats the bread", not "the table eats the river"):
# h = human, a = animal, f = food, o = object, p = place, r = readable object (an "o" wherever "o" is
# asked for, but "read" and "write" ask for "r").


class Noun(NamedTuple):
    en: str
    en_plural: str
    tt: str
    tt_plural: str
    gender: str  # "m", "f" or "n"
    kind: str  # semantic class, one of "hafopr"


class Adjective(NamedTuple):
    en: str
    tt: str
    kinds: str  # semantic classes of the nouns it may describe


class Verb(NamedTuple):
    en: str
    en_3sg: str
    tt: str
    tt_2sg_3sg: str  # stem with the vowel change of the 2nd/3rd person singular (German "sieht")
    valency: str  # "i" intransitive, "t" transitive, "c" takes a "that" clause
    subject_kinds: str
    object_kinds: str
    motion: bool  # may take "to"/"from"


def _english_plural(noun: str) -> str:
    if noun.endswith(("s", "sh", "ch", "x", "z")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _target_plural(noun: str, gender: str) -> str:
    # Regular plural classes by gender: m -ar/-r, f -en/-n, n -e/-r (the consonant-final form first).
    ends_in_vowel = noun[-1] in "aeiou"
    if gender == "m":
        return noun + ("r" if ends_in_vowel else "ar")
    if gender == "f":
        return noun + ("n" if ends_in_vowel else "en")
    return noun + ("r" if ends_in_vowel else "e")


# english, english plural ("" = regular), target, target plural ("" = regular), gender, class
_NOUN_TABLE = (
    # humans
    ("man", "men", "Gumo", "Gumen", "m", "h"),
    ("woman", "women", "Kwena", "", "f", "h"),
    ("child", "children", "Frasti", "", "n", "h"),
    ("boy", "", "Knabo", "", "m", "h"),
    ("girl", "", "Mawi", "", "f", "h"),
    ("teacher", "", "Larar", "Larar", "m", "h"),
    ("student", "", "Lirning", "", "m", "h"),
    ("doctor", "", "Lekir", "Lekir", "m", "h"),
    ("farmer", "", "Bur", "Büre", "m", "h"),
    ("king", "", "Kuning", "", "m", "h"),
    ("queen", "", "Kuningin", "Kuninginnen", "f", "h"),
    ("friend", "", "Frion", "", "m", "h"),
    ("baker", "", "Bekkar", "Bekkar", "m", "h"),
    ("soldier", "", "Kempo", "", "m", "h"),
    ("sister", "", "Swistar", "Swistren", "f", "h"),
    ("brother", "", "Brothar", "Bröthar", "m", "h"),
    ("mother", "", "Modar", "Mödar", "f", "h"),
    ("father", "", "Fadar", "Fädar", "m", "h"),
    ("neighbor", "", "Nahbur", "", "m", "h"),
    ("writer", "", "Bokari", "", "m", "h"),
    ("thief", "thieves", "Thiubo", "", "m", "h"),
    ("person", "people", "Liud", "Liudi", "m", "h"),
    ("guest", "", "Gasti", "", "m", "h"),
    ("hunter", "", "Weithar", "", "m", "h"),
    # animals
    ("dog", "", "Hunto", "", "m", "a"),
    ("cat", "", "Katta", "", "f", "a"),
    ("horse", "", "Hros", "", "n", "a"),
    ("bird", "", "Fugal", "Fügal", "m", "a"),
    ("cow", "", "Kuo", "Küe", "f", "a"),
    ("mouse", "mice", "Musa", "Müse", "f", "a"),
    ("fox", "", "Fuhs", "", "m", "a"),
    ("wolf", "wolves", "Wulf", "", "m", "a"),
    ("bear", "", "Bero", "", "m", "a"),
    ("rabbit", "", "Kanin", "", "n", "a"),
    ("goat", "", "Geit", "", "f", "a"),
    ("pig", "", "Swin", "Swin", "n", "a"),
    ("duck", "", "Anud", "", "f", "a"),
    ("goose", "geese", "Gans", "Gänse", "f", "a"),
    ("snake", "", "Slango", "", "m", "a"),
    ("lion", "", "Lewo", "", "m", "a"),
    ("donkey", "", "Esil", "", "m", "a"),
    ("frog", "", "Frosk", "", "m", "a"),
    # food
    ("bread", "", "Brod", "", "n", "f"),
    ("apple", "", "Apal", "Äpal", "m", "f"),
    ("cake", "", "Kuko", "", "m", "f"),
    ("soup", "", "Supa", "", "f", "f"),
    ("cheese", "", "Kasi", "", "m", "f"),
    ("egg", "", "Ei", "", "n", "f"),
    ("pear", "", "Bira", "", "f", "f"),
    ("cherry", "", "Kersa", "", "f", "f"),
    ("potato", "potatoes", "Knolla", "", "f", "f"),
    ("carrot", "", "Morha", "", "f", "f"),
    ("sausage", "", "Wursta", "", "f", "f"),
    # objects
    ("book", "", "Buk", "Büke", "n", "r"),
    ("letter", "", "Brev", "", "m", "r"),
    ("table", "", "Beod", "", "m", "o"),
    ("cup", "", "Bekar", "", "n", "o"),
    ("ball", "", "Balla", "", "f", "o"),
    ("hat", "", "Hodd", "", "m", "o"),
    ("key", "", "Slutil", "", "m", "o"),
    ("knife", "knives", "Sahs", "", "n", "o"),
    ("box", "", "Kista", "", "f", "o"),
    ("bag", "", "Pung", "", "m", "o"),
    ("door", "", "Dura", "", "f", "o"),
    ("window", "", "Windog", "", "n", "o"),
    ("lamp", "", "Lukta", "", "f", "o"),
    ("clock", "", "Tidmel", "", "n", "o"),
    ("ship", "", "Skef", "", "n", "o"),
    ("car", "", "Wagan", "Wägan", "m", "o"),
    ("boat", "", "Naka", "", "f", "o"),
    ("shoe", "", "Sko", "", "m", "o"),
    ("ring", "", "Hring", "", "m", "o"),
    ("picture", "", "Bilith", "", "n", "o"),
    ("coat", "", "Mantal", "", "m", "o"),
    # places
    ("house", "", "Hus", "Hüser", "n", "p"),
    ("garden", "", "Gard", "", "m", "p"),
    ("park", "", "Lund", "", "m", "p"),
    ("river", "", "Ahwa", "", "f", "p"),
    ("city", "", "Burg", "", "f", "p"),
    ("village", "", "Thorp", "Thörpe", "n", "p"),
    ("forest", "", "Widu", "", "n", "p"),
    ("field", "", "Akkar", "Akkar", "m", "p"),
    ("school", "", "Skola", "", "f", "p"),
    ("church", "", "Kirka", "", "f", "p"),
    ("bridge", "", "Brugga", "", "f", "p"),
    ("road", "", "Straza", "", "f", "p"),
    ("mountain", "", "Berg", "", "m", "p"),
    ("lake", "", "Seo", "", "m", "p"),
    ("market", "", "Markat", "", "m", "p"),
    ("shop", "", "Krom", "", "m", "p"),
    ("kitchen", "", "Kukin", "", "f", "p"),
    ("tower", "", "Stuppil", "", "m", "p"),
    ("island", "", "Oja", "", "f", "p"),
    ("hill", "", "Hlaw", "", "m", "p"),
)

NOUNS: tuple[Noun, ...] = tuple(
    Noun(en, en_pl or _english_plural(en), tt, tt_pl or _target_plural(tt, gender), gender, kind)
    for en, en_pl, tt, tt_pl, gender, kind in _NOUN_TABLE
)

# english, target stem (predicative form), classes it may describe ("*" = any)
_ADJECTIVE_TABLE = (
    ("big", "grot", "*"),
    ("small", "lutil", "*"),
    ("old", "ald", "*"),
    ("young", "jugg", "ha"),
    ("new", "niw", "fop"),
    ("good", "göd", "*"),
    ("bad", "ubil", "*"),
    ("happy", "frow", "ha"),
    ("sad", "trurig", "ha"),
    ("red", "röd", "*"),
    ("blue", "blaw", "*"),
    ("green", "gruon", "fop"),
    ("white", "hwit", "*"),
    ("black", "swart", "*"),
    ("long", "lang", "*"),
    ("short", "kurt", "*"),
    ("tall", "hoh", "*"),
    ("warm", "wärm", "*"),
    ("cold", "kald", "*"),
    ("fast", "snel", "*"),
    ("slow", "traig", "*"),
    ("strong", "strang", "ha"),
    ("weak", "wek", "ha"),
    ("clever", "klok", "ha"),
    ("stupid", "tump", "ha"),
    ("hungry", "hungrig", "ha"),
    ("tired", "mödig", "ha"),
    ("angry", "grimm", "ha"),
    ("friendly", "frondlik", "ha"),
    ("quiet", "stil", "*"),
    ("loud", "hlud", "*"),
    ("beautiful", "skön", "*"),
    ("ugly", "lothlik", "*"),
    ("rich", "rik", "ha"),
    ("poor", "arum", "ha"),
    ("clean", "hrein", "fop"),
    ("dirty", "smutsig", "*"),
    ("heavy", "swar", "fop"),
    ("empty", "ital", "op"),
    ("full", "fol", "op"),
    ("dark", "dunkal", "op"),
    ("brave", "kuon", "ha"),
    ("kind", "milt", "ha"),
    ("wild", "wilth", "ha"),
    ("sweet", "swot", "f"),
    ("fresh", "fersk", "f"),
    ("soft", "weih", "fop"),
    ("wet", "nat", "*"),
    ("dry", "thurr", "fop"),
    ("sick", "siok", "ha"),
    ("famous", "marir", "*"),
)

ADJECTIVES: tuple[Adjective, ...] = tuple(
    Adjective(en, tt, "hafop" if kinds == "*" else kinds) for en, tt, kinds in _ADJECTIVE_TABLE
)


def _english_3sg(verb: str) -> str:
    if verb.endswith(("s", "sh", "ch", "x", "z", "o")):
        return verb + "es"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ies"
    return verb + "s"


# english, english 3sg ("" = regular), target stem, 2sg/3sg stem ("" = same), valency, subject classes,
# object classes, motion verb
_VERB_TABLE = (
    # intransitive
    ("sleep", "", "slap", "", "i", "ha", "", False),
    ("run", "", "renn", "", "i", "ha", "", True),
    ("laugh", "", "hlah", "", "i", "h", "", False),
    ("cry", "", "wop", "", "i", "ha", "", False),
    ("sing", "", "sangel", "", "i", "ha", "", False),
    ("dance", "", "plins", "", "i", "h", "", False),
    ("swim", "", "swimm", "", "i", "ha", "", True),
    ("walk", "", "wandal", "", "i", "ha", "", True),
    ("sit", "", "sitt", "", "i", "ha", "", False),
    ("stand", "", "stend", "", "i", "ha", "", False),
    ("wait", "", "beid", "", "i", "ha", "", False),
    ("work", "", "wirk", "", "i", "h", "", False),
    ("play", "", "spil", "", "i", "ha", "", False),
    ("shout", "", "hrop", "", "i", "h", "", False),
    ("smile", "", "smerl", "", "i", "h", "", False),
    ("jump", "", "hlaup", "", "i", "ha", "", True),
    ("fall", "", "drus", "", "i", "ha", "", True),
    ("travel", "", "ferd", "", "i", "h", "", True),
    ("listen", "", "hlust", "", "i", "ha", "", False),
    ("dream", "", "trom", "", "i", "ha", "", False),
    ("rest", "", "ruow", "", "i", "ha", "", False),
    ("go", "", "gang", "geng", "i", "ha", "", True),
    # transitive
    ("see", "", "sah", "sih", "t", "ha", "hafop", False),
    ("hear", "", "hor", "", "t", "ha", "ha", False),
    ("find", "", "fint", "", "t", "ha", "hafop", False),
    ("like", "", "fagin", "", "t", "ha", "hafop", False),
    ("love", "", "liub", "", "t", "h", "ha", False),
    ("hate", "", "leith", "", "t", "h", "hafop", False),
    ("eat", "", "et", "it", "t", "ha", "f", False),
    ("buy", "", "kaup", "", "t", "h", "fo", False),
    ("sell", "", "frabug", "", "t", "h", "fo", False),
    ("read", "", "les", "lis", "t", "h", "r", False),
    ("write", "", "skriv", "", "t", "h", "r", False),
    ("open", "", "luk", "", "t", "h", "o", False),
    ("close", "", "sluz", "", "t", "h", "o", False),
    ("carry", "", "bair", "", "t", "ha", "fo", False),
    ("take", "", "nim", "nimm", "t", "h", "fo", False),
    ("help", "", "hulp", "", "t", "h", "ha", False),
    ("wash", "", "wask", "", "t", "h", "hao", False),
    ("paint", "", "mal", "", "t", "h", "hafop", False),
    ("build", "", "timbar", "", "t", "h", "op", False),
    ("break", "", "brek", "brik", "t", "ha", "o", False),
    ("catch", "", "fah", "", "t", "ha", "ao", False),
    ("follow", "", "folg", "", "t", "ha", "ha", False),
    ("visit", "", "suok", "", "t", "h", "hp", False),
    ("call", "", "nemn", "", "t", "h", "ha", False),
    ("meet", "", "mot", "", "t", "ha", "ha", False),
    ("teach", "", "lir", "", "t", "h", "h", False),
    ("ask", "", "frag", "", "t", "h", "h", False),
    ("kiss", "", "kuss", "", "t", "h", "ha", False),
    ("push", "", "skub", "", "t", "ha", "hao", False),
    ("pull", "", "tioh", "", "t", "ha", "hao", False),
    ("hold", "", "hald", "", "t", "ha", "hao", False),
    ("lose", "", "lius", "", "t", "h", "o", False),
    ("bring", "", "ferr", "", "t", "ha", "fo", False),
    ("throw", "", "werp", "", "t", "ha", "fo", False),
    ("have", "has", "eig", "", "t", "ha", "hafop", False),
    ("draw", "", "teik", "", "t", "h", "hafop", False),
    ("cook", "", "kok", "", "t", "h", "f", False),
    ("hide", "", "hel", "", "t", "ha", "fo", False),
    ("watch", "", "wart", "", "t", "ha", "hafop", False),
    # take a "that" clause
    ("say", "", "seg", "", "c", "h", "", False),
    ("think", "", "thenk", "", "c", "h", "", False),
    ("know", "", "wit", "", "c", "h", "", False),
    ("believe", "", "galaub", "", "c", "h", "", False),
    ("hope", "", "wen", "", "c", "h", "", False),
    ("forget", "", "fargit", "", "c", "h", "", False),
    ("notice", "", "merk", "", "c", "h", "", False),
)

VERBS: tuple[Verb, ...] = tuple(
    Verb(en, en_3sg or _english_3sg(en), tt, tt_alt or tt, valency, subj, obj, motion)
    for en, en_3sg, tt, tt_alt, valency, subj, obj, motion in _VERB_TABLE
)
VERBS_BY_VALENCY = {valency: tuple(v for v in VERBS if v.valency == valency) for valency in "itc"}

# Person endings of the target verb. Stems in t/d/s/z insert an -e- before -st/-t (German "wartet").
VERB_ENDINGS = {"1sg": "e", "2sg": "st", "3sg": "t", "1pl": "am", "3pl": "en"}
COPULA_EN = {"1sg": "am", "2sg": "are", "3sg": "is", "1pl": "are", "3pl": "are"}
COPULA_TT = {"1sg": "em", "2sg": "ert", "3sg": "es", "1pl": "erum", "3pl": "eru"}
DO_EN = {"1sg": "do", "2sg": "do", "3sg": "does", "1pl": "do", "3pl": "do"}
NEGATION_TT = "niht"


class PronounForms(NamedTuple):
    en_subject: str
    en_object: str
    en_possessive: str
    tt_subject: str
    tt_object: str
    tt_possessive: str  # stem taking the ein-word endings ("" = no possessive)
    kind: str


# Keys are persons refined by gender in the 3rd singular; agreement uses the first three characters.
# "you" is always singular: English does not mark its number, so a target 2nd plural would be a guess.
PRONOUNS = {
    "1sg": PronounForms("I", "me", "my", "ek", "mik", "minn", "h"),
    "2sg": PronounForms("you", "you", "your", "thu", "thik", "thinn", "h"),
    "3sg.m": PronounForms("he", "him", "his", "hann", "hinan", "sinn", "h"),
    "3sg.f": PronounForms("she", "her", "her", "hon", "hana", "hiz", "h"),
    "3sg.n": PronounForms("it", "it", "", "ita", "ita", "", "a"),
    "1pl": PronounForms("we", "us", "our", "wiz", "ugk", "unsar", "h"),
    "3pl": PronounForms("they", "them", "their", "thai", "thaim", "thiz", "h"),
}
POSSESSORS = tuple(key for key, forms in PRONOUNS.items() if forms.en_possessive)

# Articles agree with the noun in gender/number and case: nominative (subject), accusative (direct
# object), dative (after every preposition). Plural has one form for all genders, as in German.
DEFINITE_ARTICLE = {
    ("m", "nom"): "dor",
    ("m", "acc"): "don",
    ("m", "dat"): "dom",
    ("f", "nom"): "dia",
    ("f", "acc"): "dia",
    ("f", "dat"): "dör",
    ("n", "nom"): "dat",
    ("n", "acc"): "dat",
    ("n", "dat"): "dom",
    ("pl", "nom"): "dei",
    ("pl", "acc"): "dei",
    ("pl", "dat"): "dein",
}
# Endings of the "ein-words": the indefinite article oin-, the negative article nain- and possessives.
EIN_ENDINGS = {
    ("m", "nom"): "",
    ("m", "acc"): "en",
    ("m", "dat"): "em",
    ("f", "nom"): "a",
    ("f", "acc"): "a",
    ("f", "dat"): "er",
    ("n", "nom"): "",
    ("n", "acc"): "",
    ("n", "dat"): "em",
    ("pl", "nom"): "e",
    ("pl", "acc"): "e",
    ("pl", "dat"): "en",
}
INDEFINITE_STEM_TT = "oin"
NEGATIVE_STEM_TT = "nain"
# Attributive adjectives follow the noun and agree with it in gender/number only (not case).
ADJECTIVE_ENDINGS = {"m": "er", "f": "e", "n": "es", "pl": "en"}

PREPOSITIONS = {
    # english: (target, classes of the noun it takes, only after motion verbs)
    "in": ("inna", "op", False),
    "on": ("ana", "op", False),
    "under": ("undar", "op", False),
    "behind": ("hindar", "op", False),
    "near": ("nehwa", "op", False),
    "with": ("mith", "ha", False),
    "to": ("tuo", "hp", True),
    "from": ("fram", "hp", True),
}

# Fronted in English; in the target they trigger verb-second inversion.
TIME_ADVERBS = {
    "today": "hiudag",
    "now": "nu",
    "often": "ufta",
    "sometimes": "stundum",
    "then": "thanuh",
    "tomorrow": "morgin",
    "here": "hiar",
    "there": "thar",
    "soon": "sunsa",
    "usually": "wanalik",
}
# Clause-final in English (before a prepositional phrase); in the target after object and negation.
MANNER_ADVERBS = {
    "quickly": "snelo",
    "slowly": "traigo",
    "quietly": "stilo",
    "loudly": "hludo",
    "happily": "frowo",
    "well": "wela",
    "carefully": "wariho",
    "badly": "ubilo",
}
SUBORDINATORS = {
    "because": "wanda",
    "when": "bithe",
    "if": "jabai",
    "although": "thauh",
    "while": "mithan",
}
COMPLEMENTIZER = ("that", "thata")
COORDINATORS = {"and": "jah", "but": "ak"}

_UNITS = (
    ("one", "ain"),
    ("two", "twai"),
    ("three", "thrir"),
    ("four", "fidwor"),
    ("five", "fimf"),
    ("six", "sehs"),
    ("seven", "sibun"),
    ("eight", "ahtau"),
    ("nine", "niun"),
)
_NUMBERS_10_TO_19 = (
    ("ten", "taihun"),
    ("eleven", "ainlif"),
    ("twelve", "twalif"),
    ("thirteen", "thritaihun"),
    ("fourteen", "fidwortaihun"),
    ("fifteen", "fimftaihun"),
    ("sixteen", "sehstaihun"),
    ("seventeen", "sibuntaihun"),
    ("eighteen", "ahtautaihun"),
    ("nineteen", "niuntaihun"),
)
_TENS = (
    ("twenty", "twaitig"),
    ("thirty", "thritig"),
    ("forty", "fidwortig"),
    ("fifty", "fimftig"),
    ("sixty", "sehstig"),
    ("seventy", "sibuntig"),
    ("eighty", "ahtautig"),
    ("ninety", "niuntig"),
)
NUMBER_AND_TT = "unda"


def number_words(value: int) -> tuple[list[str], list[str]]:
    """English and target words for 2 <= value <= 99. The target says the units first, "four and twenty"."""
    if not 2 <= value <= 99:
        raise ValueError(f"value={value} must be between 2 and 99")
    if value < 10:
        en, tt = _UNITS[value - 1]
        return [en], [tt]
    if value < 20:
        en, tt = _NUMBERS_10_TO_19[value - 10]
        return [en], [tt]
    tens_en, tens_tt = _TENS[value // 10 - 2]
    if value % 10 == 0:
        return [tens_en], [tens_tt]
    unit_en, unit_tt = _UNITS[value % 10 - 1]
    return [tens_en, unit_en], [unit_tt, NUMBER_AND_TT, tens_tt]
