#!/usr/bin/env python
"""Alias of ``tola-make-test-set`` (tola_cli/make_test_set.py), for a clone of the repository.

From any folder: ``tola-make-test-set --help`` or ``python -m tola_cli.make_test_set --help``.
"""
from tola_cli.make_test_set import cli, main  # noqa: F401  (main: for tests)

if __name__ == '__main__':
    cli()
