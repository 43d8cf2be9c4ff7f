"""One of the repository's flake8 plugins (``lint/``, declared in setup.cfg) run as ``make lint`` runs it, over the
repository's own folders and files a test wrote into a temporary folder."""
import os
import subprocess
import sys
from typing import List, NamedTuple, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Flagged(NamedTuple):
    returncode: int
    places: List[Tuple]  # sorted (path relative to the written folder, code) or (path, line, code)
    stdout: str
    output: str  # stdout and stderr, for an assertion's message


def lint_flags(select: str, root, *repo_paths: str, lines: bool = False) -> Flagged:
    """``flake8 --select SELECT`` from the repository's root over ``repo_paths`` (which must pass) and ``root`` (the
    written files); ``lines``: each place with its line number."""
    out = subprocess.run([sys.executable, '-m', 'flake8', '--select', select, *repo_paths,
                          str(root)], cwd=REPO, capture_output=True, text=True)
    places = []
    for line in out.stdout.splitlines():
        path, number, _, message = line.split(':', 3)
        where, code = os.path.relpath(path, str(root)), message.split()[0]
        places.append((where, int(number), code) if lines else (where, code))
    return Flagged(out.returncode, sorted(places), out.stdout, out.stdout + out.stderr)
