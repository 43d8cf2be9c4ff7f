"""An exact t = 999 path written into a demo IDM's weights: its one-step ẑ0 starts at s·z_LR, and training learns only
the correction (docs/demo_backbone.md, "The one-step path").

TOLA reads the IDM once, at t = 999, where ẑ0 = (z_t − √(1−ᾱ) ε̂)/√ᾱ multiplies ε̂'s error by 101.6: a small U-Net
trained for CPU hours predicts ε to 2-5 %, so its ẑ0 is amplified noise, further from z_HR than z_LR is. DiffTSR's IDM
reaches the needed 0.3 % with GPU-days of training; the demo's gets it by construction: the weights carry
ε̂ = u = (z_t − √ᾱ·s·z_LR)/√(1−ᾱ) (so ẑ0 = s·z_LR) along linear maps through the network (conv_in → the skip into the
last up ResBlock → its 1×1 shortcut → the output GroupNorm → SiLU → conv_out), and the rest of the U-Net adds a learnt
correction. Same classes, keys and shapes as DiffTSR's IDM; only the t = 999 step is meaningful.

How the output GroupNorm passes u: one group of four channels (u, −u, +K, −K) has mean 0 and variance (q + K²)/2
whatever u's spatial mean (q = mean u², about 1), so γ = K/√2 returns u·(1 − q/2K²): 5e-5 relative at K = 100 (a group
of two channels cannot: its statistics move with u's mean, an error of that mean, ~0.016, times 101.6). conv_out reads
SiLU(u) − SiLU(−u) = u·(σ(u) + σ(−u)) = u, exactly, with no offset for a low precision to round.
"""
from typing import List, Tuple

import torch

from tola_plugin.archs.diffusion_schedule import make_ldm_scheduler
from tola_plugin.archs.vae_arch import LATENT_SCALE

K = 100.0  # the constant pair's magnitude: the group's variance is K²/2 to 5e-5
FEATURE_GAIN = 0.01  # the other channels enter conv_out scaled: their correction reaches ẑ0 times 101.6
T = 999
LATENT = 3


def _coefficients(scale: float = LATENT_SCALE) -> Tuple[float, float]:
    """(a, b) with u = a·z_t − b·z_LR, in float64 from the DDPM schedule's ᾱ at t = 999."""
    alpha_bar = make_ldm_scheduler('ddpm').alphas_cumprod[T].double()
    s0, s1 = float(alpha_bar.sqrt()), float((1 - alpha_bar).sqrt())
    return 1.0 / s1, s0 * scale / s1


def _check(idm) -> None:
    channels, groups = idm.conv_norm_out.num_channels, idm.conv_norm_out.num_groups
    if channels // groups != 4 or channels < 4 * LATENT:
        raise ValueError(
            f'one_step_path needs the IDM\'s output GroupNorm in groups of 4 channels (3 groups at least): '
            f'block_out_channels[0] = 4 × norm_num_groups, got {channels} channels in {groups} groups')
    if idm.conv_in.in_channels != 2 * LATENT or idm.conv_out.out_channels != LATENT:
        raise ValueError(f'one_step_path needs in_channels 6 and out_channels 3, got {idm.conv_in.in_channels} '
                         f'and {idm.conv_out.out_channels}')


def _targets(idm) -> List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(parameter, mask, values) for every parameter the path fixes: where ``mask`` is True the weight is ``values``;
    all other entries are the network's own."""
    a, b = _coefficients()
    last = idm.up_blocks[-1].resnets[-1]
    shortcut, conv2, norm, out = last.conv_shortcut, last.conv2, idm.conv_norm_out, idm.conv_out
    skip = shortcut.in_channels - idm.conv_in.out_channels  # the skip (conv_in's output) follows the hidden channels
    targets = {
        id(p): (p, torch.zeros_like(p, dtype=torch.bool), torch.zeros_like(p))
        for p in (idm.conv_in.weight, idm.conv_in.bias, shortcut.weight, shortcut.bias, conv2.weight, conv2.bias,
                  norm.weight, norm.bias, out.weight, out.bias)
    }

    def fix(p, index, value=0.0):
        _, mask, values = targets[id(p)]
        mask[index] = True
        values[index] = value

    for k in range(LATENT):
        fix(idm.conv_in.weight, k)  # conv_in channel k = u_k: the centre taps, the rest of the filter zero
        fix(idm.conv_in.weight, (k, k, 1, 1), a)
        fix(idm.conv_in.weight, (k, LATENT + k, 1, 1), -b)
        fix(idm.conv_in.bias, k)
        fix(out.bias, k)
        for o, sign, offset in zip(range(4 * k, 4 * k + 4), (1.0, -1.0, 0.0, 0.0), (0.0, 0.0, K, -K)):  # u, −u, +K, −K
            fix(shortcut.weight, o)
            fix(shortcut.weight, (o, skip + k, 0, 0), sign)
            fix(shortcut.bias, o, offset)
            fix(conv2.weight, o)  # the ResBlock's own branch adds nothing to these channels
            fix(conv2.bias, o)
            fix(norm.weight, o, K / 2**0.5 if sign else 0.0)
            fix(norm.bias, o)
            fix(out.weight, (slice(None), o))  # ε̂ reads these channels through the fixed taps only
            fix(out.weight, (k, o, 1, 1), sign)  # SiLU(u) − SiLU(−u) = u
    return list(targets.values())


def is_grafted(idm) -> bool:
    """Whether every weight of the path holds its value, to float16's rounding (a stage file packed for a GPU)."""
    return all(torch.allclose(p[mask], values[mask], rtol=1e-3, atol=1e-6) for p, mask, values in _targets(idm))


class FixedPath:
    """Keeps the path's weights at their values during training: ``restore()`` after every optimizer step."""

    def __init__(self, idm):
        self.targets = _targets(idm)

    @torch.no_grad()
    def restore(self) -> None:
        for p, mask, values in self.targets:
            p.copy_(torch.where(mask, values, p))


@torch.no_grad()
def graft(idm) -> bool:
    """Write the path into ``idm`` (a DiffTSRIDMUNet whose output GroupNorm has groups of 4 channels): conv_out's other
    weights zeroed and the other channels' GroupNorm affine scaled by FEATURE_GAIN, so ẑ0 = s·z_LR. An IDM that holds
    the path already (a resumed stage) is left as it is. -> whether it wrote."""
    _check(idm)
    if is_grafted(idm):
        return False
    idm.conv_out.weight.zero_()
    idm.conv_norm_out.weight.mul_(FEATURE_GAIN)
    idm.conv_norm_out.bias.mul_(FEATURE_GAIN)
    FixedPath(idm).restore()
    return True
