"""hf_vaswani_training: the paper's recipe and its tools around the model in hf_vaswani.

    usage.py   the ground floor every command stands on (user errors and exit codes, argument parsing and types,
               file and model-folder checks, run_command)
    cli.py     the front door: the seven console scripts, a few lines each (the modules named after them beside
               it are their `python -m training.X` doors); vaswani-train's command line is recipe/options.py
    data/      §5.1: corpora, the joint BPE, the token caches and batches
    serving/   §6.1 and use: decoding, translate, export, push, the attention explorer
    recipe/    §5.2-5.4 and checkpoint averaging: vaswani-train on the stock Trainer

Imports run one way only: cli -> recipe -> serving -> data -> usage.
"""
