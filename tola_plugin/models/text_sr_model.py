"""Text-aware BasicSR models: BasicSR's SRModel, SwinIRModel and ESRGANModel with TOLA's OCR cross-entropy added to
the generator's loss, so that any BasicSR SR network (RRDBNet, SwinIR, EDSR, RCAN, ...) trains as a text-aware
baseline on the same data as TOLA (docs/baselines.md, "Text-aware baselines").

Under ``train``, besides the base model's keys:
    ocr_opt: {type: OCRCELoss, loss_weight: 0.02}   # TOLA's L_ocr (paper weight 0.02); absent or weight 0: off
    ocr_recognizer: checkpoints/transocr.pth        # the frozen TransOCR TOLA uses: the official transocr.pth (or
                                                    # our safetensors), or ``demo``: the demo backbone's TransOCR

The recognizer reads the restored line teacher-forced with the label (``ocr_target`` of our datasets) and stays
frozen in eval mode; its gradient flows into the SR network only. It is not one of the model's networks: it is
neither saved nor trained. The OCR term is computed where BasicSR's models compute their pixel loss (the pixel loss
is wrapped, ``PixelWithOCR``), so each base model's own training step (ESRGAN's generator/discriminator schedule
included) runs unchanged; the log shows it as ``l_ocr`` beside the pixel term. The recognizer needs whole lines:
``ocr_opt`` with ``datasets.train.gt_size`` (square patches of a line) is an error.
"""
import os
from collections import OrderedDict
from typing import List

import torch
from torch import nn

from basicsr.losses import build_loss
from basicsr.models.esrgan_model import ESRGANModel
from basicsr.models.sr_model import SRModel
from basicsr.models.swinir_model import SwinIRModel
from basicsr.utils import get_root_logger
from basicsr.utils.registry import MODEL_REGISTRY

from tola_plugin.archs.backbone_builder import load_transocr
from tola_plugin.checkpoints.demo_backbone import DEMO, transocr_file

DEFAULT_RECOGNIZER = 'checkpoints/transocr.pth'  # TOLANet's default transocr_checkpoint
# ``train`` keys of BasicSR 1.4.2's models (what their init_training_settings and the pipeline read)
TEXT_TRAIN_KEYS = frozenset({'ocr_opt', 'ocr_recognizer'})  # beyond the base model's (options/schema.py)
OCR_DATASETS = ('TextDegradationDataset', 'PairedTextDataset')  # the training sets that give 'ocr_target'


class PixelWithOCR(nn.Module):
    """The base model's pixel loss (or none) plus the OCR CE of the same output: ``forward(output, gt)`` as BasicSR
    calls ``cri_pix``. The two terms of the last call are kept (detached) for the log."""

    def __init__(self, pixel, ocr, model):
        super().__init__()
        self.pixel, self.ocr = pixel, ocr
        self._model = [model]  # not a submodule: the model owns the recognizer and the targets
        self.last = None

    def forward(self, output: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
        model = self._model[0]
        if model.ocr_target is None:
            raise KeyError("train.ocr_opt needs the dataset's 'ocr_target' (our TextDegradationDataset and "
                           'PairedTextDataset give it)')
        l_ocr = self.ocr(output, model.ocr_target, model.ocr_recognizer)
        l_pix = self.pixel(output, gt) if self.pixel is not None else None
        self.last = (None if l_pix is None else l_pix.detach(), l_ocr.detach())
        return l_ocr if l_pix is None else l_pix + l_ocr


class TextAwareMixin:
    """``train.ocr_opt`` and ``train.ocr_recognizer`` for a BasicSR SR model (see the module docstring)."""

    train_option_keys = TEXT_TRAIN_KEYS
    ocr_target = None
    ocr_recognizer = None
    pixel_log_key = 'l_pix'  # the name the base model logs its pixel loss under

    @classmethod
    def option_problems(cls, opt, files: bool = False) -> List[str]:
        """What the OCR loss (``train.ocr_opt``) needs that the options ``opt`` lack, every one (``checks``
        says them in one error, before anything runs): whole lines, a training set that gives ``ocr_target``; with
        ``files`` also the recognizer's file (named with the others, so that one start says every change; alone, it
        is the error of the model's start)."""
        train = opt.get('train') if isinstance(opt.get('train'), dict) else {}
        ocr_opt = train.get('ocr_opt')
        if not isinstance(ocr_opt, dict) or ocr_opt.get('loss_weight', 1.0) == 0:
            return []
        datasets = opt.get('datasets') if isinstance(opt.get('datasets'), dict) else {}
        dataset = datasets.get('train') if isinstance(datasets.get('train'), dict) else {}
        problems = []
        if dataset.get('gt_size') is not None:
            problems.append('no datasets.train.gt_size (the recognizer reads whole text lines: remove gt_size, which '
                            'crops square patches of them; the LR line is then 128/s x 512/s)')
        if dataset.get('type') not in OCR_DATASETS:
            problems.append(f"a datasets.train.type that gives the labels the loss reads ('ocr_target': "
                            f"{' or '.join(OCR_DATASETS)}; {dataset.get('type')} gives none)")
        value = train.get('ocr_recognizer', DEFAULT_RECOGNIZER)
        if files and value != DEMO and not os.path.isfile(str(value)):
            problems.append(f'train.ocr_recognizer, the frozen TransOCR: {value} is not a file (the official '
                            'transocr.pth; or train:ocr_recognizer=demo, the demo backbone\'s TransOCR)')
        return problems

    def init_training_settings(self):
        super().init_training_settings()
        train = self.opt['train']
        ocr_opt = train.get('ocr_opt')
        if not ocr_opt or ocr_opt.get('loss_weight', 1.0) == 0:
            return
        if self.opt['datasets']['train'].get('gt_size') is not None:
            raise ValueError('train.ocr_opt: the recognizer reads whole text lines, but datasets.train.gt_size crops '
                             'square patches of them; remove gt_size (the LR line is then 128/s x 512/s)')
        path = transocr_file(train.get('ocr_recognizer', DEFAULT_RECOGNIZER))
        try:
            recognizer = load_transocr(path).to(self.device)
        except FileNotFoundError as err:
            raise FileNotFoundError(f'train.ocr_recognizer (the frozen TransOCR of train.ocr_opt): {err} Or, without '
                                    'the official file: --force_yml train:ocr_recognizer=demo (the demo backbone\'s '
                                    'TransOCR: letters, digits and 100 frequent Chinese characters), or '
                                    'train:ocr_opt=~ (no OCR loss)') from None
        for p in recognizer.parameters():
            p.requires_grad_(False)
        self.ocr_recognizer = recognizer.eval()
        self.cri_pix = PixelWithOCR(self.cri_pix, build_loss(ocr_opt).to(self.device), self)
        get_root_logger().info(f'OCR cross-entropy x {ocr_opt.get("loss_weight", 0.02)} with the frozen TransOCR of '
                               f'{path}')

    def feed_data(self, data):
        super().feed_data(data)
        self.ocr_target = data['ocr_target'].to(self.device) if 'ocr_target' in data else None

    def optimize_parameters(self, current_iter):
        """The base model's step; the OCR term (in ``cri_pix``) is logged as ``l_ocr`` and taken out of the pixel
        term's line."""
        wrapped = isinstance(self.cri_pix, PixelWithOCR)
        if wrapped:
            self.cri_pix.last = None
        super().optimize_parameters(current_iter)
        if not wrapped or self.cri_pix.last is None:  # ESRGAN skips the generator in some iterations
            return
        l_pix, l_ocr = self.cri_pix.last
        terms = OrderedDict(l_ocr=l_ocr)
        if l_pix is not None:
            terms[self.pixel_log_key] = l_pix
        for key, value in self.reduce_loss_dict(terms).items():
            self.log_dict[key] = value


@MODEL_REGISTRY.register()
class TextSRModel(TextAwareMixin, SRModel):
    """BasicSR's SRModel (RRDBNet, EDSR, RCAN, ...) with ``train.ocr_opt``."""

    train_option_keys = TEXT_TRAIN_KEYS


@MODEL_REGISTRY.register()
class TextSwinIRModel(TextAwareMixin, SwinIRModel):
    """BasicSR's SwinIRModel (window padding at test time) with ``train.ocr_opt``."""

    train_option_keys = TEXT_TRAIN_KEYS


@MODEL_REGISTRY.register()
class TextESRGANModel(TextAwareMixin, ESRGANModel):
    """BasicSR's ESRGANModel (relativistic GAN, perceptual loss) with ``train.ocr_opt``."""

    train_option_keys = TEXT_TRAIN_KEYS
    pixel_log_key = 'l_g_pix'
