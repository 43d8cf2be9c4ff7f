"""DiffTSR's first-stage VAE: LDM kl-f4 with 3 latent channels, as diffusers' AutoencoderKL.

Images are RGB in [0, 1] (not [-1, 1]): DiffTSR fine-tuned the VAE on [0, 1] data. A (B,3,128,512) image
maps to a (B,3,32,128) latent. Use diffusers' API: ``encode(x).latent_dist.sample(generator)`` / ``.mode()``
(logvar clamped to [-30, 20] as in LDM) and ``decode(z).sample``.

Latent scaling: the IDM's diffusion variable lives in ``LATENT_SCALE``-scaled space (decode ``z / 0.18215``);
the z_LR condition fed to IDM and MoM is the *unscaled* posterior.
"""
from typing import Sequence

from diffusers import AutoencoderKL
from diffusers.configuration_utils import register_to_config

from basicsr.utils.registry import ARCH_REGISTRY

#: DiffTSR's scale_factor between the VAE latent and the IDM's diffusion variable.
LATENT_SCALE = 0.18215
# z_LR from the encoder's posterior: its mode (= mean, deterministic) or a sample (the official DiffTSR inference);
# one name per choice in TOLANet and DiffTSRNet (option ``latent``)
LATENT_MODES = ('mode', 'sample')


@ARCH_REGISTRY.register()
class DiffTSRVAE(AutoencoderKL):
    """kl-f4 AutoencoderKL, 55,312,063 parameters at the defaults (encoder 22,351,238, decoder 32,960,771).

    Args (defaults = official ``VAE_model_config``): in/out_channels 3; block_out_channels = LDM ch 128 x
    ch_mult (1, 2, 4); layers_per_block = num_res_blocks 2; latent_channels = z_channels = embed_dim 3;
    norm_num_groups 32. One mid-block self-attention in encoder and decoder (LDM attn_resolutions []);
    ``mid_block_attention: false`` leaves both out (the small demo backbone: at 32x128 latents the two
    4096-token attentions cost about 40 % of a small VAE's CPU time).
    """

    @register_to_config
    def __init__(self, in_channels: int = 3, out_channels: int = 3, block_out_channels: Sequence[int] = (128, 256, 512),
                 layers_per_block: int = 2, latent_channels: int = 3, norm_num_groups: int = 32,
                 mid_block_attention: bool = True):
        n = len(block_out_channels)
        super().__init__(in_channels=in_channels, out_channels=out_channels,
                         down_block_types=('DownEncoderBlock2D', ) * n, up_block_types=('UpDecoderBlock2D', ) * n,
                         block_out_channels=tuple(block_out_channels), layers_per_block=layers_per_block, act_fn='silu',
                         latent_channels=latent_channels, norm_num_groups=norm_num_groups, sample_size=512,
                         scaling_factor=LATENT_SCALE, force_upcast=False,
                         mid_block_add_attention=bool(mid_block_attention))
