"""Recognition metrics of the paper: ACC (exact match) and NED, with the paper's text normalization.

Normalization (``tola_plugin.text.normalize.normalize_text``) is applied to prediction and ground truth:
full-width -> half-width, traditional -> simplified, whitespace removed, case preserved (the paper);
``lower=True`` adds the CTR benchmark's lower-casing.

NED = 1 - ED(p, g) / max(|p|, |g|, 1) per sample (Levenshtein distance with unit costs; two empty strings
give 1), averaged over the set. Edit operations split ED into substitutions, deletions (ground-truth
characters missing from the prediction) and insertions (extra predicted characters), from rapidfuzz's
minimal edit script, which is deterministic.
"""
from dataclasses import dataclass
from typing import Dict, Sequence

from rapidfuzz.distance import Levenshtein

from tola_plugin.text.normalize import normalize_text


def normalize(text: str, lower: bool = False) -> str:
    """The evaluation normalization (see module docstring)."""
    return normalize_text(text, lower=lower)


def edit_distance(pred: str, gt: str) -> int:
    """Levenshtein distance with unit insertion, deletion and substitution costs."""
    return Levenshtein.distance(pred, gt)


def ned(pred: str, gt: str) -> float:
    """Normalized edit-distance similarity 1 - ED/max(|p|,|g|,1), in [0,1] (1 = identical)."""
    return 1.0 - edit_distance(pred, gt) / max(len(pred), len(gt), 1)


@dataclass(frozen=True)
class EditOps:
    """Character edit operations turning the ground truth into the prediction."""
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0

    @property
    def total(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    def __add__(self, other: 'EditOps') -> 'EditOps':
        return EditOps(self.substitutions + other.substitutions, self.deletions + other.deletions,
                       self.insertions + other.insertions)


def edit_operations(pred: str, gt: str) -> EditOps:
    """Split ED(pred, gt) into substitutions, deletions and insertions (their sum equals ED)."""
    counts = {'replace': 0, 'delete': 0, 'insert': 0}
    for op in Levenshtein.editops(gt, pred):
        counts[op.tag] += 1
    return EditOps(counts['replace'], counts['delete'], counts['insert'])


def recognition_scores(preds: Sequence[str], gts: Sequence[str], lower: bool = False) -> Dict[str, float]:
    """ACC and NED of raw predictions against raw labels (both normalized here); {'acc', 'ned', 'n'}."""
    if len(preds) != len(gts):
        raise ValueError(f'{len(preds)} predictions but {len(gts)} ground-truth labels')
    if not gts:
        raise ValueError('no samples to score')
    acc = ned_sum = 0.0
    for pred, gt in zip(preds, gts):
        p, g = normalize(pred, lower), normalize(gt, lower)
        acc += float(p == g)
        ned_sum += ned(p, g)
    return {'acc': acc / len(gts), 'ned': ned_sum / len(gts), 'n': len(gts)}
