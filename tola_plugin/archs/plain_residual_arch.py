"""Parameter-matched plain correction branch: the paper's control for the LRC (Table 4, "Plain residual
correction"; supplementary "Latent Residual Correction").

6→30 1×1 projection, 11 two-convolution 3×3 residual blocks (LeakyReLU 0.2, residual scaling 0.2),
a 30→30 1×1 mixing layer and a zero-initialised 30→3 1×1 projection: 180,093 parameters, against the
LRC's 180,323. The paper does not give the kernel sizes; 1×1 projections/mixing and 3×3 block convs are
the only choice that reproduces 180,093 exactly.
"""
import torch
from torch import nn

from basicsr.utils.registry import ARCH_REGISTRY


class _PlainResidualBlock(nn.Module):
    """x + 0.2 · conv(lrelu(conv(x))): two 3×3 convs, no dense connections (the difference from an RDB)."""

    def __init__(self, num_feat):
        super().__init__()
        self.conv1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(0.2)

    def forward(self, x):
        return x + 0.2 * self.conv2(self.lrelu(self.conv1(x)))


@ARCH_REGISTRY.register()
class PlainResidualCorrection(nn.Module):
    """Δr = plain(cat[z_LR, r]); same interface as ``LatentResidualCorrection``.

    Args:
        in_channels: 6; out_channels: 3; num_feat: 30; num_block: 11 (paper's parameter-matched setting).
    """

    def __init__(self, in_channels=6, out_channels=3, num_feat=30, num_block=11):
        super().__init__()
        self.conv_in = nn.Conv2d(in_channels, num_feat, 1)
        self.body = nn.Sequential(*[_PlainResidualBlock(num_feat) for _ in range(num_block)])
        self.conv_mix = nn.Conv2d(num_feat, num_feat, 1)
        self.conv_out = nn.Conv2d(num_feat, out_channels, 1)
        nn.init.zeros_(self.conv_out.weight)  # Δr = 0 at init, like the LRC
        nn.init.zeros_(self.conv_out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, 6, h, w) = cat[z_LR, r] -> Δr (B, 3, h, w)."""
        return self.conv_out(self.conv_mix(self.body(self.conv_in(x))))
