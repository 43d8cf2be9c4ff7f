"""LPIPS-VGG perceptual loss (the ``lpips`` package) as a BasicSR loss: TOLA's L_percep.

It returns BasicSR's perceptual-loss pair ``(perceptual, style)`` (style: None), so it is a ``perceptual_opt`` of
any BasicSR model (SRModel, ESRGANModel, ...) as well as of TOLAModel.

The LPIPS linear layers ship inside the ``lpips`` wheel; the VGG16 trunk is torchvision's ImageNet file
``vgg16-397923af.pth``, which must already be in ``$TORCH_HOME/hub/checkpoints/`` (nothing is downloaded).
Both files are read weights-only before lpips/torchvision see them, and their own loads run weights-only
(``metric_weights.py``): a file carrying pickled code is refused with its path.
"""
import warnings
from typing import Tuple

import torch
from torch import nn

from basicsr.utils.registry import LOSS_REGISTRY

from tola_plugin import metric_weights as W

VGG16_FILE = W.VGG16.name  # the name torchvision caches the ImageNet VGG16 weights under


@LOSS_REGISTRY.register()
class LPIPSLoss(nn.Module):
    """loss_weight · mean LPIPS(pred, target) with images in [0, 1].

    Args:
        loss_weight: weight of the loss (paper: 1).
        net: LPIPS trunk, 'vgg' for training (paper: LPIPS-VGG); evaluation uses AlexNet elsewhere.
        pretrained_backbone: True (default) loads the ImageNet trunk from the local torchvision cache and
            raises FileNotFoundError if the file is missing. False gives a random trunk: ONLY for tests and
            the CPU demo, never for real training.
    """

    def __init__(self, loss_weight=1.0, net='vgg', pretrained_backbone=True):
        super().__init__()
        import lpips  # imported here: lpips prints nothing at import, but it is only needed when built
        if net != 'vgg':
            raise ValueError(f"LPIPSLoss: net must be 'vgg' (the paper trains with LPIPS-VGG), got {net!r}")
        files = W.LPIPS_LOSS_WEIGHTS if pretrained_backbone else (W.LPIPS_VGG_LINEAR, )
        try:
            W.require_weight_files('LPIPSLoss', files)
        except FileNotFoundError as err:
            raise FileNotFoundError(f'{err} ($TORCH_HOME/hub/checkpoints; or set pretrained_backbone: false for '
                                    'tests/demos only)') from None
        self.loss_weight = loss_weight
        linear = W.weight_path(W.LPIPS_VGG_LINEAR)
        with W.no_downloads(), warnings.catch_warnings():
            # lpips 0.1.4 still calls torchvision's deprecated ``pretrained=``
            warnings.filterwarnings('ignore', category=UserWarning, module='torchvision')
            self.lpips = lpips.LPIPS(net=net, pretrained=True, pnet_rand=not pretrained_backbone, model_path=linear,
                                     verbose=False)
        W.assert_loaded(self.lpips, linear, 'LPIPSLoss: LPIPS linear layers')  # lpips loads them with strict=False
        self.lpips.eval()
        for p in self.lpips.parameters():
            p.requires_grad_(False)

    def train(self, mode=True):
        """The LPIPS network is a fixed metric: it stays in eval mode (its dropout off) while TOLA trains."""
        super().train(mode)
        self.lpips.eval()
        return self

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> Tuple[torch.Tensor, None]:
        """pred, target: (B, 3, H, W) RGB in [0, 1] -> (scalar, None): BasicSR's ``PerceptualLoss`` convention
        (perceptual term, style term), so that BasicSR's models take it as their ``perceptual_opt``."""
        return self.loss_weight * self.lpips(pred, target, normalize=True).mean(), None
