"""Inference on real text images: ``TOLAPipeline`` (any size and aspect, whole photos) and its geometry, the folder
run (``folder_run``) and the demo model from any folder (``demo_model``). The weight files it reads are written by
``tola_plugin.commands.weight_files``; the web demo is ``tola_plugin.web``. ``TOLAPipeline``, ``LineResult`` and
``Restoration`` are imported when first asked for, so that the folder run's planning imports no network.
"""
_PIPELINE_NAMES = ('LineResult', 'Restoration', 'TOLAPipeline')


def __getattr__(name):
    if name in _PIPELINE_NAMES:
        from tola_plugin.inference import pipeline
        return getattr(pipeline, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
