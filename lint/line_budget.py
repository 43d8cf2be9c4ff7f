"""``make lint``: each wing of the package within its line budget (docs/architecture.md, "The package plan"), so that
growth is a decision written in that table and not a drift. The table's rows name each wing's folders and top-level
modules in backticks, and its ``budget`` column the most lines (of ``.py`` files, as ``wc -l`` counts them) the wing
may hold; every folder and module of ``tola_plugin`` belongs to exactly one wing. A row may also name a top-level
folder of the repository outside ``tola_plugin`` (``tola_lab/``: a name that is no entry of the package but a folder
at the repository's root), whose ``.py`` lines count for its wing; such a folder too belongs to one wing at most.
Names with a ``/`` inside (``tola_lab/benchmarks/``) describe a row and count nothing. Written by hand: a line count
and a Markdown table.

    python lint/line_budget.py [REPO]     # exit 1 naming each wing over its budget (and what no wing claims)
"""
import os
import re
import sys
from typing import Dict, List, Tuple

DOC = os.path.join('docs', 'architecture.md')
PACKAGE = 'tola_plugin'


def wing_table(doc_text: str) -> List[Tuple[str, List[str], int]]:
    """(wing, the backticked names of its row, budget) of each row of the table whose header ends with ``budget``."""
    rows, inside = [], False
    for line in doc_text.splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')] if line.startswith('|') else None
        if cells and cells[0] == 'wing' and cells[-1] == 'budget':
            inside = True
        elif not cells:
            inside = False
        elif inside and not set(cells[0]) <= set('-: '):
            rows.append((cells[0], re.findall(r'`([^`]+)`', cells[1]), int(cells[-1].replace(',', ''))))
    return rows


def py_lines(path: str) -> int:
    """Lines of the ``.py`` files under ``path`` (a folder or one module)."""
    files = [path] if path.endswith('.py') else [
        os.path.join(root, name) for root, _, names in os.walk(path) for name in names if name.endswith('.py')
    ]
    total = 0
    for name in files:
        with open(name, 'rb') as f:
            total += f.read().count(b'\n')
    return total


def check(repo: str) -> List[str]:
    """What is wrong: each wing over its budget, each entry of the package no wing claims (or two claim), each folder
    outside the package two wings claim."""
    with open(os.path.join(repo, DOC), encoding='utf-8') as f:
        table = wing_table(f.read())
    if not table:
        return [f'{DOC}: no table with a "budget" column (wing | folders and modules | ... | budget)']
    package = os.path.join(repo, PACKAGE)
    entries = {
        n
        for n in os.listdir(package)
        if (os.path.isdir(os.path.join(package, n)) and n != '__pycache__') or n.endswith('.py')
    }
    owner: Dict[str, str] = {}  # path from the repository's root (tola_plugin/archs, tola_lab) -> its wing
    problems = []
    for wing, names, budget in table:
        named = {n.rstrip('/') for n in names}
        mine = [f'{PACKAGE}/{e}' for e in sorted(entries & named)]
        mine += [  # top-level folders of the repository outside the package (an entry of the package comes first)
            n for n in sorted(named - entries)
            if n and '/' not in n and n != PACKAGE and os.path.isdir(os.path.join(repo, n))
        ]
        for path in mine:
            if path in owner:
                problems.append(f'{path} is in two wings ({owner[path]}, {wing}) in {DOC}')
            owner[path] = wing
        lines = sum(py_lines(os.path.join(repo, p)) for p in mine)
        if lines > budget:
            problems.append(f'wing {wing!r}: {lines:,} lines, over its budget of {budget:,} by {lines - budget:,} '
                            f'({DOC}, "The package plan"): remove lines, or raise the budget there as a decision')
    problems += [f'{PACKAGE}/{e} is in no wing of {DOC}' for e in sorted(entries) if f'{PACKAGE}/{e}' not in owner]
    return problems


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    problems = check(argv[0] if argv else os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for problem in problems:
        print(f'line budget: {problem}', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
