"""The two alphabets, loaded from package data (byte-identical copies of DiffTSR's and FudanVI's files).

IDM alphabet: 6,735 characters, class index = position, 6735 = pad/unknown, 24 positions.
TransOCR alphabet: 7,934 characters; classes are ['START', '\\xad'] + characters + ['END'] = 7,937.
"""
from functools import lru_cache
from importlib import resources
from typing import Dict, List, Optional, Sequence

IDM_PAD = 6735
IDM_NUM_CLASSES = 6736
IDM_MAX_LEN = 24

TRANSOCR_START = 0
TRANSOCR_NUM_CLASSES = 7937
TRANSOCR_END = TRANSOCR_NUM_CLASSES - 1


def _read(name: str) -> str:
    return resources.files('tola_plugin.assets.vocab').joinpath(name).read_text(encoding='utf-8')


@lru_cache(maxsize=None)
def idm_alphabet() -> str:
    """The IDM alphabet string (6,735 characters)."""
    text = _read('difftsr_idm_alphabet.txt')
    assert len(text) == IDM_PAD, f'IDM alphabet has {len(text)} characters, expected {IDM_PAD}'
    return text


@lru_cache(maxsize=None)
def transocr_classes() -> List[str]:
    """TransOCR class list: index 0 'START', 1 '\\xad', 2.. the alphabet, 7936 'END'."""
    chars = _read('transocr_benchmark_alphabet.txt')
    classes = ['START', '\xad'] + list(chars) + ['END']
    assert len(classes) == TRANSOCR_NUM_CLASSES, f'TransOCR has {len(classes)} classes'
    return classes


@lru_cache(maxsize=None)
def _idm_index() -> Dict[str, int]:
    return {ch: i for i, ch in enumerate(idm_alphabet())}


@lru_cache(maxsize=None)
def _transocr_index() -> Dict[str, int]:
    return {ch: i for i, ch in enumerate(transocr_classes()) if i not in (TRANSOCR_START, TRANSOCR_END)}


def idm_char_index(ch: str) -> int:
    """IDM class of one character; IDM_PAD when the alphabet lacks it (DiffTSR keeps it in place)."""
    return _idm_index().get(ch, IDM_PAD)


def encode_idm(text: str, length: int = IDM_MAX_LEN) -> List[int]:
    """``text`` -> ``length`` IDM indices: unknown characters become IDM_PAD in place, then pad/truncate."""
    ids = [idm_char_index(ch) for ch in text][:length]
    return ids + [IDM_PAD] * (length - len(ids))


def decode_idm(ids: Sequence[int]) -> str:
    """IDM indices -> text, skipping pads."""
    alphabet = idm_alphabet()
    return ''.join(alphabet[i] for i in ids if i != IDM_PAD)


def encode_transocr(text: str, unknown_index: Optional[int] = None) -> List[int]:
    """``text`` -> TransOCR class indices followed by END.

    A character outside the alphabet raises ValueError naming it, unless ``unknown_index`` is given.
    """
    index = _transocr_index()
    ids = []
    for ch in text:
        if ch in index:
            ids.append(index[ch])
        elif unknown_index is not None:
            ids.append(unknown_index)
        else:
            raise ValueError(f'character {ch!r} (U+{ord(ch):04X}) of {text!r} is not in the TransOCR alphabet')
    return ids + [TRANSOCR_END]


def decode_transocr(ids: Sequence[int]) -> str:
    """TransOCR class indices -> text, stopping at END and skipping START."""
    classes = transocr_classes()
    out = []
    for i in ids:
        if i == TRANSOCR_END:
            break
        if i != TRANSOCR_START:
            out.append(classes[i])
    return ''.join(out)
