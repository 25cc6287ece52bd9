"""A web page to try a model: type a sentence, see its translation, the n-best list with
scores, and every head's attention (``python demo.py ckpt_path=…``; ``cli/demo.py`` starts it).

- ``models``: what the page translates with (a checkpoint, a Hugging Face or CTranslate2 export);
- ``attention``: every head's attention for one hypothesis, and its heatmap;
- ``source_text``: what the input box accepts;
- ``page``: the Gradio page.
"""
