"""``make lint``: every section a page names, in the form ``docs/PAGE.md, "Section"`` (or ``README.md ("Section")``),
is there: a heading of that page that starts with the quoted words, or a paragraph whose bold title does. A renamed
heading otherwise leaves its references pointing at nothing, which a reader finds only by searching. Written by hand:
a regular expression over Markdown.

    python lint/doc_references.py [REPO]     # exit 1 naming each reference that points at no section
"""
import glob
import os
import re
import sys
from typing import Dict, List, Set

#: a page followed, within a comma and a parenthesis, by the quoted section name (which may break across lines)
REFERENCE = re.compile(r'(README\.md|docs/[\w-]+\.md)[,:]?\s*\(?\s*"([^"\n]{2,90}(?:\n[^"\n]{0,90})?)"')
BOLD_TITLE = re.compile(r'^\s*(?:[-*] |\d+\. )?\*\*(.+?)\*\*', re.M)


def _words(text: str) -> str:
    """Lower-cased words without backticks and end punctuation: the form both sides are compared in."""
    return ' '.join(text.replace('`', '').split()).rstrip('.:').lower()


def section_titles(page: str) -> Set[str]:
    """The headings of a page and the bold titles that open its paragraphs and list items (``_words``)."""
    heads = {_words(line.lstrip('#')) for line in page.splitlines() if line.startswith('#')}
    return heads | {_words(m) for m in BOLD_TITLE.findall(page)}


def names(title: str, name: str) -> bool:
    """Whether ``title`` is the section ``name`` stands for: the same words, or those words followed by more."""
    return title == name or (title.startswith(name) and not title[len(name)].isalnum())


def dead_references(repo: str) -> List[str]:
    """``page:line: docs/X.md "Section"`` for each reference to a section (or page) that does not exist."""
    paths = ['README.md'] + sorted(os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, 'docs', '*.md')))
    pages: Dict[str, str] = {}
    for path in paths:
        if os.path.isfile(os.path.join(repo, path)):
            with open(os.path.join(repo, path), encoding='utf-8') as f:
                pages[path] = f.read()
    titles = {path: section_titles(text) for path, text in pages.items()}
    dead = []
    for path, text in pages.items():
        for m in REFERENCE.finditer(text):
            target, name = m.group(1), _words(m.group(2))
            where = f'{path}:{text.count(chr(10), 0, m.start()) + 1}: {target} "{" ".join(m.group(2).split())}"'
            if target not in pages:
                dead.append(f'{where}: no such page')
            elif not any(names(title, name) for title in titles[target]):
                dead.append(f'{where}: no heading or bold paragraph title of {target} starts with these words')
    return dead


if __name__ == '__main__':
    found = dead_references(sys.argv[1] if len(sys.argv) > 1 else '.')
    for line in found:
        print(line, file=sys.stderr)
    sys.exit(1 if found else 0)
