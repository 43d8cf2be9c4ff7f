"""Entry point wrapper for the data tools: bad input ends in one ``error: ...`` line, not a traceback."""
import sys
from typing import Callable


def run_tool(main: Callable[[], int]):
    """``sys.exit(main())``; ValueError / KeyError / OSError become ``error: <message>`` with exit status 1."""
    try:
        sys.exit(main())
    except (ValueError, KeyError, OSError) as err:
        sys.exit(f'error: {err}')
