"""Inference on real text images: ``TOLAPipeline`` (any size and aspect, whole photos) and its geometry."""
from tola_plugin.inference.pipeline import DEMO_MODEL, LineResult, Restoration, TOLAPipeline  # noqa: F401
