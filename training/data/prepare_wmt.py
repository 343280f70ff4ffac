"""Lay out the WMT files a user has as the folder `training.train --data_dir` reads: train / valid / test pairs.

WMT 2014 en-de (the paper's setting) is shipped as several parallel corpora (Europarl v7, Common Crawl, News
Commentary v9), the newstest2013 development set and the newstest2014 test set, the last two in SGML
(`newstest2014-deen-src.en.sgm`) or as plain text (sacreBLEU's `sacrebleu -t wmt14 -l en-de --echo src`).
This command concatenates the training corpora into `train.SRC` / `train.TGT` and writes `valid.*` and `test.*`:

    python -m hf_vaswani_training.prepare_wmt --source_lang en --target_lang de --out data/wmt14-en-de \
        --train wmt14/europarl-v7.de-en wmt14/commoncrawl.de-en wmt14/news-commentary-v9.de-en \
        --validation wmt14/newstest2013 --test wmt14/newstest2014

Each `--train/--validation/--test` value is a text-pair prefix (`PREFIX.en` + `PREFIX.de`, `.gz` accepted), or
for the SGML test sets a pair of `.sgm` files given as `SRC.sgm,TGT.sgm`. Or from a dataset in the Hub layout
(`datasets.load_dataset`, e.g. `wmt/wmt14` / `de-en` on a machine that reaches the Hub, or a local folder), read
as training reads it (its train / validation (or dev, valid) / test splits, a `translation` column or two text
columns named by the languages; blank pairs dropped):

    python -m hf_vaswani_training.prepare_wmt --source_lang en --target_lang de --out data/wmt14-en-de \
        --dataset_name wmt/wmt14 --dataset_config_name de-en

Everything streams (the 4.5M pairs are never in memory) and is checked on the way: files of different lengths and
invalid UTF-8 stop with the file and line, as in training; control characters, which training refuses (WMT's
crawled corpora have some), become spaces, counted in a warning. Blank pairs of files are copied as they are; training
skips and counts them. The output is written to a staging folder and renamed into place, so a half-written folder never
looks complete. The script prints the pair counts and the training command to run next. The datasets library keeps
to warnings; --verbose brings back its INFO logs and progress bars (training/console.py).
"""

from __future__ import annotations

import html
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from ..console import quiet_libraries, setup_logging
from ..staging import staged_folder
from ..usage import ArgumentParser, error_line
from .textfiles import CONTROL_CHARACTERS, ParallelDataError, iter_lines, pair_half, read_text_pair

logger = logging.getLogger(__name__)

_SEGMENT = re.compile(r"<seg[^>]*>(.*)</seg>\s*$", re.IGNORECASE)


def _sgm_lines(path: Path) -> Iterator[str]:
    """The `<seg>` texts of a WMT SGML file, in order (document markup skipped, entities decoded)."""
    for lineno, line in iter_lines(path, refuse_controls=False):
        stripped = line.strip()
        if stripped.lower().startswith("<seg"):
            match = _SEGMENT.match(stripped)
            if match is None:
                raise ParallelDataError(f"{path}:{lineno}: a <seg> that does not end on its line")
            yield html.unescape(match.group(1)).strip()


def _sgm_pair(source_path: Path, target_path: Path) -> Iterator[tuple[str, str]]:
    sources, targets = list(_sgm_lines(source_path)), list(_sgm_lines(target_path))
    if len(sources) != len(targets):
        raise ParallelDataError(
            f"SGML files are not aligned: {source_path} has {len(sources)} segments but {target_path} has "
            f"{len(targets)}"
        )
    yield from zip(sources, targets, strict=True)


def _pairs_of(spec: str, source_lang: str, target_lang: str) -> Iterator[tuple[str, str]]:
    if "," in spec:
        source, target = (Path(part) for part in spec.split(",", 1))
        for path in (source, target):
            if not path.is_file():
                raise ParallelDataError(f"{path}: no such file (a SRC,TGT pair of files was given)")
        if source.name.removesuffix(".gz").endswith(".sgm"):
            return _sgm_pair(source, target)
        return read_text_pair(source, target, refuse_controls=False)
    prefix = Path(spec)
    return read_text_pair(pair_half(prefix, source_lang), pair_half(prefix, target_lang), refuse_controls=False)


def _write_split(pairs: Iterator[tuple[str, str]], folder: Path, name: str, langs: tuple[str, str]) -> int:
    count = cleaned = 0
    with (
        open(folder / f"{name}.{langs[0]}", "w", encoding="utf-8") as source_file,
        open(folder / f"{name}.{langs[1]}", "w", encoding="utf-8") as target_file,
    ):
        for source, target in pairs:
            # Control characters become spaces, as Moses' remove-non-printing-char does for WMT data (training
            # refuses them); a newline inside a field would also shift every later line of one side.
            if CONTROL_CHARACTERS.search(source) or CONTROL_CHARACTERS.search(target):
                source, target = CONTROL_CHARACTERS.sub(" ", source), CONTROL_CHARACTERS.sub(" ", target)
                cleaned += 1
            source_file.write(source + "\n")
            target_file.write(target + "\n")
            count += 1
    if cleaned:
        logger.warning("%s: replaced control characters by spaces in %d pairs", name, cleaned)
    return count


def _dataset_pairs(dataset, source_lang: str, target_lang: str) -> Iterator[tuple[str, str]]:
    for batch in dataset.iter(batch_size=10_000):
        for pair in batch["translation"]:
            yield pair[source_lang], pair[target_lang]


def prepare(
    out: str | os.PathLike[str],
    source_lang: str,
    target_lang: str,
    train: list[str] | None = None,
    validation: str | None = None,
    test: str | None = None,
    dataset_name: str | None = None,
    dataset_config_name: str | None = None,
    overwrite: bool = False,
    *,
    verbose: bool = False,
) -> dict[str, int]:
    """Write `out/{train,valid,test}.{source_lang,target_lang}`; return the pairs per split. `verbose`: the datasets
    library's INFO logs and progress bars (--verbose; else its warnings only)."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise ParallelDataError(f"--out {out} exists; pass --overwrite to replace it, or choose another folder")
    if (dataset_name is None) == (train is None):
        raise ParallelDataError("give either --train (with --validation/--test) or --dataset_name, not both or neither")
    langs = (source_lang, target_lang)
    counts: dict[str, int] = {}
    # An existing --out (with --overwrite) is renamed aside, replaced, then deleted: never half old, half new.
    with staged_folder(out, replace=True) as staging:
        if dataset_name is not None:
            # The loader training uses: split names (dev, valid) and column layouts are handled, and a missing
            # repository or configuration is a one-line error.
            from .corpora import load_hub_dataset  # imports datasets: only once the arguments are checked

            quiet_libraries(verbose)  # datasets set its own level when imported just now
            splits, _ = load_hub_dataset(dataset_name, dataset_config_name, source_lang, target_lang, None, None, None)
            if "train" not in splits:
                raise ParallelDataError(f"--dataset_name {dataset_name}: no train split (found {sorted(splits)})")
            for split, name in (("train", "train"), ("validation", "valid"), ("test", "test")):
                if split in splits:
                    counts[name] = _write_split(_dataset_pairs(splits[split], *langs), staging, name, langs)
        else:
            from itertools import chain

            train_pairs = chain.from_iterable(_pairs_of(spec, source_lang, target_lang) for spec in train)
            counts["train"] = _write_split(train_pairs, staging, "train", langs)
            for name, spec in (("valid", validation), ("test", test)):
                if spec is not None:
                    counts[name] = _write_split(_pairs_of(spec, source_lang, target_lang), staging, name, langs)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="vaswani-prepare-wmt", description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--source_lang", required=True, help="e.g. en")
    parser.add_argument("--target_lang", required=True, help="e.g. de")
    parser.add_argument("--out", required=True, help="The folder to write (training's --data_dir).")
    parser.add_argument("--train", nargs="+", help="Training corpora: text-pair prefixes or SRC,TGT file pairs.")
    parser.add_argument("--validation", help="Development set, e.g. newstest2013 (prefix or SRC.sgm,TGT.sgm).")
    parser.add_argument("--test", help="Test set, e.g. newstest2014 (prefix or SRC.sgm,TGT.sgm).")
    parser.add_argument("--dataset_name", help="Instead of files: a dataset in the Hub layout, e.g. wmt14.")
    parser.add_argument("--dataset_config_name", help="Its configuration, e.g. de-en.")
    parser.add_argument("--overwrite", action="store_true", help="Replace an existing --out folder.")
    parser.add_argument("--verbose", action="store_true", help="The libraries' INFO logs and progress bars too.")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)  # training/console.py: the commands' one log format, the libraries quiet
    try:
        counts = prepare(
            args.out, args.source_lang, args.target_lang, args.train, args.validation, args.test,
            args.dataset_name, args.dataset_config_name, args.overwrite, verbose=args.verbose,
        )  # fmt: skip
    except (ParallelDataError, FileNotFoundError) as error:
        print(f"{parser.prog}: error: {error_line(error)}", file=sys.stderr)
        return 2
    for name, count in counts.items():
        print(f"{name}: {count:,} pairs -> {Path(args.out) / name}.{{{args.source_lang},{args.target_lang}}}")
    print(
        f"next: vaswani-train wmt14-en-de-base --data_dir {args.out}  (the big model: wmt14-en-de-big)"
        if (args.source_lang, args.target_lang) == ("en", "de")
        else f"next: vaswani-train --data_dir {args.out} --source_lang {args.source_lang} "
        f"--target_lang {args.target_lang} ..."
    )
    return 0
