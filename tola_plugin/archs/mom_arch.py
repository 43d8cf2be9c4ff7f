"""DiffTSR's MoM (mixture of multi-modality module): token embedder, small U-Net, 4-layer text encoder.

Only ``C_cond = text_encoder(c_t)`` feeds the IDM (cross-attention context). ``I_cond`` (the small U-Net's
output) only feeds the TDM, which DiffTSR's default route never runs; it is kept for strict loading and
completeness. The text encoder is LDM's ``BERTEmbedder`` (x-transformers ``TransformerWrapper``, pre-LN
encoder) rebuilt from diffusers' ``BasicTransformerBlock`` (LayerNorm -> self-attention (no q/k/v bias) ->
LayerNorm -> GELU feed-forward), which computes the same function.
"""
from typing import Optional, Sequence, Tuple

import torch
from diffusers import UNet2DConditionModel
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.attention import BasicTransformerBlock
from diffusers.models.modeling_utils import ModelMixin
from torch import nn

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.vae_arch import LATENT_SCALE


class DiffTSRTextEncoder(nn.Module):
    """IDM-alphabet tokens (B,L) -> C_cond (B,L,dim): token embedding (x per-token weight) + learned position
    embedding, ``depth`` pre-LN blocks, final LayerNorm. ``to_logits`` is in the official checkpoint but unused
    (DiffTSR calls it with return_embeddings=True); it is kept so loading stays strict and counts match."""

    def __init__(self, num_classes: int = 6736, dim: int = 160, depth: int = 4, heads: int = 8, head_dim: int = 64,
                 ff_mult: int = 4, max_seq_len: int = 24):
        super().__init__()
        self.token_emb = nn.Embedding(num_classes, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.blocks = nn.ModuleList([
            BasicTransformerBlock(dim, heads, head_dim, cross_attention_dim=None, activation_fn='gelu',
                                  attention_bias=False, norm_type='layer_norm', norm_eps=1e-5,
                                  ff_inner_dim=dim * ff_mult) for _ in range(depth)
        ])
        self.norm = nn.LayerNorm(dim)
        self.to_logits = nn.Linear(dim, num_classes)

    def forward(self, tokens: torch.Tensor, token_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        """tokens (B,L) long in [0, num_classes); token_weights (B,L) float or None (= all ones) scales each
        token embedding *before* the position embedding is added (TOLA's confidence weighting)."""
        if tokens.dim() != 2 or tokens.shape[1] > self.pos_emb.num_embeddings:
            raise ValueError(f'text encoder expects tokens (B, L<={self.pos_emb.num_embeddings}), '
                             f'got {tuple(tokens.shape)}')
        x = self.token_emb(tokens)
        if token_weights is not None:
            if token_weights.shape != tokens.shape:
                raise ValueError(f'token_weights must have the tokens\' shape {tuple(tokens.shape)}, '
                                 f'got {tuple(token_weights.shape)}')
            x = x * token_weights.unsqueeze(-1).to(x.dtype)
        x = x + self.pos_emb(torch.arange(tokens.shape[1], device=tokens.device))[None]
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


@ARCH_REGISTRY.register()
class DiffTSRMoM(ModelMixin, ConfigMixin):
    """MoM, 6,226,675 parameters at the defaults (token embedder 862,208 + U-Net 1,061,731 + text encoder
    4,302,736).

    Args (defaults = official ``MoM_module_config``):
        num_classes: IDM alphabet size incl. pad (6736).
        context_dim: token embedder width = the small U-Net's cross-attention width (128).
        unet_block_out_channels, unet_layers_per_block, unet_heads: the small U-Net (LDM model_channels 32,
            channel_mult (1, 2), num_res_blocks 2, num_heads 4; attention only in its mid block).
        latent_channels: z channels (3); the U-Net sees cat(z_LR, z_t), i.e. 2x.
        text_dim, text_depth, text_heads, text_head_dim, max_seq_len: the text encoder (160, 4, 8, 64, 24).
        scale_factor: MoM multiplies cat(z_LR, z_t) by it (0.18215).
    """

    @register_to_config
    def __init__(self, num_classes: int = 6736, context_dim: int = 128,
                 unet_block_out_channels: Sequence[int] = (32, 64), unet_layers_per_block: int = 2, unet_heads: int = 4,
                 unet_norm_num_groups: int = 32, latent_channels: int = 3, text_dim: int = 160, text_depth: int = 4,
                 text_heads: int = 8, text_head_dim: int = 64, max_seq_len: int = 24,
                 scale_factor: float = LATENT_SCALE):
        super().__init__()
        n = len(unet_block_out_channels)
        self.token_embedder = nn.Embedding(num_classes, context_dim)
        # LDM UNetModel with resblock_updown and no level attention == stock diffusers blocks (docs/backbone.md, "MoM").
        self.unet = UNet2DConditionModel(
            in_channels=2 * latent_channels, out_channels=latent_channels,
            down_block_types=('ResnetDownsampleBlock2D', ) * n, up_block_types=('ResnetUpsampleBlock2D', ) * n,
            mid_block_type='UNetMidBlock2DCrossAttn', block_out_channels=tuple(unet_block_out_channels),
            layers_per_block=unet_layers_per_block, attention_head_dim=unet_heads, cross_attention_dim=context_dim,
            norm_num_groups=unet_norm_num_groups, norm_eps=1e-5, flip_sin_to_cos=True, freq_shift=0, act_fn='silu',
            use_linear_projection=False)
        self.text_encoder = DiffTSRTextEncoder(num_classes, text_dim, text_depth, text_heads, text_head_dim,
                                               max_seq_len=max_seq_len)

    #: state-dict prefixes of the image branch (token embedder + small U-Net), which only feeds the TDM
    IMAGE_BRANCH = ('token_embedder.', 'unet.')

    def drop_image_branch(self) -> None:
        """Remove the token embedder and the small U-Net (1,923,939 parameters at the defaults): their ``I_cond``
        only feeds the TDM, so a one-step restorer never runs them. Afterwards ``encode_text`` works, ``forward``
        raises, and the state dict has no ``IMAGE_BRANCH`` keys."""
        self.token_embedder = None
        self.unet = None

    def encode_text(self, c_t: torch.Tensor, token_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        """c_t (B,24) IDM-alphabet ids (pad 6735) -> C_cond (B,24,160), the IDM's cross-attention context."""
        return self.text_encoder(c_t, token_weights)

    def forward(self, c_t: torch.Tensor, z_lr: torch.Tensor, z_t: torch.Tensor, t: torch.Tensor,
                token_weights: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """c_t (B,24) long; z_lr (B,3,h,w) unscaled posterior; z_t (B,3,h,w) diffusion variable; t (B,) or int.
        Returns (I_cond (B,3,h,w), C_cond (B,24,160)). Note the order cat(z_LR, z_t), the reverse of the IDM's."""
        if self.unet is None:
            raise RuntimeError('DiffTSRMoM: the image branch was dropped (drop_image_branch); only encode_text runs')
        z_in = torch.cat((z_lr, z_t), dim=1) * self.config.scale_factor
        i_cond = self.unet(z_in, t, encoder_hidden_states=self.token_embedder(c_t), return_dict=False)[0]
        return i_cond, self.encode_text(c_t, token_weights)
