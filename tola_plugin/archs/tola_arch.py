"""TOLANet: TOLA's one-step DiffTSR restorer (paper Algorithm 1) with peft LoRA and latent residual correction.

One forward = Algorithm 1, top to bottom: frozen TransOCR -> IDM tokens + confidences; VAE encoder (LoRA)
-> z_LR; q-sample at the fixed t; MoM text encoder once; IDM (LoRA) once; ẑ0; LRC; frozen VAE decoder.
No TDM, no MoM U-Net (its I_cond only feeds the TDM), no reverse loop.

Every paper variant and control is a constructor option (docs/tola.md has the table of option files); the ones
that change no weight are inference switches, set through ``set_switches`` (``SWITCHES``).
"""
import contextlib
import numbers
import zlib
from typing import Dict, List, Optional, Sequence

import torch
from diffusers.utils.torch_utils import randn_tensor
from torch import nn

from basicsr.archs import build_network
from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.backbone_builder import build_backbone
from tola_plugin.archs.diffusion_schedule import schedule_constants
from tola_plugin.archs.lora import IDM_LORA_TARGETS, VAE_ENCODER_LORA_TARGETS, add_lora, check_lora_settings
from tola_plugin.archs.precision import PRECISIONS, autocast, decoder_autocast, full_precision, requested_dtype
from tola_plugin.archs.tola_adaptation import TOLAAdaptationMixin
from tola_plugin.archs.tola_loading import TOLALoadingMixin
from tola_plugin.archs.vae_arch import LATENT_MODES, LATENT_SCALE
from tola_plugin.text.alphabets import IDM_MAX_LEN, IDM_PAD, decode_idm
from tola_plugin.text.text_prior import DIFFTSR_MAX_TOKENS, difftsr_prediction_text, transocr_to_idm

TEXT_PRIORS = ('predicted', 'gt', 'null', 'none')
CONFIDENCES = ('predicted', 'uniform')
CONTEXT_ROUTES = ('mom', 'direct')
NOISE_MODES = ('gaussian', 'zero')
TEXT_DECODINGS = ('incremental', 'full_prefix')
TEXT_STEPS = 24  # greedy TransOCR steps, as DiffTSR's Text_Prediction (the 'full_prefix' reference route)
POSTERIOR_SEED_OFFSET = 0x9E3779B9  # per-image seed of the posterior sample = ε's seed + this
#: Inference switches: the options that change what the forward computes but no weight, with their choices (None:
#: checked by a function). The constructor sets them through ``set_switches``, the one place they are validated,
#: and so do the loaders (``from_merged(path, noise='zero')``), TOLAPipeline and the command lines.
SWITCHES = {
    'timestep': None, 'latent': LATENT_MODES, 'noise': NOISE_MODES, 'text_prior': TEXT_PRIORS,
    'confidence': CONFIDENCES, 'context_route': CONTEXT_ROUTES, 'clamp_output': (True, False), 'precision': PRECISIONS,
    'text_decoding': TEXT_DECODINGS
}


def image_noise_seed(name: str, base_seed: int = 0) -> int:
    """Per-image noise seed from a file name: the same image gets the same ε in every run and variant
    (the paper's paired comparisons use identical per-image noise)."""
    return (zlib.crc32(name.encode('utf-8')) + 1_000_003 * int(base_seed)) % (2**63)


@ARCH_REGISTRY.register()
class TOLANet(TOLAAdaptationMixin, TOLALoadingMixin, nn.Module):
    """One-step text-aware DiffTSR restorer. lq (B, 3, H, W) RGB in [0, 1] -> restored (B, 3, H, W) in [0, 1].

    Backbone:
        backbone_init: 'checkpoint' (default; the official ``DiffTSR.ckpt`` / ``transocr.pth``, strict),
            'demo' (the small backbone trained here and shipped in ``tola_plugin/demo/backbone``, strict; the
            checkpoint paths are not used), 'random' (modules built from ``*_config`` with random weights drawn from
            ``random_seed``: tests and benchmarks) or 'empty' (modules built from ``*_config``, no weight drawn:
            every weight is loaded next, as when a merged file is rebuilt).
        difftsr_checkpoint, transocr_checkpoint: file paths (official layout or the converted safetensors).
        idm_config, vae_config, mom_config, transocr_config: constructor overrides of the backbone modules
            (architecture); with 'checkpoint' they must match the file (strict loading).
        random_seed: seed of the 'random' backbone (0), drawn from its own RNG stream so that training and
            testing rebuild the very same random backbone whatever the global RNG state.
    Adaptation (what is trained; ``tola_adaptation.py``):
        lora_rank, lora_alpha: peft LoRA rank r (4) and alpha (None = r).
        idm_lora, vae_lora: insert LoRA into the IDM transformer blocks / the VAE encoder + quant_conv.
        vae_lora_active: False disables the VAE-encoder LoRA at inference (the "VAE LoRA off" control).
        lrc: BasicSR network option dict of the correction branch ({type: LatentResidualCorrection, ...},
            {type: PlainResidualCorrection}) or None (no correction: ẑ0corr = ẑ0).
        gradient_checkpointing: parts whose activations are recomputed in the backward pass instead of kept, any
            subset of ('idm', 'vae_encoder', 'vae_decoder'); none by default (the paper). Same gradients, less
            memory, about one more forward of those parts (tools/estimate_memory.py, docs/training_gpus.md).
    Inference switches (``SWITCHES``; paper default first; ``set_switches`` changes them, loaders take them too):
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
        clamp_output: clamp the decoded image to [0, 1] (True; the output image range).
        precision: 'fp32' (default), 'bf16', 'fp16' or 'auto': the compute dtype of the VAE, MoM, IDM and LRC
            (autocast; the output stays fp32; the TransOCR text prior always runs in fp32). 'auto': the inference
            entry points' runtime decision (a low precision where it is faster and qualified on this machine,
            ``tola_plugin/runtime``); a network run without one computes 'auto' in fp32 (``archs/precision.py``).
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
        check_lora_settings(lora_rank, lora_alpha, idm_lora, vae_lora, vae_lora_active)
        self.options = options  # constructor arguments (the adaptation settings read the LRC's)
        self.inference_only = False  # set by prepare_for_inference
        self.plan = None  # the runtime decision (tola_plugin.runtime), when an entry point made one
        self.set_switches(**{name: options[name] for name in SWITCHES})

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

    @classmethod
    def check_switches(cls, switches: Dict) -> Dict:
        """``switches`` checked, each against its choices in ``SWITCHES`` (timestep: an integer in [0, 999]); any
        other option fixes the architecture or the weights, and naming one is an error. Returns them."""
        unknown = sorted(set(switches) - set(SWITCHES))
        if unknown:
            raise ValueError(f'TOLANet: {unknown} cannot be switched on a built network (they fix its architecture '
                             f'or weights); the inference switches are {sorted(SWITCHES)}')
        for name, value in switches.items():
            if name == 'timestep':
                if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                    raise ValueError(f'TOLANet: timestep must be an integer in [0, 999], got {value!r}')
                schedule_constants(value)  # in [0, 999], or a ValueError naming it
            elif not isinstance(value, bool if name == 'clamp_output' else str) or value not in SWITCHES[name]:
                raise ValueError(f'TOLANet: {name} must be one of {SWITCHES[name]}, got {value!r}')
        return switches

    def set_switches(self, **switches) -> 'TOLANet':
        """Set inference switches (``SWITCHES``: timestep, latent, noise, text_prior, confidence, context_route,
        clamp_output, precision, text_decoding; ``check_switches``); returns the network."""
        self.check_switches(switches)
        if 'precision' in switches and getattr(self, 'plan', None) is not None:
            raise ValueError('TOLANet: the precision of a placed network is its runtime\'s decision '
                             f'({self.plan.describe()}); change it through TOLAPipeline.set_switches or '
                             'Runtime.replan, which decide again')
        state = {**self.switches(), **switches}
        if state['context_route'] == 'direct' and state['text_prior'] == 'none':
            raise ValueError("TOLANet: context_route 'direct' needs a text prior (text_prior 'none' removes it)")
        for name, value in switches.items():
            setattr(self, name, int(value) if name == 'timestep' else value)
        if 'timestep' in switches:
            self.sqrt_alpha_bar, self.sqrt_one_minus_alpha_bar = schedule_constants(self.timestep)
        return self

    def switches(self) -> Dict:
        """The inference switches as they are now ({name: value}; None for one not yet set)."""
        return {name: self.__dict__.get(name) for name in SWITCHES}

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
        dtype = self.compute_dtype(lq.device)
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

    def compute_dtype(self, device) -> torch.dtype:
        """The dtype the forward computes in: the runtime plan's (``tola_plugin.runtime``: a precision qualified
        on this machine) when an entry point placed the network, else the precision switch as asked ('auto': fp32;
        ``archs/precision.requested_dtype``)."""
        return self.plan.dtype if self.plan is not None else requested_dtype(self.precision, device)

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
