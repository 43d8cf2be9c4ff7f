"""Inference on real text images: ``TOLAPipeline`` (any size and aspect, whole photos) and its geometry; the weight
files it reads (``weight_files``: merged export, DiffTSR conversion; ``demo_model``: the demo model, from any folder)
and the web demo (``web_app``, ``web_screenshot``). ``TOLAPipeline``, ``LineResult`` and ``Restoration`` are imported
when first asked for, so that the folder run's planning (``folder_run``) imports no network.
"""
_PIPELINE_NAMES = ('LineResult', 'Restoration', 'TOLAPipeline')


def __getattr__(name):
    if name in _PIPELINE_NAMES:
        from tola_plugin.inference import pipeline
        return getattr(pipeline, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
