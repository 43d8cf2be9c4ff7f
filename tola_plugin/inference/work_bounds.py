"""Bounds on the work one image may cause, checked before any of it is done (docs/reliability.md, "Bounded inputs").

The cost of restoring an image is its number of 128x512 windows (one network call each: a 3x5000 line is 213,333
columns at the canvas height, 555 windows) and the size of its output (``outscale`` x the input). Both follow from
the image's size and the options, so they are known before the network runs; an image over a bound is an error
that says the limit and how to raise it (``BoundError``, a ValueError). The defaults:

- ``DEFAULT_MAX_WINDOWS`` = 256 windows per image (a line up to about 760 times wider than high at the default
  overlap; a photo's detected lines together);
- ``DEFAULT_MAX_OUTPUT_PIXELS`` = 100 megapixels per output image (300 MB as 8-bit RGB);
- ``outscale`` must be a finite number > 0.
"""
import math
from typing import Optional, Tuple

DEFAULT_MAX_WINDOWS = 256
DEFAULT_MAX_OUTPUT_PIXELS = 100_000_000


class BoundError(ValueError):
    """An image whose restoration would exceed a bound (windows, output pixels); the message names the image, the
    limit and the option that raises it."""


def _megapixels(pixels: float) -> str:
    return f'{pixels / 1e6:.3g} megapixels'


def check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f'{name} must be a whole number >= 1, got {value!r}')
    return value


def check_positive(value, name: str) -> float:
    """A finite number > 0 (``outscale``, ``max_output_pixels``); inf and NaN are refused."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f'{name} must be a finite number > 0, got {value!r}') from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f'{name} must be a finite number > 0, got {value!r}')
    return number


def check_outscale(outscale) -> Optional[float]:
    """None (the default scale) or a finite number > 0."""
    return None if outscale is None else check_positive(outscale, 'outscale')


def check_windows(what: str, windows: int, limit: int, source: str) -> None:
    """Refuse ``windows`` 128x512 windows for one image over ``limit``; ``source`` says what needs them."""
    if windows > limit:
        raise BoundError(f'{what}: {windows} windows of 128x512 needed for {source}, over the limit of {limit} per '
                         f'image (raise it with --max-windows, or max_windows= in Python)')


def output_size(what: str, height: int, width: int, scale: float, limit: float) -> Tuple[int, int]:
    """(rows, columns) of an ``height`` x ``width`` image scaled by ``scale`` (each at least 1), refused when it
    has more than ``limit`` pixels (computed in floats first, so a huge scale cannot overflow)."""
    rows, cols = height * scale, width * scale
    pixels = max(rows, 1.0) * max(cols, 1.0)
    if not math.isfinite(pixels) or pixels > limit:
        raise BoundError(f'{what}: outscale {scale:g} makes a {cols:.0f}x{rows:.0f} output ({_megapixels(pixels)}), '
                         f'over the limit of {_megapixels(limit)} per image (lower --outscale, or raise the limit '
                         f'with --max-output-megapixels, or max_output_pixels= in Python)')
    return max(1, round(rows)), max(1, round(cols))
