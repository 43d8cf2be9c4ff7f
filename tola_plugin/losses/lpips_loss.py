"""LPIPS-VGG perceptual loss (the ``lpips`` package) as a BasicSR loss: TOLA's L_percep.

The LPIPS linear layers ship inside the ``lpips`` wheel; the VGG16 trunk is torchvision's ImageNet file
``vgg16-397923af.pth``, which must already be in ``$TORCH_HOME/hub/checkpoints/`` (nothing is downloaded).
"""
import os
import warnings

import torch
from torch import nn

from tola_plugin import _compat  # noqa: F401  (before basicsr)
from basicsr.utils.registry import LOSS_REGISTRY

VGG16_FILE = 'vgg16-397923af.pth'  # the name torchvision caches the ImageNet VGG16 weights under


def torchvision_checkpoint_dir() -> str:
    """Folder where torchvision looks for cached weights: ``$TORCH_HOME/hub/checkpoints`` (read at call time)."""
    return os.path.join(torch.hub.get_dir(), 'checkpoints')


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
        if pretrained_backbone:
            path = os.path.join(torchvision_checkpoint_dir(), VGG16_FILE)
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f'LPIPSLoss: the ImageNet VGG16 trunk {VGG16_FILE!r} is not in {torchvision_checkpoint_dir()!r} '
                    f'($TORCH_HOME/hub/checkpoints). Copy torchvision\'s {VGG16_FILE} there (it is never downloaded '
                    'at run time), or set pretrained_backbone: false for tests/demos only.')
        self.loss_weight = loss_weight
        with warnings.catch_warnings():  # lpips 0.1.4 still calls torchvision's deprecated ``pretrained=``
            warnings.filterwarnings('ignore', category=UserWarning, module='torchvision')
            self.lpips = lpips.LPIPS(net=net, pretrained=True, pnet_rand=not pretrained_backbone, verbose=False)
        self.lpips.eval()
        for p in self.lpips.parameters():
            p.requires_grad_(False)

    def train(self, mode=True):
        """The LPIPS network is a fixed metric: it stays in eval mode (its dropout off) while TOLA trains."""
        super().train(mode)
        self.lpips.eval()
        return self

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """pred, target: (B, 3, H, W) RGB in [0, 1] -> scalar."""
        return self.loss_weight * self.lpips(pred, target, normalize=True).mean()
