"""The pieces of `benchmarks/compare_marian.py`, one module per concern.

- `harness`: command line, timing (`Stopwatch`), medians of interleaved repeats, the report table and JSON;
- `models`: the corpus, the two models with the same weights (`marian_from_ours`) and their parity check;
- `training_step`, `pipeline`, `decoding`, `memory`, `mfu`: one measure each; `profiling`: torch.profiler tables.
"""
