"""What an image is to the restorer: one text line, or a photo whose lines PP-OCRv4 finds first. One rule for the web
page's switch and tola-infer's ``--kind`` (docs/restore.md, "A line or a photo"): ``KINDS``, 'auto' deciding each
image by its shape (``looks_like_a_photo``), and the words both say it with (``describe_kind``)."""
from tola_plugin.data.text_line_source import CANVAS_H

KINDS = ('auto', 'line', 'photo')  # what an image is: decided by its shape, or asked for
AUTO_REASONS = {True: 'taller than two lines or not wide', False: 'line-shaped'}  # why 'auto' decided so


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise ValueError(f'kind must be one of {KINDS}, got {kind!r}')
    return kind


def looks_like_a_photo(height: int, width: int) -> bool:
    """The 'auto' kind: a photo (its lines found first) when the image is more than two network lines tall
    (256 rows), or taller than one (128) and less than twice as wide as tall; else one text line. A 900x600 photo is
    a photo; a 128x32 line, a 32x32 word and a 512x128 canvas are lines."""
    return height > 2 * CANVAS_H or (height > CANVAS_H and width < 2 * height)


def is_photo(kind: str, height: int, width: int) -> bool:
    """Whether an image of ``height`` x ``width`` is restored as a photo under ``kind`` (one of KINDS)."""
    return check_kind(kind) == 'photo' or (kind == 'auto' and looks_like_a_photo(height, width))


def describe_kind(kind: str, photo: bool) -> str:
    """'a photo (auto: taller than two lines or not wide)', 'one text line (as asked)', ...: what an image was
    restored as, and why."""
    why = f'auto: {AUTO_REASONS[photo]}' if kind == 'auto' else 'as asked'
    return f'{"a photo" if photo else "one text line"} ({why})'
