"""The user's command lines (console scripts ``tola-<name>``, ``python -m tola_cli.<name>``; ``tools/<name>.py`` is
each one's alias in a clone): each parses its arguments with the standard library only, then imports the package and
runs under the tool convention (``command.py``), so ``--help`` and usage errors answer at once. The defaults and
choices their parsers show are in one place (``defaults.py``), checked against the package by a test."""
