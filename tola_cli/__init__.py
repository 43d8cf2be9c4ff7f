"""Command lines of tola-plugin that must answer ``--help`` at once.

A separate top-level package because importing anything under ``tola_plugin`` first runs its ``__init__``, which
registers every module into BasicSR (torch, basicsr, diffusers: seconds). Each module here parses its arguments
with only the standard library and imports the package afterwards.
"""
