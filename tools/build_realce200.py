#!/usr/bin/env python
"""Alias of ``tola-build-realce200`` (tola_cli/build_realce200.py), for a clone of the repository.

From any folder: ``tola-build-realce200 --help`` or ``python -m tola_cli.build_realce200 --help``.
"""
from tola_cli.build_realce200 import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
