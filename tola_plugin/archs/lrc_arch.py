"""Latent Residual Correction (LRC): TOLA's small trainable branch that corrects the clean-latent residual.

Paper, "Latent Residual Correction": Δr = g_φ([z_LR, r]) with a 1×1 projection 6→h, n RRDBs
(three five-conv residual dense blocks each, growth g, residual scaling 0.2 at both levels) and a
zero-initialised 1×1 projection h→3, so that at initialisation Δr = 0 and TOLA starts from ẑ0.
The RRDB is BasicSR's own (``basicsr.archs.rrdbnet_arch.RRDB``), not a re-implementation.
"""
import torch
from torch import nn

from basicsr.archs.rrdbnet_arch import RRDB
from basicsr.utils.registry import ARCH_REGISTRY


@ARCH_REGISTRY.register()
class LatentResidualCorrection(nn.Module):
    """Δr = LRC(cat[z_LR, r]).

    Args:
        in_channels: channels of the concatenated input (3 for z_LR + 3 for r = 6).
        out_channels: channels of Δr (3, the latent channels).
        num_feat: hidden width h (paper default 32; small 16).
        num_grow_ch: RDB growth width g (paper default 16; small 8).
        num_block: number of RRDBs n (paper default 1; large 2).

    Parameters: (32,16,1) 180,323 · (16,8,1) 45,235 · (32,16,2) 360,323.
    """

    def __init__(self, in_channels=6, out_channels=3, num_feat=32, num_grow_ch=16, num_block=1):
        super().__init__()
        if num_block < 1:
            raise ValueError(f'LatentResidualCorrection: num_block must be >= 1, got {num_block}')
        self.conv_in = nn.Conv2d(in_channels, num_feat, 1)
        self.body = nn.Sequential(*[RRDB(num_feat, num_grow_ch) for _ in range(num_block)])
        self.conv_out = nn.Conv2d(num_feat, out_channels, 1)
        # Zero output projection: Δr = 0 at init, so ẑ0corr starts exactly at ẑ0 (paper, LRC section).
        nn.init.zeros_(self.conv_out.weight)
        nn.init.zeros_(self.conv_out.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, 6, h, w) = cat[z_LR, r] (latent scale, unbounded) -> Δr (B, 3, h, w)."""
        return self.conv_out(self.body(self.conv_in(x)))
