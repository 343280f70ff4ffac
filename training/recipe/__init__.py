"""The recipe wing (§5.2-§5.4, and the checkpoint averaging of §6.1): the paper's training on the stock Trainer.

    options.py             vaswani-train's command line, torch-free at import: the recipe files, the checks
                           before torch (preflight_train), the parser (parse_arguments)
    train.py               vaswani-train: data -> tokenizer -> model -> train -> average -> evaluate -> package
    arguments.py           ModelArguments, VaswaniTrainingArguments: the paper's values as defaults
    trainer.py             VaswaniTrainer: Seq2SeqTrainer + token-count batches, fused label smoothing, safe
                           checkpoints, evaluation by decoding
    schedule.py            §5.3, the warm-up and inverse-square-root ("Noam") learning rate
    checkpoints.py         what a complete checkpoint is, where it lives (OUTPUT/checkpoints/), writing and
                           deleting folders atomically, the output folder's lock
    launch.py              accelerate launch forms that would start unconnected runs, refused (several machines)
    console.py             what a run prints: our progress (library INFO only with --verbose), the summary
    average_checkpoints.py vaswani-average: the mean of the last N checkpoints (§6.1)
    metrics/               sacreBLEU and chrF, as an `evaluate` metric
    run_record.py          everything a run measured, typed; model_card.py writes it into README.md
    recipes/               the shipped recipes (toy, multi30k, wmt14-en-de-base/big)

§5.3 Optimizer: Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 (arguments.py defaults); the schedule in schedule.py.
§5.4 Regularization: residual dropout 0.1 (the presets in hf_vaswani/presets, --dropout); label smoothing
ε_ls = 0.1, whose default is `VaswaniTrainingArguments.label_smoothing_factor` (0 switches it off), which
`VaswaniTrainer.compute_loss` hands to the model during training only (evaluation losses are plain cross-entropy),
and which `VaswaniForConditionalGeneration.forward` computes in one fused `cross_entropy(label_smoothing=...)`
over the labelled positions (hf_vaswani/modeling_vaswani.py).

It imports the serving wing (decoding for evaluation, push for --push_to_hub), the data wing and the ground floor.
"""
