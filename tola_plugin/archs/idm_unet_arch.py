"""DiffTSR's IDM (image diffusion) U-Net on diffusers' UNet2DConditionModel.

The official IDM is CompVis LDM's ``openaimodel.UNetModel`` with ``resblock_updown=True``: at levels with
cross-attention it down/up-samples with *time-conditioned* ResBlocks (avg-pool / nearest), where diffusers'
``CrossAttn{Down,Up}Block2D`` use plain convs called without ``temb``. No stock diffusers block combines the
two, so those samplers are swapped for ``ResnetBlock2D(down|up=True)`` and the blocks get a forward that
passes ``temb`` to them (docs/backbone.md, "IDM key layout"; equal to the official module: "Parity with the
official code"). The output convolution runs in fp32 under autocast (``FullPrecisionOutputConv2d``).
"""
from typing import Sequence, Union

import torch
from diffusers import UNet2DConditionModel
from diffusers.configuration_utils import register_to_config
from diffusers.models.resnet import ResnetBlock2D
from diffusers.models.unets.unet_2d_blocks import CrossAttnDownBlock2D, CrossAttnUpBlock2D
from torch import nn

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.precision import full_precision


class CrossAttnResnetDownBlock2D(CrossAttnDownBlock2D):
    """``CrossAttnDownBlock2D`` whose downsampler is a ``ResnetBlock2D(down=True)`` that receives ``temb``."""

    def forward(self, hidden_states, temb=None, encoder_hidden_states=None, attention_mask=None,
                cross_attention_kwargs=None, encoder_attention_mask=None, additional_residuals=None):
        output_states = ()
        for i, (resnet, attn) in enumerate(zip(self.resnets, self.attentions)):
            hidden_states = _run_resnet(self, resnet, hidden_states, temb)
            hidden_states = attn(hidden_states, encoder_hidden_states=encoder_hidden_states,
                                 cross_attention_kwargs=cross_attention_kwargs, attention_mask=attention_mask,
                                 encoder_attention_mask=encoder_attention_mask, return_dict=False)[0]
            if i == len(self.resnets) - 1 and additional_residuals is not None:
                hidden_states = hidden_states + additional_residuals
            output_states = output_states + (hidden_states, )
        if self.downsamplers is not None:
            for downsampler in self.downsamplers:
                hidden_states = _run_resnet(self, downsampler, hidden_states, temb)
            output_states = output_states + (hidden_states, )
        return hidden_states, output_states


class CrossAttnResnetUpBlock2D(CrossAttnUpBlock2D):
    """``CrossAttnUpBlock2D`` whose upsampler is a ``ResnetBlock2D(up=True)`` that receives ``temb``.
    (FreeU is not supported.)"""

    def forward(self, hidden_states, res_hidden_states_tuple, temb=None, encoder_hidden_states=None,
                cross_attention_kwargs=None, upsample_size=None, attention_mask=None, encoder_attention_mask=None):
        for resnet, attn in zip(self.resnets, self.attentions):
            hidden_states = torch.cat([hidden_states, res_hidden_states_tuple[-1]], dim=1)
            res_hidden_states_tuple = res_hidden_states_tuple[:-1]
            hidden_states = _run_resnet(self, resnet, hidden_states, temb)
            hidden_states = attn(hidden_states, encoder_hidden_states=encoder_hidden_states,
                                 cross_attention_kwargs=cross_attention_kwargs, attention_mask=attention_mask,
                                 encoder_attention_mask=encoder_attention_mask, return_dict=False)[0]
        if self.upsamplers is not None:
            for upsampler in self.upsamplers:
                hidden_states = _run_resnet(self, upsampler, hidden_states, temb)
        return hidden_states


class FullPrecisionOutputConv2d(nn.Conv2d):
    """The IDM's output convolution, computed in fp32 even under autocast (same parameters and state-dict keys as
    the ``nn.Conv2d`` it replaces): its output ε̂ reaches ẑ0 multiplied by sqrt(1 - ᾱ_t) / sqrt(ᾱ_t), 101.6 at
    t = 999, where a bf16 rounding of ε̂ (2^-8 relative) would be a visible error."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kind = x.device.type
        if torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind):
            with torch.autocast(device_type=kind, enabled=False):
                return super().forward(full_precision(x))
        return super().forward(x)


def _run_resnet(block: nn.Module, resnet: nn.Module, hidden_states: torch.Tensor, temb: torch.Tensor):
    if torch.is_grad_enabled() and getattr(block, 'gradient_checkpointing', False):
        return block._gradient_checkpointing_func(resnet, hidden_states, temb)
    return resnet(hidden_states, temb)


@ARCH_REGISTRY.register()
class DiffTSRIDMUNet(UNet2DConditionModel):
    """DiffTSR's IDM: eps-prediction U-Net, 874,024,003 parameters at the defaults (the official config).

    Args (defaults = official ``IDM_Unet_config``):
        in_channels: 6 = cat[z_t (3), z_LR (3)], z_t first.
        out_channels: 3 (eps).
        block_out_channels: channels per level (LDM model_channels 320 x channel_mult (1, 2, 3, 4)).
        layers_per_block: ResBlocks per level (LDM num_res_blocks).
        attention_levels: which levels carry a SpatialTransformer after each ResBlock (LDM
            attention_resolutions [8, 4, 2] = levels 1, 2, 3). The mid block always has one.
        attention_heads: heads of every SpatialTransformer (LDM num_heads with legacy=False).
        cross_attention_dim: width of C_cond (160).
        transformer_layers_per_block: LDM transformer_depth.
        norm_num_groups, norm_eps: GroupNorm(32, eps 1e-5) as in LDM ResBlocks.
    """

    @register_to_config
    def __init__(self, in_channels: int = 6, out_channels: int = 3,
                 block_out_channels: Sequence[int] = (320, 640, 960, 1280), layers_per_block: int = 2,
                 attention_levels: Sequence[bool] = (False, True, True, True), attention_heads: int = 8,
                 cross_attention_dim: int = 160, transformer_layers_per_block: int = 1, norm_num_groups: int = 32,
                 norm_eps: float = 1e-5):
        block_out_channels, attention_levels = tuple(block_out_channels), tuple(bool(a) for a in attention_levels)
        if len(attention_levels) != len(block_out_channels):
            raise ValueError(f'DiffTSRIDMUNet: attention_levels {attention_levels} needs one entry per level of '
                             f'block_out_channels {block_out_channels}')
        down = tuple('CrossAttnDownBlock2D' if a else 'ResnetDownsampleBlock2D' for a in attention_levels)
        up = tuple('CrossAttnUpBlock2D' if a else 'ResnetUpsampleBlock2D' for a in reversed(attention_levels))
        super().__init__(
            in_channels=in_channels,
            out_channels=out_channels,
            down_block_types=down,
            up_block_types=up,
            mid_block_type='UNetMidBlock2DCrossAttn',
            block_out_channels=block_out_channels,
            layers_per_block=layers_per_block,
            attention_head_dim=attention_heads,  # diffusers' legacy name = heads
            cross_attention_dim=cross_attention_dim,
            transformer_layers_per_block=transformer_layers_per_block,
            norm_num_groups=norm_num_groups,
            norm_eps=norm_eps,
            flip_sin_to_cos=True,
            freq_shift=0,
            act_fn='silu',
            use_linear_projection=False)  # LDM's proj_in/proj_out are 1x1 convs
        temb_channels = block_out_channels[0] * 4
        for block in self.down_blocks:
            if isinstance(block, CrossAttnDownBlock2D) and block.downsamplers is not None:
                block.downsamplers = nn.ModuleList(
                    [self._resnet_sampler(block.downsamplers[0].channels, temb_channels, down=True)])
                block.__class__ = CrossAttnResnetDownBlock2D  # same modules, forward that passes temb
        for block in self.up_blocks:
            if isinstance(block, CrossAttnUpBlock2D) and block.upsamplers is not None:
                block.upsamplers = nn.ModuleList(
                    [self._resnet_sampler(block.upsamplers[0].channels, temb_channels, up=True)])
                block.__class__ = CrossAttnResnetUpBlock2D
        self.conv_out.__class__ = FullPrecisionOutputConv2d  # ε̂ in fp32 under autocast (TOLA's t = 999)

    def _resnet_sampler(self, channels: int, temb_channels: int, up: bool = False, down: bool = False):
        return ResnetBlock2D(in_channels=channels, out_channels=channels, temb_channels=temb_channels,
                             eps=self.config.norm_eps, groups=self.config.norm_num_groups, up=up, down=down)

    def forward(self, sample: torch.Tensor, timestep: Union[torch.Tensor, int], encoder_hidden_states: torch.Tensor,
                **kwargs) -> torch.Tensor:
        """sample (B,6,h,w) = cat[z_t (x0.18215 space), z_LR unscaled]; timestep (B,) or int in [0, 999];
        encoder_hidden_states C_cond (B,24,160) -> eps (B,3,h,w). h, w divisible by 2**(levels-1)."""
        kwargs['return_dict'] = False
        return super().forward(sample, timestep, encoder_hidden_states, **kwargs)[0]
