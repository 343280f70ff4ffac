"""What the benchmark scripts share, one module per concern.

- `harness`: a command line for the CPU comparison with Marian, timing (`Stopwatch`), medians of interleaved
  repeats, the report table and JSON;
- `model_pairs`: our model and `MarianMTModel` holding the same weights (`marian_from_ours`), their parity check,
  the Multi30K corpus and its token batches, the paper's optimizer as training arguments;
- `corpus`: the synthetic corpus shaped like WMT 2014 en-de;
- `mfu`: the FLOP count (training, generate()) and the measured matrix-product peak;
- `machine`: the device's name, peaks (measured and datasheet), native dtypes, and the step clock;
- `row`: the command line, log and result line of one GPU benchmark row in its own process (`training_speed`,
  `decoding_speed`);
- `training_step`, `pipeline`, `decoding`, `memory`: one measure each of the CPU comparison with Marian;
  `profiling`: torch.profiler tables.
"""
