"""One of the repository's flake8 plugins (``lint/``, declared in setup.cfg) run as ``make lint`` runs it, over the
repository's own folders and files a test wrote into a temporary folder."""
import os
import subprocess
import sys
from typing import Dict, List, NamedTuple, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Flagged(NamedTuple):
    returncode: int
    places: List[Tuple]  # sorted (path relative to the written folder, code) or (path, line, code)
    stdout: str
    output: str  # stdout and stderr, for an assertion's message


def lint_flags(select: str, root, *repo_paths: str, files: Optional[Dict[str, str]] = None,
               lines: bool = False) -> Flagged:
    """``flake8 --select SELECT`` from the repository's root over ``repo_paths`` (which must pass) and the folder
    ``root``, after writing ``files`` ({path inside root: text}) there; ``lines``: each place with its line number."""
    for name, text in (files or {}).items():
        os.makedirs(os.path.dirname(os.path.join(str(root), name)) or str(root), exist_ok=True)
        with open(os.path.join(str(root), name), 'w', encoding='utf-8') as f:
            f.write(text)
    out = subprocess.run([sys.executable, '-m', 'flake8', '--select', select, *repo_paths,
                          str(root)], cwd=REPO, capture_output=True, text=True)
    places = []
    for line in out.stdout.splitlines():
        path, number, _, message = line.split(':', 3)
        where, code = os.path.relpath(path, str(root)), message.split()[0]
        places.append((where, int(number), code) if lines else (where, code))
    return Flagged(out.returncode, sorted(places), out.stdout, out.stdout + out.stderr)
