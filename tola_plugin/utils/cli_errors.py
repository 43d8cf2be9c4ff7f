"""The one error convention of every command line of the package (tools/*.py, tola-train, tola-test).

- Usage errors: argparse (``parser.error``), exit status 2.
- Bad input or configuration (a missing or corrupt file, a bad option, an experiment in use): the code raises
  ValueError, KeyError or OSError (or a subclass: ``UsageError``, ``OptionError``, ``FileNotFoundError``,
  ``UnsafeCheckpointError``, ...) whose message names the file or option and what was expected; ``run_tool``
  prints it as one line ``error: <message>`` on stderr and exits with status 2. No traceback.
- A check the user asked for that runs and fails (``--verify``, ``--check``, a run where some files could not be
  restored) prints one line ``error: ...`` and returns status 1 from ``main``.
- Anything else is a bug and keeps its traceback (exit status 1). ``--debug`` (any command; for the training and
  test launchers it is BasicSR's flag, which also shortens the run) shows the traceback of the errors above too.
- BasicSR's own launcher scripts (``python -m basicsr.train``, ``basicsr/train.py``) get the same one line and exit
  status through ``install_excepthook`` (``basicsr_glue.launchers`` installs it when they read their options).

Every tool is ``argparse`` + ``def main(argv=None) -> int`` + ``run_tool(main)`` (tests call ``main`` in-process),
and ``main`` makes one call into the package, where the tool's logic lives (``make lint`` checks both:
lint/flake8_tool_convention.py); images are listed with ``tola_plugin.data.image_io.list_image_files`` and read with
``read_image_file``.
"""
import logging
import os
import sys
from typing import Callable, Optional

from tola_plugin.utils.user_text import say, shown

USAGE_EXIT_STATUS = 2
INPUT_ERRORS = (ValueError, KeyError, OSError)
DEBUG_FLAG = '--debug'


class UsageError(ValueError):
    """A command-line tool was called with input it cannot use (printed as ``error: ...``, exit status 2)."""


def error_line(err: BaseException) -> str:
    """``error: <message>`` on one line (KeyError's message without the quotes ``str`` adds), control characters of
    the names in it escaped (``user_text.shown``)."""
    message = err.args[0] if isinstance(err, KeyError) and len(err.args) == 1 else str(err)
    message = ' '.join(part.strip() for part in str(message).splitlines() if part.strip())
    return f'error: {shown(message) or type(err).__name__}'


def debug_requested() -> bool:
    """Whether the command line asks for tracebacks (``--debug``)."""
    return DEBUG_FLAG in sys.argv[1:]


def run_tool(main: Callable[[], Optional[int]], debug: Optional[bool] = None):
    """``sys.exit(main())``; bad input / configuration (ValueError, KeyError, OSError) becomes one line
    ``error: <message>`` on stderr and exit status 2, or its traceback with ``debug``. ``debug`` None: ``--debug``
    on the command line, which is then taken out of ``sys.argv`` before ``main`` parses it (so every tool takes it);
    commands whose parser knows ``--debug`` pass ``debug`` themselves."""
    if debug is None:
        debug = debug_requested()
        sys.argv[1:] = [arg for arg in sys.argv[1:] if arg != DEBUG_FLAG]
    sys.exit(run_checked(main, debug))


def run_checked(main: Callable[[], Optional[int]], debug: bool):
    """``main()``, its bad input / configuration ending the process as ``run_tool`` says (one line, exit status 2;
    raised with ``debug``). -> what ``main`` returned."""
    try:
        return main()
    except INPUT_ERRORS as err:
        if debug:
            raise
        say(error_line(err))
        sys.exit(USAGE_EXIT_STATUS)


def install_excepthook(cleanup: Callable[[], None],
                       translate: Callable[[BaseException], Optional[BaseException]] = lambda err: None) -> None:
    """For a script whose ``main`` is not ours (BasicSR's launchers): an uncaught ValueError, KeyError or OSError
    (or an error ``translate`` turns into one) ends the process as ``run_tool`` would (one line, exit status 2, after
    ``cleanup`` and the logs' flush), unless ``--debug``; anything else keeps Python's traceback."""
    previous = sys.excepthook

    def one_line(kind, err, traceback):
        told = None if debug_requested() else translate(err)
        if told is not None:
            kind, err = type(told), told
        if not issubclass(kind, INPUT_ERRORS) or debug_requested():
            return previous(kind, err, traceback)
        say(error_line(err))
        cleanup()
        logging.shutdown()
        sys.stdout.flush()
        os._exit(USAGE_EXIT_STATUS)  # an excepthook cannot choose the exit status otherwise

    sys.excepthook = one_line
