#!/usr/bin/env python
"""Alias of ``tola-render-text`` (tola_cli/render_text.py), for a clone of the repository.

From any folder: ``tola-render-text --help`` or ``python -m tola_cli.render_text --help``.
"""
from tola_cli.render_text import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
