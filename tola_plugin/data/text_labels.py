"""Label files and the two token targets of a text line.

- ``read_labels_tsv``: ``filename<TAB>transcription`` manifests (UTF-8, one line per image).
- ``read_index_list``: DiffTSR's index-list file (one 0-based integer per line).
- ``text_targets``: IDM tokens (24, pad 6735) and the TransOCR target (25, END then -100 padding),
  normalized as DiffTSR's training dataset does (train/dataset/DiffTSR_training_dataset.py):
  IDM text = ``label.lower()``; OCR text = ``strQ2B(label).lower()`` (its ``'$'`` end mark = our END); whitespace
  removed from both (neither alphabet has a space; the evaluation removes it too, text/normalize.py).

One rule for every tool and dataset (docs/data.md, "Labels"): a label is valid when ``text_targets`` accepts it
(not empty, at most 24 characters without whitespace, every character in the TransOCR alphabet). An invalid label
is an error naming the sample at the first tool that reads it (tools/make_lmdb.py for a labels file, the datasets
for an LMDB), unless the tool's ``--skip-invalid-labels`` or the dataset's ``skip_invalid_labels: true`` drops it
with a warning.
"""
import io
import re
from typing import TYPE_CHECKING, Callable, List, Optional, Sequence, Tuple

from tola_plugin.text.alphabets import IDM_MAX_LEN, encode_idm, encode_transocr
from tola_plugin.text.normalize import full_to_half
from tola_plugin.utils.atomic_files import read_bytes

if TYPE_CHECKING:
    import torch

OCR_TARGET_LEN = IDM_MAX_LEN + 1  # 24 characters + END
OCR_IGNORE_INDEX = -100  # torch CrossEntropyLoss default ignore_index
IDM_TEXT_NORMS = ('lower', 'q2b_lower')
DATASET_SKIP_HINT = 'set skip_invalid_labels: true to drop them'
TOOL_SKIP_HINT = 'add --skip-invalid-labels to drop them'
_WHITESPACE = re.compile(r'\s+')


class TextLabelError(ValueError):
    """A transcription that cannot be turned into training targets."""


class InvalidLabelsError(TextLabelError):
    """Invalid labels of one source: how many, the first five, and how to drop them (``hint``)."""

    def __init__(self, where: str, errors: Sequence[str], hint: str = DATASET_SKIP_HINT):
        self.where, self.errors = where, list(errors)
        super().__init__(f'{len(self.errors)} invalid label(s) in {where} ({hint}); first: {self.errors[:5]}')

    def with_hint(self, hint: str) -> 'InvalidLabelsError':
        """The same error with another way to drop the labels (a tool's flag instead of the dataset option)."""
        return InvalidLabelsError(self.where, self.errors, hint)


def _text_lines(path: str, what: str):
    """The lines of a UTF-8 text file (a leading byte-order mark is dropped); a file in another encoding is a
    ValueError naming the file and the line."""
    raw = read_bytes(path, what)  # bounded: a file far larger than any labels file is refused unread
    try:
        text = raw.decode('utf-8-sig')
    except UnicodeDecodeError as err:
        lineno = raw.count(b'\n', 0, err.start) + 1
        raise ValueError(f'{path}:{lineno}: not UTF-8 text ({err.reason} at byte {err.start}); save the {what} '
                         f'as UTF-8') from None
    return list(io.StringIO(text, newline=None))  # the line splitting of open(): \n, \r\n, \r


def read_labels_tsv(path: str) -> List[Tuple[str, str]]:
    """``[(filename, transcription), ...]`` in file order.

    UTF-8 (a byte-order mark is allowed). Blank lines are ignored; a line without a tab, an empty filename or
    transcription, a repeated filename, or bytes that are not UTF-8 are an error naming the file and line.
    """
    return [(name, text) for _, name, text in read_labels_tsv_lines(path)]


def read_labels_tsv_lines(path: str) -> List[Tuple[int, str, str]]:
    """``read_labels_tsv`` with each row's line number: ``[(line, filename, transcription), ...]``."""
    rows, seen = [], {}
    for lineno, line in enumerate(_text_lines(path, 'labels file'), start=1):
        line = line.rstrip('\r\n')
        if not line.strip():
            continue
        if '\t' not in line:
            raise ValueError(f'{path}:{lineno}: expected "filename<TAB>transcription", got {line!r}')
        name, text = line.split('\t', 1)
        name = name.strip()
        if not name:
            raise ValueError(f'{path}:{lineno}: empty filename')
        if not text.strip():
            raise ValueError(f'{path}:{lineno}: empty label for {name!r}')
        if name in seen:
            raise ValueError(f'{path}:{lineno}: filename {name!r} repeats line {seen[name]}')
        seen[name] = lineno
        rows.append((lineno, name, text))
    if not rows:
        raise ValueError(f'{path}: no labelled images')
    return rows


def read_index_list(path: str, size: Optional[int] = None) -> List[int]:
    """0-based indices from ``path`` (one per line), each checked against ``size`` samples when given."""
    indices = []
    for lineno, line in enumerate(_text_lines(path, 'index list'), start=1):
        if not line.strip():
            continue
        try:
            index = int(line)
        except ValueError:
            raise ValueError(f'{path}:{lineno}: expected a 0-based integer index, got {line.strip()!r}') from None
        if index < 0 or (size is not None and index >= size):
            bound = f'[0, {size}) of the source' if size is not None else 'the non-negative integers'
            raise ValueError(f'{path}:{lineno}: index {index} outside {bound}')
        indices.append(index)
    if not indices:
        raise ValueError(f'{path}: empty index list')
    return indices


def idm_text(label: str, norm: str = 'lower') -> str:
    """The text behind the IDM tokens: DiffTSR's ``label.lower()``, or with full-to-half width first; whitespace
    removed."""
    if norm == 'lower':
        return _WHITESPACE.sub('', label.lower())
    if norm == 'q2b_lower':
        return _WHITESPACE.sub('', full_to_half(label).lower())
    raise ValueError(f'idm_text_norm must be one of {IDM_TEXT_NORMS}, got {norm!r}')


def ocr_text(label: str) -> str:
    """DiffTSR's ``label_ocr`` without its '$' end mark: full-width to half-width, then lower-case; whitespace
    removed (the ideographic space too: full-to-half makes it a space)."""
    return _WHITESPACE.sub('', full_to_half(label).lower())


def text_targets(label: str, sample: str, idm_norm: str = 'lower') -> Tuple['torch.Tensor', 'torch.Tensor']:
    """``(idm_tokens (24,) int64, ocr_target (25,) int64)`` of one transcription.

    Raises TextLabelError naming ``sample`` for an empty label, a label longer than 24 characters
    (the OCR target has room for 24 + END) or a character outside the TransOCR alphabet.
    """
    if not label or not label.strip():
        raise TextLabelError(f'{sample}: empty label')
    target_text = ocr_text(label)
    if len(target_text) > IDM_MAX_LEN:
        raise TextLabelError(f'{sample}: label {label!r} has {len(target_text)} characters, at most {IDM_MAX_LEN}')
    try:
        ocr_ids = encode_transocr(target_text)
    except ValueError as err:
        raise TextLabelError(f'{sample}: {err}') from None
    import torch  # here: the label checks of the data tools (tola-make-lmdb, tola-split-dataset) need no torch
    ocr = torch.full((OCR_TARGET_LEN, ), OCR_IGNORE_INDEX, dtype=torch.long)
    ocr[:len(ocr_ids)] = torch.tensor(ocr_ids, dtype=torch.long)
    idm = torch.tensor(encode_idm(idm_text(label, idm_norm)), dtype=torch.long)
    return idm, ocr


def usable_positions(labels: Sequence[str], key: Callable[[int], str], idm_norm: str, skip_invalid: bool, where: str,
                     warn: Callable[[str], None], hint: str = DATASET_SKIP_HINT) -> List[int]:
    """Positions of ``labels`` that give valid targets.

    Invalid labels raise one InvalidLabelsError listing the first five (naming each sample by ``key(i)``) and how
    to drop them (``hint``), unless ``skip_invalid``: then they are dropped and reported through ``warn``.
    """
    positions, errors = [], []
    for i, label in enumerate(labels):
        try:
            text_targets(label, key(i), idm_norm)
            positions.append(i)
        except TextLabelError as err:
            errors.append(str(err))
    if errors and not skip_invalid:
        raise InvalidLabelsError(where, errors, hint)
    if errors:
        warn(f'{where}: skipped {len(errors)} sample(s) with invalid labels; first: {errors[:5]}')
    if not positions:
        raise ValueError(f'{where}: no usable samples')
    return positions
