"""Teacher-forced token-level cross-entropy of a frozen TransOCR on the restored image: TOLA's L_ocr.

Gradients flow through the recognizer into the image and from there into LoRA and LRC; the recognizer's
own weights stay frozen. The recognizer is not owned by the loss: it is passed to ``forward`` so that the
conditioning recognizer inside ``TOLANet`` and this loss share one copy in memory (the paper uses two
frozen instances of the same checkpoint; with frozen weights and eval mode they are the same function).
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from basicsr.utils.registry import LOSS_REGISTRY

IGNORE_INDEX = -100  # padding of ``ocr_target`` after END, as produced by the datasets


@LOSS_REGISTRY.register()
class OCRCELoss(nn.Module):
    """loss_weight · CE(TransOCR(pred, teacher forcing), targets), averaged over the non-padding tokens.

    Args:
        loss_weight: weight (paper: 0.02).
    """

    def __init__(self, loss_weight=0.02):
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, pred: torch.Tensor, targets: torch.Tensor, recognizer: Optional[nn.Module] = None,
                num_tokens: Optional[int] = None) -> torch.Tensor:
        """pred: (B, 3, H, W) restored RGB in [0, 1]; targets: (B, L) native TransOCR class ids ending with END,
        padded with -100; recognizer: a TransOCR whose ``forward(images, targets)`` gives logits (B, L, C).
        num_tokens: when ``pred`` is a micro-batch of a larger batch (gradient accumulation), the number of target
        tokens of the whole batch: the sum over this micro-batch's tokens is divided by it, so the micro-batches'
        losses add up to the batch's mean. None: the mean over this batch's tokens."""
        if recognizer is None:  # e.g. as pixel_opt of SRModel, which calls it with (output, gt)
            raise ValueError('OCRCELoss reads the restored text with a recognizer and compares it with the label: it '
                             'is the train.ocr_opt of TOLAModel or of TextSRModel / TextSwinIRModel / TextESRGANModel '
                             '(models/text_sr_model.py), not a pixel_opt or perceptual_opt')
        if targets.dim() != 2 or targets.shape[0] != pred.shape[0]:
            raise ValueError(f'OCRCELoss: targets must be (B, L) with B={pred.shape[0]}, got {tuple(targets.shape)}')
        if recognizer.training:
            raise RuntimeError('OCRCELoss: the recognizer must be in eval mode (frozen BatchNorm/dropout)')
        logits = recognizer(pred, targets)
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            targets.reshape(-1).long(), ignore_index=IGNORE_INDEX, reduction='mean' if num_tokens is None else 'sum')
        return self.loss_weight * (loss if num_tokens is None else loss / num_tokens)
