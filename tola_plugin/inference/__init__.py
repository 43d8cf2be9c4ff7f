"""Inference on real text images: ``TOLAPipeline`` (any size and aspect, whole photos) and its geometry; the weight
files it reads (``weight_files``: merged export, DiffTSR conversion; ``demo_model``: the demo model, from any folder)
and the web demo (``web_app``, ``web_screenshot``).
"""
from tola_plugin.inference.pipeline import LineResult, Restoration, TOLAPipeline  # noqa: F401
