"""The serving wing (§6.1 and use): a trained model folder in, translations and shipped artefacts out.

    decoding.py            translate_texts / translate_ids: length-sorted batches through generate() with the paper's
                           decoding (beam 4, GNMT length penalty 0.6, source length + 50; hf_vaswani)
    translate.py           vaswani-translate: sentences or files, generate() or CTranslate2, attention plots
    attention_plot.py      encoder-decoder attention of a translation, as a matplotlib figure
    export.py              vaswani-export: ONNX (encoder + one decoder step) and CTranslate2
    ctranslate2_export.py  the CTranslate2 converter for this architecture, and a translator over it
    push.py                vaswani-push: a validated model folder to the Hub
    explore.py             vaswani-explore: the attention explorer (a Gradio page; the drawing is in explore_svg.py)
    explore_models.py      the explorer's loaded models (the served one pinned) and what visitors may load

It imports the data wing and the ground floor, never the recipe.
"""
