"""The data wing (§5.1 "Training Data and Batching"): sentence pairs in, token ids in batches out.

    arguments.py   DataArguments: what to read (vaswani-train's data options)
    corpora.py     load_parallel_data: local files (.jsonl, .tsv, text pairs), Hub datasets, the toy corpus
    textfiles.py   one UTF-8 reader that names file and line
    toy_corpus.py  the embedded toy corpus (TOY_CORPUS.md), so the main job runs offline
    toy_lexicon.py its words and inflection tables
    tokenizer.py   the joint BPE shared by both languages, and the word cache that encodes a corpus with it
    cache.py       tokenised splits on disk (fingerprinted, staged and renamed), the corpus read once
    batching.py    TokenBatchSampler: batches of about --max_tokens tokens, by length
    prepare_wmt.py WMT 2014 files into the layout corpora.py reads

It imports the ground floor (training/usage.py, training/staging.py) and nothing else of this package.
"""
