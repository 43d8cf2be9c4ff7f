"""Inference on real text images: ``TOLAPipeline`` (any size and aspect, whole photos) and its geometry; the weight
files it reads (``weight_files``: merged export, DiffTSR conversion) and the web demo (``web_app``, ``web_screenshot``).
"""
from tola_plugin.inference.pipeline import DEMO_MODEL, LineResult, Restoration, TOLAPipeline  # noqa: F401
