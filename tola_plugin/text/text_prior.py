"""DiffTSR's text prior c_t: TransOCR greedy output -> 24 IDM tokens, with TOLA's per-token confidences.

Token mapping = DiffTSR's ``Text_Prediction.predict`` post-processing, quirks included (docs/transocr.md, "Text
prior rules"):
- only the first 23 greedy steps are read (the official loop looks at ``pred[0:24]`` = START + 23 steps);
- the text is cut at the first END; a START predicted inside the text is written as the five letters
  'START' (which then map to IDM upper-case letters); '\\xad' is written as itself;
- zhconv 'zh-cn' traditional -> simplified on the whole string;
- each character -> its IDM index, 6735 *in place* when the IDM alphabet lacks it; pad/truncate to 24 with 6735.

Confidences (TOLA's, not in DiffTSR): each IDM position takes the step probability of the TransOCR token
that produced its character (all five letters of a 'START' take that token's probability); padding gets 0;
characters missing from the IDM alphabet keep their confidence; when the zhconv conversion changes the
string's length (phrase conversions such as 公升 -> 升), every character position takes the minimum step
probability over the kept tokens, since the per-character alignment is lost.
"""
from typing import List, Sequence, Tuple

import torch

from tola_plugin.text.alphabets import (IDM_MAX_LEN, IDM_PAD, TRANSOCR_END, TRANSOCR_NUM_CLASSES, encode_idm,
                                        transocr_classes)
from tola_plugin.text.normalize import to_simplified

# The official window: pred[0:24] holds START and the first 23 predictions.
DIFFTSR_MAX_TOKENS = IDM_MAX_LEN - 1


def _kept_tokens(ids: Sequence[int], max_tokens: int) -> List[int]:
    """The predicted tokens DiffTSR keeps: the first ``max_tokens`` steps, cut before the first END."""
    kept = []
    for token in ids[:max_tokens]:
        if token == TRANSOCR_END:
            break
        if not 0 <= token < TRANSOCR_NUM_CLASSES:
            raise ValueError(f'text prior: TransOCR id {token} outside [0, {TRANSOCR_NUM_CLASSES})')
        kept.append(token)
    return kept


def _source_steps(kept: Sequence[int]) -> Tuple[str, List[int]]:
    """(raw string as tensor2str writes it, for each character the step index of the token that produced it)."""
    classes = transocr_classes()
    text, steps = [], []
    for step, token in enumerate(kept):
        piece = classes[token]  # 'START' for id 0: the official tensor2str writes the class name
        text.append(piece)
        steps += [step] * len(piece)
    return ''.join(text), steps


def difftsr_prediction_text(ids: Sequence[int], probs: Sequence[float],
                            max_tokens: int = DIFFTSR_MAX_TOKENS) -> Tuple[str, List[float]]:
    """One sample: greedy ids (S,) and step probs (S,) -> (the string DiffTSR maps to IDM indices, one
    confidence per character of it). Confidences follow the module docstring's alignment rule."""
    kept = _kept_tokens(list(ids), max_tokens)
    raw, steps = _source_steps(kept)
    text = to_simplified(raw)
    if len(text) == len(raw):
        return text, [float(probs[s]) for s in steps]
    lowest = min(float(probs[s]) for s in range(len(kept)))
    return text, [lowest] * len(text)


def transocr_to_idm(ids: torch.Tensor, probs: torch.Tensor, max_tokens: int = DIFFTSR_MAX_TOKENS,
                    length: int = IDM_MAX_LEN) -> Tuple[torch.Tensor, torch.Tensor]:
    """TransOCR greedy output -> DiffTSR's c_t and TOLA's token confidences.

    Args:
        ids: (B, S) long, greedy TransOCR ids per step (START excluded), e.g. ``TransOCR.greedy_decode``.
        probs: (B, S) float in (0, 1], the step max-softmax probabilities (gradients flow through).
        max_tokens: steps read (23, DiffTSR's window quirk).
        length: IDM sequence length (24).

    Returns:
        idm_tokens (B, length) long in [0, 6735] (6735 = pad/unknown) on ids.device, and confidences
        (B, length) of probs' dtype/device: a kept character's step probability (in (0, 1]), 0 at padding.
    """
    if ids.dim() != 2 or probs.shape != ids.shape:
        raise ValueError(f'text prior: ids and probs must both be (B, S); got {tuple(ids.shape)} and '
                         f'{tuple(probs.shape)}')
    if ids.size(1) == 0:
        raise ValueError('text prior: ids has no decoding steps (S = 0)')
    batch = ids.size(0)
    tokens = torch.full((batch, length), IDM_PAD, dtype=torch.long)
    source = torch.zeros(batch, length, dtype=torch.long)  # step whose probability each position takes
    use_min = torch.zeros(batch, dtype=torch.bool)
    filled = torch.zeros(batch, length, dtype=torch.bool)
    kept_count = torch.zeros(batch, dtype=torch.long)
    for b, row in enumerate(ids.tolist()):
        kept = _kept_tokens(row, max_tokens)
        raw, steps = _source_steps(kept)
        text = to_simplified(raw)
        n = min(len(text), length)
        tokens[b] = torch.tensor(encode_idm(text, length))
        filled[b, :n] = True
        kept_count[b] = len(kept)
        if len(text) == len(raw):
            source[b, :n] = torch.tensor(steps[:n], dtype=torch.long)
        else:
            use_min[b] = True
    source, filled, use_min = source.to(probs.device), filled.to(probs.device), use_min.to(probs.device)
    confidences = probs.gather(1, source)
    if use_min.any():
        # minimum over each sample's kept steps; steps beyond them are masked with +inf
        steps = torch.arange(probs.size(1), device=probs.device)
        in_kept = steps[None, :] < kept_count.to(probs.device)[:, None]
        lowest = probs.masked_fill(~in_kept, float('inf')).min(1, keepdim=True).values
        confidences = torch.where(use_min[:, None], lowest.expand_as(confidences), confidences)
    confidences = torch.where(filled, confidences, torch.zeros_like(confidences))
    return tokens.to(ids.device), confidences
