"""Data, no code: the demo model's weights (``demo/backbone/``: ``checkpoints/demo_backbone.py``), the two alphabets
(``vocab/``: ``text/alphabets.py``), sample images (``samples/``, ``rendered_samples/``: ``data/sample_images.py``)."""
