"""The metrics (``*_metric.py``) of this folder register themselves in BasicSR's registries when imported.

``import tola_plugin`` announces their names (``tola_plugin/registry_index.py``); BasicSR imports a module when it
first looks one of its names up, so importing this folder imports none of them.
"""
