#!/usr/bin/env python
"""Alias of ``tola-screen-rt50`` (tola_cli/screen_rt50.py), for a clone of the repository.

From any folder: ``tola-screen-rt50 --help`` or ``python -m tola_cli.screen_rt50 --help``.
"""
from tola_cli.screen_rt50 import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
