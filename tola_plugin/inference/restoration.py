"""The records of a restoration: an image and its lines while ``TOLAPipeline`` restores them (``ImageWork``,
``LineWork``), what it returns (``Restoration``: the restored image and its ``LineResult``s), and the rule that decides
which restored lines replace the original in a photo (``reads_as_well``, ``paste_refusal``)."""
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from tola_plugin.inference.line_geometry import LineLayout

WINDOW_SEPARATOR = ' | '  # between the text priors of the windows of one wide line


def reads_as_well(before, after) -> bool:
    """Whether a restored line reads as well as the original (``paste_refusal``'s first check): PP-OCRv4 reads some
    text in the restored line (a line restored into nothing, as small text can be, is never pasted) and the same text
    as in the original, or reads it at least as confidently. Measured on 100 lines of 25 rendered photos (the demo
    model, tools/measure_photo_lines.py; docs/restore.md, "Which lines are pasted"): PP-OCRv4 read 0.90 of the
    original lines right, 0.83 of the restored ones, and 0.90 of the photo's lines with this rule, which pastes 87 %
    of them (with the colour checks of ``paste_refusal`` too: 0.90 and 88 % with the default 'luma' colour fix,
    10 % with 'wavelet', whose strokes keep the network's purple)."""
    return bool(after.text.strip()) and (after.text == before.text or after.confidence >= before.confidence)


def paste_refusal(before, after, colours) -> str:
    """Why a restored line does not replace the original under ``paste='checked'``, '' when it does: it must read as
    well (``reads_as_well``) and keep the colours of its ink and of the background at its seam (``colours``, a
    ``paste_judge.ColourCheck``)."""
    if not after.text.strip():
        return 'PP-OCRv4 reads no text in the restored line'
    if not reads_as_well(before, after):
        return (f'PP-OCRv4 reads it worse restored: {after.text!r} ({after.confidence:.2f}) against '
                f'{before.text!r} ({before.confidence:.2f})')
    return colours.refusal()


@dataclass
class LineResult:
    """One restored text line.

    prior_text: the text prior TransOCR read from the line (the windows' texts of a wide line joined by
        WINDOW_SEPARATOR); window_texts: one per window; token_confidences: the prior's per-character
        confidences, all windows in order; prior_confidence: their mean (0.0 for an empty prior).
    polygon: with detect, the line's quadrilateral in input pixel coordinates ([x, y] top-left, top-right,
        bottom-right, bottom-left), else None.
    text_before / text_after (+ confidences): PP-OCRv4's reading of the line before and after restoring (when
        recognition was asked for), else None.
    pasted: with detect, whether the restored line replaced the original in the output photo (``paste``), else None;
        not_pasted_because: why not (``paste_refusal``), else None.
    ink_delta_e / seam_delta_e: with detect, how far the restored line's ink colour and the background at its seam
        moved from the original's (ΔE76, ``paste_judge``), else None.
    """
    prior_text: str
    prior_confidence: float
    token_confidences: List[float]
    window_texts: List[str]
    polygon: Optional[List[List[float]]] = None
    text_before: Optional[str] = None
    confidence_before: Optional[float] = None
    text_after: Optional[str] = None
    confidence_after: Optional[float] = None
    pasted: Optional[bool] = None
    not_pasted_because: Optional[str] = None
    ink_delta_e: Optional[float] = None
    seam_delta_e: Optional[float] = None

    def to_dict(self) -> Dict:
        return asdict(self)

    @classmethod
    def of(cls, line: 'LineWork') -> 'LineResult':
        """The result of a restored line."""
        tokens = [c for window in line.confidences for c in window]
        result = cls(
            prior_text=WINDOW_SEPARATOR.join(line.texts), prior_confidence=float(np.mean(tokens)) if tokens else 0.0,
            token_confidences=[float(c) for c in tokens], window_texts=list(line.texts))
        if line.polygon is not None:
            result.polygon = [[round(float(x), 2), round(float(y), 2)] for x, y in line.polygon]
        if line.before is not None:
            result.text_before, result.confidence_before = line.before.text, line.before.confidence
            result.text_after, result.confidence_after = line.after.text, line.after.confidence
        result.pasted, result.not_pasted_because = line.pasted, line.refusal or None
        if line.colours is not None:
            result.ink_delta_e = round(line.colours.ink_delta_e, 2)
            result.seam_delta_e = round(line.colours.seam_delta_e, 2)
        return result


@dataclass
class Restoration:
    """The restored image (RGB uint8, (H, W, 3)) and its lines; input_size = (H, W) of the input as read;
    outscale = output size / input size (per axis up to rounding); note: why a photo has no lines when the detector
    could not take it (e.g. too thin), else ''."""
    image: np.ndarray
    lines: List[LineResult]
    input_size: Tuple[int, int]
    outscale: float
    name: str = ''
    detected: bool = False
    note: str = ''

    def to_dict(self) -> Dict:
        """JSON-ready summary (no pixels): sizes, outscale, the lines (and the note, when there is one)."""
        out = dict(name=self.name, input_size=list(self.input_size), output_size=list(self.image.shape[:2]),
                   outscale=self.outscale, detected=self.detected, lines=[line.to_dict() for line in self.lines])
        if self.note:
            out['note'] = self.note
        return out


@dataclass
class LineWork:
    """A line being restored: its strip (uint8 RGB, native resolution), canvases and, after the network, priors."""
    strip: np.ndarray
    layout: LineLayout
    tiles: np.ndarray
    seeds: List[int]
    quad: Optional[np.ndarray] = None
    polygon: Optional[np.ndarray] = None
    restored: Optional[np.ndarray] = None
    texts: List[str] = field(default_factory=list)
    confidences: List[List[float]] = field(default_factory=list)
    before: Optional[object] = None  # PP-OCRv4 Recognition of the strip and of the restored strip
    after: Optional[object] = None
    pasted: Optional[bool] = None  # detect: whether the restored line replaced the original
    refusal: str = ''  # detect: why not ('' when it did)
    colours: Optional[object] = None  # detect: its paste_judge.ColourCheck


@dataclass
class ImageWork:
    """An image being restored: its pixels (uint8 RGB), name (noise seed), lines, output scale and size, decided
    (and checked against the bounds) before the network runs; ``error``: why it failed, if it did."""
    rgb: np.ndarray
    name: str
    lines: List[LineWork]
    scale: float
    out_size: Tuple[int, int]
    note: str = ''
    error: Optional[BaseException] = None
