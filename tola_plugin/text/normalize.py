"""Text normalization shared by the text prior and the recognition metrics (paper: Evaluation Protocol).

``normalize_text``: full-width -> half-width, traditional -> simplified (zhconv 'zh-cn'), all whitespace
removed, case preserved. ``lower=True`` gives the CTR benchmark's variant.
"""
import re

import zhconv

_WHITESPACE = re.compile(r'\s+')


def full_to_half(text: str) -> str:
    """Full-width forms (U+FF01..U+FF5E) and the ideographic space to their ASCII counterparts."""
    out = []
    for ch in text:
        code = ord(ch)
        if code == 0x3000:
            code = 0x20
        elif 0xFF01 <= code <= 0xFF5E:
            code -= 0xFEE0
        out.append(chr(code))
    return ''.join(out)


def to_simplified(text: str) -> str:
    """Traditional -> simplified Chinese, as DiffTSR and the CTR benchmark do (zhconv, 'zh-cn')."""
    return zhconv.convert(text, 'zh-cn')


def normalize_text(text: str, lower: bool = False) -> str:
    """Normalize a transcription for matching: half-width, simplified, no whitespace, case kept."""
    text = _WHITESPACE.sub('', to_simplified(full_to_half(text)))
    return text.lower() if lower else text
