"""TOLANet: TOLA's one-step DiffTSR restorer (paper Algorithm 1) with peft LoRA and latent residual correction.

One forward = Algorithm 1, top to bottom: frozen TransOCR -> IDM tokens + confidences; VAE encoder (LoRA)
-> z_LR; q-sample at the fixed t; MoM text encoder once; IDM (LoRA) once; ẑ0; LRC; frozen VAE decoder.
No TDM, no MoM U-Net (its I_cond only feeds the TDM), no reverse loop.

Every paper variant/control is a constructor switch (see docs/tola.md for the table of option files).
"""
import contextlib
import inspect
import zlib
from typing import Dict, List, Optional, Sequence

import torch
from diffusers.utils.torch_utils import randn_tensor
from peft import PeftModel
from torch import nn

from basicsr.archs import build_network
from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.backbone_builder import BACKBONE_INITS, build_backbone
from tola_plugin.archs.diffusion_schedule import schedule_constants
from tola_plugin.archs.lora import (IDM_LORA_TARGETS, VAE_ENCODER_LORA_TARGETS, add_lora, check_lora_settings,
                                    count_lora_parameters, load_lora_state_dict, lora_settings, lora_state_dict,
                                    merge_lora)
from tola_plugin.archs.mom_arch import DiffTSRMoM
from tola_plugin.archs.precision import PRECISIONS, autocast, decoder_autocast, full_precision, resolve_precision
from tola_plugin.archs.vae_arch import LATENT_MODES, LATENT_SCALE
from tola_plugin.text.alphabets import IDM_MAX_LEN, IDM_PAD, decode_idm
from tola_plugin.text.text_prior import DIFFTSR_MAX_TOKENS, difftsr_prediction_text, transocr_to_idm

TEXT_PRIORS = ('predicted', 'gt', 'null', 'none')
CONFIDENCES = ('predicted', 'uniform')
CONTEXT_ROUTES = ('mom', 'direct')
NOISE_MODES = ('gaussian', 'zero')
TEXT_DECODINGS = ('incremental', 'full_prefix')
CHECKPOINTABLE = ('idm', 'vae_encoder', 'vae_decoder')  # gradient checkpointing: parts with large activations
TEXT_STEPS = 24  # greedy TransOCR steps, as DiffTSR's Text_Prediction (the 'full_prefix' reference route)
POSTERIOR_SEED_OFFSET = 0x9E3779B9  # per-image seed of the posterior sample = ε's seed + this


def image_noise_seed(name: str, base_seed: int = 0) -> int:
    """Per-image noise seed from a file name: the same image gets the same ε in every run and variant
    (the paper's paired comparisons use identical per-image noise)."""
    return (zlib.crc32(name.encode('utf-8')) + 1_000_003 * int(base_seed)) % (2**63)


@ARCH_REGISTRY.register()
class TOLANet(nn.Module):
    """One-step text-aware DiffTSR restorer. lq (B, 3, H, W) RGB in [0, 1] -> restored (B, 3, H, W) in [0, 1].

    Backbone:
        backbone_init: 'checkpoint' (default; the official ``DiffTSR.ckpt`` / ``transocr.pth``, strict),
            'demo' (the small backbone trained here and shipped in ``tola_plugin/demo/backbone``, strict; the
            checkpoint paths are not used), 'random' (tests only: modules built from ``*_config`` with random
            weights drawn from ``random_seed``) or 'empty' (modules built from ``*_config``, weights not drawn: every
            weight is loaded next, as when a merged file is rebuilt).
        difftsr_checkpoint, transocr_checkpoint: file paths (official layout or the converted safetensors).
        idm_config, vae_config, mom_config, transocr_config: constructor overrides of the backbone modules
            (architecture); with 'checkpoint' they must match the file (strict loading).
        random_seed: seed of the 'random' backbone (0), drawn from its own RNG stream so that training and
            testing rebuild the very same random backbone whatever the global RNG state.
    Algorithm 1 switches (paper default first):
        timestep: fixed zero-indexed q-sample / IDM timestep t (999; 899 and 949 are trained in Tables S8/S9 and
            used at inference in Table S11).
        latent: 'mode' (posterior mean of the VAE encoder) or 'sample' (the official DiffTSR inference).
        noise: 'gaussian' (one ε ~ N(0, I) per input) or 'zero' (the ε = 0 control, Table S11).
        text_prior: 'predicted' (TransOCR on the LR input), 'gt' (oracle: ground-truth tokens),
            'null' (empty text: all pads, MoM retained) or 'none' (No MoM: the TransOCR-MoM branch is removed
            and the IDM gets an all-zero context).
        confidence: 'predicted' (token embeddings × aligned TransOCR confidences) or 'uniform' (no weighting,
            exactly DiffTSR's conditioning).
        context_route: 'mom' (the MoM text encoder) or 'direct' (Direct tokens: confidence-scaled token
            embeddings of the MoM text encoder used as context, without its position embedding and layers).
    Adaptation:
        lora_rank, lora_alpha: peft LoRA rank r (4) and alpha (None = r).
        idm_lora, vae_lora: insert LoRA into the IDM transformer blocks / the VAE encoder + quant_conv.
        vae_lora_active: False disables the VAE-encoder LoRA at inference (the "VAE LoRA off" control).
        lrc: BasicSR network option dict of the correction branch ({type: LatentResidualCorrection, ...},
            {type: PlainResidualCorrection}) or None (no correction: ẑ0corr = ẑ0).
        clamp_output: clamp the decoded image to [0, 1] (True; the output image range).
    Training memory:
        gradient_checkpointing: parts whose activations are recomputed in the backward pass instead of kept, any
            subset of ('idm', 'vae_encoder', 'vae_decoder'); none by default (the paper). Same gradients, less
            memory, about one more forward of those parts (tools/estimate_memory.py, docs/training_gpus.md).
    Inference:
        precision: 'fp32' (default), 'bf16', 'fp16' or 'auto': the compute dtype of the VAE, MoM, IDM and LRC
            (autocast; the output stays fp32; the TransOCR text prior always runs in fp32). 'auto' = bf16 on CUDA
            and on CPUs with AMX, fp32 on other CPUs (see ``archs/precision.py``).
        text_decoding: how the greedy TransOCR prior is decoded, the same function either way (docs/inference.md):
            'incremental' (default: cached keys/values, only the 23 steps the prior reads, stopping once every
            image has emitted END) or 'full_prefix' (DiffTSR's loop: the whole prefix re-run for 24 steps; the
            reference route of tools/benchmark_inference.py).
    """

    def __init__(self, backbone_init='checkpoint', difftsr_checkpoint='checkpoints/DiffTSR.ckpt',
                 transocr_checkpoint='checkpoints/transocr.pth', idm_config=None, vae_config=None, mom_config=None,
                 transocr_config=None, timestep=999, latent='mode', noise='gaussian', text_prior='predicted',
                 confidence='predicted', context_route='mom', lora_rank=4, lora_alpha=None, idm_lora=True,
                 vae_lora=True, vae_lora_active=True, lrc=None, clamp_output=True, random_seed=0, precision='fp32',
                 text_decoding='incremental', gradient_checkpointing=None):
        options = {k: v for k, v in locals().items() if k not in ('self', '__class__')}
        super().__init__()
        for name, value, allowed in (('backbone_init', backbone_init,
                                      BACKBONE_INITS), ('latent', latent, LATENT_MODES), ('noise', noise, NOISE_MODES),
                                     ('text_prior', text_prior, TEXT_PRIORS), ('confidence', confidence, CONFIDENCES),
                                     ('context_route', context_route, CONTEXT_ROUTES), ('text_decoding', text_decoding,
                                                                                        TEXT_DECODINGS)):
            if value not in allowed:
                raise ValueError(f'TOLANet: {name} must be one of {allowed}, got {value!r}')
        if context_route == 'direct' and text_prior == 'none':
            raise ValueError("TOLANet: context_route 'direct' needs a text prior (text_prior 'none' removes it)")
        check_lora_settings(lora_rank, lora_alpha, idm_lora, vae_lora, vae_lora_active)
        self.options = options  # constructor arguments, for the merged export
        self.set_timestep(timestep)
        self.set_precision(precision)
        self.latent, self.noise, self.text_prior = latent, noise, text_prior
        self.confidence, self.context_route, self.clamp_output = confidence, context_route, bool(clamp_output)
        self.text_decoding = text_decoding
        self.inference_only = False  # set by prepare_for_inference

        # Frozen backbone (official weights, strict), then LoRA on top (peft freezes every base weight).
        idm, vae, mom, transocr = build_backbone(backbone_init, difftsr_checkpoint, transocr_checkpoint, idm_config,
                                                 vae_config, mom_config, transocr_config, random_seed)
        for module in (idm, vae, mom, transocr):
            module.requires_grad_(False)
        self.context_dim = idm.config.cross_attention_dim
        self.vae_lora_active = bool(vae_lora_active)
        self.idm = add_lora(idm, IDM_LORA_TARGETS, lora_rank, lora_alpha) if idm_lora else idm
        self.vae = add_lora(vae, VAE_ENCODER_LORA_TARGETS, lora_rank, lora_alpha) if vae_lora else vae
        if vae_lora and not vae_lora_active:
            self.vae.base_model.disable_adapter_layers()
        self.mom = mom
        self.transocr = transocr  # also the OCR-loss recognizer (TOLAModel shares it; one copy in memory)
        self.lrc = build_network(dict(lrc)) if lrc else None
        self.set_gradient_checkpointing(gradient_checkpointing or ())
        self.train(True)

    # ----------------------------------------------------------------------------------- construction
    def set_timestep(self, timestep: int) -> None:
        """Fix the q-sample / IDM timestep t and its schedule constants (an inference switch, e.g. Table S11)."""
        self.timestep = int(timestep)
        self.sqrt_alpha_bar, self.sqrt_one_minus_alpha_bar = schedule_constants(self.timestep)

    def set_precision(self, precision: str) -> None:
        """Compute precision of the forward: 'fp32', 'bf16', 'fp16' or 'auto' (resolved per input device)."""
        if precision not in PRECISIONS:
            raise ValueError(f'TOLANet: precision must be one of {PRECISIONS}, got {precision!r}')
        self.precision = precision

    def set_gradient_checkpointing(self, parts: Sequence[str], checkpoint_fn=None) -> None:
        """Recompute the activations of ``parts`` (a subset of ``CHECKPOINTABLE``) in the backward pass instead of
        keeping them; the others keep theirs. Uses the diffusers blocks' own checkpointing (each ResNet/attention
        block of the IDM, each down/mid/up block of the VAE), switched per part (diffusers switches a whole model).
        ``checkpoint_fn(module, *args)``: the recomputation function (default: non-reentrant
        ``torch.utils.checkpoint``, as diffusers); with autograd off (validation, inference) nothing changes."""
        if isinstance(parts, str) or any(p not in CHECKPOINTABLE for p in parts) or len(set(parts)) != len(parts):
            raise ValueError(f'TOLANet: gradient_checkpointing must be a list of distinct parts of {CHECKPOINTABLE}, '
                             f'got {parts!r}')
        if checkpoint_fn is None:

            def checkpoint_fn(module, *args):
                return torch.utils.checkpoint.checkpoint(module.__call__, *args, use_reentrant=False)

        vae = self.vae.get_base_model() if isinstance(self.vae, PeftModel) else self.vae
        idm = self.idm.get_base_model() if isinstance(self.idm, PeftModel) else self.idm
        for name, module in (('idm', idm), ('vae_encoder', vae.encoder), ('vae_decoder', vae.decoder)):
            for block in module.modules():
                if hasattr(block, 'gradient_checkpointing'):
                    block.gradient_checkpointing = name in parts
                    block._gradient_checkpointing_func = checkpoint_fn
        self.checkpointed_parts = tuple(p for p in CHECKPOINTABLE if p in parts)

    def train(self, mode: bool = True):
        """Only the correction branch follows ``mode``: every frozen module (TransOCR's BatchNorm and dropout
        in particular) stays in eval mode, so training changes nothing but LoRA and LRC."""
        if mode and self.inference_only:
            raise RuntimeError('TOLANet: this network was prepared for inference (LoRA merged, MoM image branch '
                               'dropped) and cannot be trained; build a new TOLANet to train')
        super().train(False)
        if self.lrc is not None:
            self.lrc.train(mode)
        self.training = mode
        return self

    # --------------------------------------------------------------------------------------- forward
    def forward(self, lq: torch.Tensor, gt_tokens: Optional[torch.Tensor] = None,
                noise_seeds: Optional[Sequence[int]] = None, return_intermediates: bool = False):
        """Algorithm 1.

        Args:
            lq: (B, 3, H, W) RGB LR image in [0, 1] (H, W multiples of 4; 128×512 in the paper).
            gt_tokens: (B, 24) IDM indices of the ground truth; used only with text_prior 'gt'.
            noise_seeds: B ints; image i draws its ε from ``torch.Generator().manual_seed(seeds[i])`` (CPU,
                so the draw is device-independent). None: the global RNG.
            return_intermediates: also return the latents and the text prior (dict).
        Returns:
            restored (B, 3, H, W) in [0, 1] (unclamped if clamp_output is False), or a dict with 'image',
            'z_lr', 'z_t', 'eps', 'eps_hat', 'z0', 'r', 'delta_r', 'z0_corr' (unscaled latent space as in the
            paper), 'tokens' (B, 24), 'confidences' (B, 24) (None when unweighted), 'prior_texts' (B strings: the
            text the tokens encode; None without a text branch).
        """
        dtype = resolve_precision(self.precision, lq.device)
        # inference-only networks run without autograd bookkeeping
        with torch.inference_mode() if self.inference_only else contextlib.nullcontext():
            # 1-2. Text prior: frozen TransOCR -> tokens + confidences, normalised and mapped to IDM indices. Always
            # fp32: its ids are discrete choices that low precision could flip on near-ties, and its decoding steps
            # are weight-bound matrix-vector products that casting the weights would only slow down.
            tokens, confidences, prior_texts = self.predict_text_prior(lq, gt_tokens)
            with autocast(dtype, lq.device):  # the precision switch (a no-op for fp32)
                # 1. LoRA-adapted VAE encoder -> unscaled z_LR (3, H/4, W/4). Algorithm 1's own arithmetic (z_t, ẑ0,
                # the residuals) stays in fp32 under autocast: ẑ0 carries ε̂'s error times 101.6 at t = 999.
                posterior = self.vae.encode(lq).latent_dist
                z_lr = posterior.mode() if self.latent == 'mode' else self.sample_posterior(posterior, noise_seeds)
                z_lr = full_precision(z_lr)
                # 3. q-sample at the fixed t with one ε per input.
                eps = self.draw_noise(z_lr, noise_seeds)
                z_t = self.sqrt_alpha_bar * z_lr + self.sqrt_one_minus_alpha_bar * eps
                # 4. MoM once: C_cond from confidence-scaled token embeddings (I_cond feeds only the TDM: skipped).
                context = self.text_context(tokens, confidences, batch=lq.shape[0], like=z_lr)
                # 5. LoRA-adapted IDM once on [z_t, z_LR] (z_t first, both unscaled, as DiffTSR); its output
                # convolution computes ε̂ in fp32 (idm_unet_arch.FullPrecisionOutputConv2d).
                t = torch.full((lq.shape[0], ), self.timestep, dtype=torch.long, device=lq.device)
                eps_hat = full_precision(self.idm(torch.cat([z_t, z_lr], 1), t, context))
                # 6. ε-prediction -> clean latent; no reverse update follows.
                z0 = (z_t - self.sqrt_one_minus_alpha_bar * eps_hat) / self.sqrt_alpha_bar
                # 7. Latent residual correction of r = z_LR - ẑ0.
                if self.lrc is not None:
                    r = z_lr - z0
                    delta_r = full_precision(self.lrc(torch.cat([z_lr, r], 1)))
                    z0_corr = z_lr - (r + delta_r)
                else:
                    r, delta_r, z0_corr = None, None, z0
                # 8. Frozen VAE decoder of ẑ0corr / s (the official code multiplies by 1/s; same here, to the bit);
                # in fp32 when the precision is fp16 (this VAE family overflows fp16).
                with decoder_autocast(dtype, lq.device):
                    image = self.vae.decode((1.0 / LATENT_SCALE) * z0_corr).sample
        image = full_precision(image)  # bf16/fp16 -> fp32; fp32/fp64 kept
        if self.clamp_output:
            image = image.clamp(0.0, 1.0)
        if not return_intermediates:
            return image
        return dict(image=image, z_lr=z_lr, z_t=z_t, eps=eps, eps_hat=eps_hat, z0=z0, r=r, delta_r=delta_r,
                    z0_corr=z0_corr, tokens=tokens, confidences=confidences, prior_texts=prior_texts)

    # --------------------------------------------------------------------------------- forward parts
    def predict_text_prior(self, lq: torch.Tensor, gt_tokens: Optional[torch.Tensor] = None):
        """-> (tokens (B, 24) long IDM indices, confidences (B, 24) float or None = unweighted, texts: the B
        strings the tokens encode), per text_prior; (None, None, None) for 'none'."""
        batch = lq.shape[0]
        if self.text_prior == 'none':
            return None, None, None
        if self.text_prior == 'predicted':
            with torch.no_grad():  # frozen conditioning recognizer: nothing upstream of it is trained
                if self.text_decoding == 'full_prefix':
                    ids, probs = self.transocr.greedy_decode(lq, max_steps=TEXT_STEPS, incremental=False)
                else:  # the prior reads 23 steps, cut at END: later steps are never decoded
                    ids, probs = self.transocr.greedy_decode(lq, max_steps=DIFFTSR_MAX_TOKENS, stop_at_end=True)
            tokens, confidences = transocr_to_idm(ids, probs)
            texts = [difftsr_prediction_text(i, p)[0] for i, p in zip(ids.tolist(), probs.tolist())]
        elif self.text_prior == 'gt':
            if gt_tokens is None:
                raise ValueError("TOLANet: text_prior 'gt' needs gt_tokens (the dataset's 'idm_tokens')")
            if tuple(gt_tokens.shape) != (batch, IDM_MAX_LEN):
                raise ValueError(f'TOLANet: gt_tokens must be (B, {IDM_MAX_LEN}), got {tuple(gt_tokens.shape)}')
            tokens = gt_tokens.long()
            confidences = (tokens != IDM_PAD).to(lq.dtype)  # a certain prior: 1 on characters, 0 on pads
            texts = [decode_idm(row) for row in tokens.tolist()]
        else:  # 'null': the empty string, i.e. all pads with zero confidence
            tokens = torch.full((batch, IDM_MAX_LEN), IDM_PAD, dtype=torch.long, device=lq.device)
            confidences = torch.zeros(batch, IDM_MAX_LEN, dtype=lq.dtype, device=lq.device)
            texts = [''] * batch
        if self.confidence == 'uniform':
            confidences = None
        return tokens.to(lq.device), None if confidences is None else confidences.to(lq), texts

    def text_context(self, tokens, confidences, batch: int, like: torch.Tensor) -> torch.Tensor:
        """C_cond (B, 24, context_dim) for the IDM cross-attention."""
        if tokens is None:  # No MoM: the conditioning branch is removed
            return like.new_zeros(batch, IDM_MAX_LEN, self.context_dim)
        with torch.no_grad():  # frozen MoM; only LoRA/LRC downstream are trained
            if self.context_route == 'mom':
                return self.mom.encode_text(tokens, token_weights=confidences)
            embeddings = self.mom.text_encoder.token_emb(tokens)
            return embeddings if confidences is None else embeddings * confidences.unsqueeze(-1)

    def sample_posterior(self, posterior, noise_seeds: Optional[Sequence[int]] = None) -> torch.Tensor:
        """mean + std·n (the official DiffTSR's posterior sample, diffusers' ``sample``); n comes from its own
        per-image stream (ε's seed + POSTERIOR_SEED_OFFSET), so ε is the same draw with either latent mode."""
        return posterior.sample(
            generator=self.generators(noise_seeds, posterior.mean.shape[0], offset=POSTERIOR_SEED_OFFSET))

    def draw_noise(self, z_lr: torch.Tensor, noise_seeds: Optional[Sequence[int]] = None) -> torch.Tensor:
        """ε ~ N(0, I) with the shape of z_LR (zeros for noise 'zero'), drawn per image from ``generators``."""
        if self.noise == 'zero':
            return torch.zeros_like(z_lr)
        return randn_tensor(z_lr.shape, generator=self.generators(noise_seeds, z_lr.shape[0]), device=z_lr.device,
                            dtype=z_lr.dtype)

    @staticmethod
    def generators(seeds: Optional[Sequence[int]], batch: int, offset: int = 0) -> Optional[List[torch.Generator]]:
        """One CPU ``torch.Generator`` per image, seeded with ``seeds[i] + offset``, for diffusers' ``randn_tensor``
        (which then draws image i from generator i on the CPU: the draw depends neither on the device nor on the
        batch), or None (the global RNG) when ``seeds`` is None."""
        if seeds is None:
            return None
        if len(seeds) != batch:
            raise ValueError(f'TOLANet: got {len(seeds)} noise seeds for a batch of {batch}')
        return [torch.Generator().manual_seed((int(s) + offset) % 2**63) for s in seeds]

    # ------------------------------------------------------------------------------ adaptation state
    def trainable_parameter_counts(self) -> Dict[str, int]:
        """Parameters TOLA optimises and saves: {'idm_lora', 'vae_lora', 'lrc', 'total'} (Table S3)."""
        counts = dict(
            idm_lora=count_lora_parameters(self.idm), vae_lora=count_lora_parameters(self.vae),
            lrc=sum(p.numel() for p in self.lrc.parameters()) if self.lrc is not None else 0)
        counts['total'] = sum(counts.values())
        return counts

    def adaptation_state_dict(self) -> Dict[str, torch.Tensor]:
        """Exactly the trained state: peft's adapter state of the IDM and VAE ('idm_lora.*', 'vae_lora.*') and
        the correction branch ('lrc.*'). Frozen backbone weights are never saved."""
        state = {}
        if self.has_lora('idm'):
            state.update({f'idm_lora.{k}': v for k, v in lora_state_dict(self.idm).items()})
        if self.has_lora('vae'):
            state.update({f'vae_lora.{k}': v for k, v in lora_state_dict(self.vae).items()})
        if self.lrc is not None:
            state.update({f'lrc.{k}': v.detach().clone() for k, v in self.lrc.state_dict().items()})
        return state

    def adaptation_config(self) -> Dict:
        """The settings the adaptation state depends on, recorded in every checkpoint and checked when one is
        loaded: ``lora_rank``, ``lora_alpha`` (None without LoRA), ``idm_lora`` / ``vae_lora`` (the target
        patterns, None without that LoRA) and ``lrc`` (its options with defaults filled in, None without LRC)."""
        from tola_plugin.utils.option_checks import resolved_options
        loras = {name: lora_settings(getattr(self, name)) for name in ('idm', 'vae') if self.has_lora(name)}
        first = next(iter(loras.values()), {})
        return {
            'lora_rank': first.get('rank'), 'lora_alpha': first.get('alpha'),
            'idm_lora': loras['idm']['targets'] if 'idm' in loras else None,
            'vae_lora': loras['vae']['targets'] if 'vae' in loras else None,
            'lrc': resolved_options(ARCH_REGISTRY, self.options['lrc']) if self.lrc is not None else None
        }

    def load_adaptation_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        """Inverse of ``adaptation_state_dict``; strict: any missing or unexpected key raises KeyError."""
        parts = {'idm_lora': {}, 'vae_lora': {}, 'lrc': {}}
        for key, value in state.items():
            head, _, rest = key.partition('.')
            if head not in parts:
                raise KeyError(f'TOLANet adaptation state: unexpected key {key!r} (expected idm_lora.*, '
                               'vae_lora.*, lrc.*)')
            parts[head][rest] = value
        for name in ('idm', 'vae'):
            if self.has_lora(name):
                load_lora_state_dict(getattr(self, name), parts[f'{name}_lora'], component=f'TOLANet {name}')
            elif parts[f'{name}_lora']:
                raise KeyError(f'TOLANet: the state has {name} LoRA weights but this model has no {name} LoRA '
                               f'({name}_lora is off)')
        if self.lrc is not None:
            self.lrc.load_state_dict(parts['lrc'], strict=True)
        elif parts['lrc']:
            raise KeyError('TOLANet: the state has LRC weights but this model has no correction branch (lrc: ~)')

    def has_lora(self, name: str) -> bool:
        """Whether the 'idm' or 'vae' module currently carries (unmerged) peft LoRA adapters."""
        return isinstance(getattr(self, name), PeftModel)

    def merge_lora(self) -> None:
        """Fold LoRA into the base weights (peft merge_and_unload): same outputs within fp32 rounding, no
        adapter overhead; afterwards the model has no adaptation state apart from the LRC."""
        for name in ('idm', 'vae'):
            if not self.has_lora(name):
                continue
            if name == 'vae' and not self.vae_lora_active:
                self.vae = self.vae.unload()  # the "VAE LoRA off" control: the base encoder, unchanged
            else:
                setattr(self, name, merge_lora(getattr(self, name)))

    # ----------------------------------------------------------------------------- merged export
    def merged_options(self) -> Dict:
        """Constructor options that rebuild this network's architecture with LoRA merged (no adapters):
        the backbone sizes are read from the modules themselves."""
        if self.has_lora('idm') or self.has_lora('vae'):
            raise ValueError('TOLANet.merged_options: call merge_lora() first')
        if self.inference_only:
            raise ValueError('TOLANet: a network prepared for inference has no MoM image branch and cannot be '
                             'exported; export the trained network (tools/export_merged.py)')
        opts = dict(self.options, backbone_init='empty', idm_lora=False, vae_lora=False, vae_lora_active=True)
        for key in ('difftsr_checkpoint', 'transocr_checkpoint', 'gradient_checkpointing'):  # not architecture
            opts.pop(key, None)
        for name, module in (('idm', self.idm), ('vae', self.vae), ('mom', self.mom)):
            accepted = inspect.signature(type(module).__init__).parameters
            opts[f'{name}_config'] = {
                k: (list(v) if isinstance(v, tuple) else v)
                for k, v in module.config.items() if k in accepted
            }
        opts['transocr_config'] = dict(self.transocr.arch_options)  # e.g. the demo file's own architecture
        return opts

    def save_merged(self, path: str) -> None:
        """Merge LoRA (if not yet) and write every tensor of the network to one pickle-free safetensors file,
        with the rebuild options in its metadata (``TOLANet.from_merged`` reads it back)."""
        from tola_plugin.checkpoints.tola import write_merged
        self.merge_lora()
        write_merged(path, self.state_dict(), self.merged_options())

    @classmethod
    def from_merged(cls, path: str, **overrides) -> 'TOLANet':
        """Rebuild a merged TOLANet from ``save_merged``'s file (strict; every tensor, the MoM image branch
        included). ``overrides``: inference switches such as timestep or noise. For inference prefer
        ``load_for_inference`` (no MoM image branch, inference mode)."""
        from safetensors.torch import load_file

        from tola_plugin.checkpoints.tola import read_merged_options
        with torch.device('meta'):  # no random init of ~1B parameters that are overwritten right away
            net = cls(**read_merged_options(path, overrides))
        net.load_state_dict(load_file(path), strict=True, assign=True)  # memory-mapped tensors, no copy
        net.requires_grad_(False)
        return net.eval()

    @classmethod
    def load_for_inference(cls, path: str, **overrides) -> 'TOLANet':
        """The inference network of ``save_merged``'s file: ``prepare_for_inference`` applied, the weights
        memory-mapped from the file and assigned in place (read once, never copied on the CPU; ``.to(device)``
        copies them to a GPU), the MoM image branch never read. Strict: every tensor it runs must be in the file.
        overrides: inference switches (precision, text_decoding, timestep, noise, ...). Where and on which runtime
        it runs is the inference entry points' business (``tola_plugin/inference/runtime.py``).
        """
        from safetensors.torch import load_file

        from tola_plugin.checkpoints.tola import read_merged_options
        with torch.device('meta'):
            net = cls(**read_merged_options(path, overrides))
        net.mom.drop_image_branch()
        unused = tuple(f'mom.{prefix}' for prefix in DiffTSRMoM.IMAGE_BRANCH)
        state = load_file(path)  # memory-mapped: a tensor's bytes are read when first used
        state = {k: v for k, v in state.items() if not k.startswith(unused)}
        net.load_state_dict(state, strict=True, assign=True)
        return net.prepare_for_inference()

    def prepare_for_inference(self) -> 'TOLANet':
        """Make this network inference-only, in place (returns it), computing the same function: LoRA folded into
        the weights (peft), the MoM image branch (only feeds the TDM) dropped, every parameter frozen, eval mode;
        ``forward`` then runs under ``torch.inference_mode``. Training or exporting it afterwards is an error."""
        self.merge_lora()
        if self.mom.unet is not None:
            self.mom.drop_image_branch()
        self.requires_grad_(False)
        self.eval()
        self.inference_only = True
        return self
