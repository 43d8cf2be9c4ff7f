"""TOLANet: TOLA's one-step DiffTSR restorer (paper Algorithm 1) with peft LoRA and latent residual correction.

One forward = Algorithm 1, top to bottom: frozen TransOCR -> IDM tokens + confidences; VAE encoder (LoRA)
-> z_LR; q-sample at the fixed t; MoM text encoder once; IDM (LoRA) once; ẑ0; LRC; frozen VAE decoder.
No TDM, no MoM U-Net (its I_cond only feeds the TDM), no reverse loop.

The network is built from a ``TOLAConfig`` (``tola_config.py``: every option, its default, check and kind); the
options that change no weight are inference switches, changed through ``set_switches``. What is trained is
``TOLAAdaptationMixin``'s (``tola_adaptation.py``), the files ``TOLALoadingMixin``'s (``tola_loading.py``). How the
encoder, the IDM, the decoder and the text prior's reading run, and each stage's precision, is the network's
``stage_runner``'s (``stage_runner.py``: torch's by default; a runtime installs its own with ``running``).
"""
import contextlib
import inspect
import zlib
from typing import Dict, List, Optional, Sequence

import torch
from diffusers.utils.torch_utils import randn_tensor
from torch import nn

from basicsr.archs import build_network
from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.backbone_builder import build_backbone
from tola_plugin.archs.diffusion_schedule import schedule_constants
from tola_plugin.archs.lora import IDM_LORA_TARGETS, VAE_ENCODER_LORA_TARGETS, add_lora
from tola_plugin.archs.precision import StageDtypes, autocast, full_precision
from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.archs.tola_adaptation import TOLAAdaptationMixin
from tola_plugin.archs.tola_config import TOLAConfig
from tola_plugin.archs.tola_loading import TOLALoadingMixin
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.text.alphabets import IDM_MAX_LEN, IDM_PAD, decode_idm
from tola_plugin.text.text_prior import DIFFTSR_MAX_TOKENS, difftsr_prediction_text, transocr_to_idm

TEXT_STEPS = 24  # greedy TransOCR steps, as DiffTSR's Text_Prediction (the 'full_prefix' reference route)
POSTERIOR_SEED_OFFSET = 0x9E3779B9  # per-image seed of the posterior sample = ε's seed + this


def image_noise_seed(name: str, base_seed: int = 0) -> int:
    """Per-image noise seed from a file name: the same image gets the same ε in every run and variant
    (the paper's paired comparisons use identical per-image noise)."""
    return (zlib.crc32(name.encode('utf-8')) + 1_000_003 * int(base_seed)) % (2**63)


class Switch:
    """An inference switch as an attribute of the network (``net.precision``): read from its config, written
    through ``set_switches`` (``net.noise = 'zero'`` is ``net.set_switches(noise='zero')``)."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, net, owner=None):
        return self if net is None else getattr(net.config, self.name)

    def __set__(self, net, value):
        net.set_switches(**{self.name: value})


@ARCH_REGISTRY.register()
class TOLANet(TOLAAdaptationMixin, TOLALoadingMixin, nn.Module):
    """One-step text-aware DiffTSR restorer. lq (B, 3, H, W) RGB in [0, 1] -> restored (B, 3, H, W) in [0, 1].

    ``TOLANet(**options)`` (how BasicSR builds ``network_g``) or ``TOLANet.from_config(config)``: the options are
    ``TOLAConfig``'s (its docstring and docs/tola.md describe each), checked before anything is built; ``config``
    holds them, with the switches as they are now. The switches are attributes too (``timestep``, ``precision``,
    ...; ``SWITCHES``). ``stage_runner``: how the stages run (``stage_runner.StageRunner``; ``running``).
    """
    timestep = Switch()
    latent = Switch()
    noise = Switch()
    text_prior = Switch()
    confidence = Switch()
    context_route = Switch()
    clamp_output = Switch()
    precision = Switch()
    text_decoding = Switch()

    def __init__(self, **options):
        super().__init__()
        config = TOLAConfig.from_options(options)  # every option checked before minutes of loading
        self.config = config
        self.inference_only = False  # set by prepare_for_inference
        self.stage_runner = StageRunner()  # the torch modules below, as the precision switch asks
        self.sqrt_alpha_bar, self.sqrt_one_minus_alpha_bar = schedule_constants(config.timestep)

        # Frozen backbone (official weights, strict), then LoRA on top (peft freezes every base weight).
        idm, vae, mom, transocr = build_backbone(config.backbone_init, config.difftsr_checkpoint,
                                                 config.transocr_checkpoint, config.idm_config, config.vae_config,
                                                 config.mom_config, config.transocr_config, config.random_seed)
        for module in (idm, vae, mom, transocr):
            module.requires_grad_(False)
        self.context_dim = idm.config.cross_attention_dim
        self.idm = add_lora(idm, IDM_LORA_TARGETS, config.lora_rank, config.lora_alpha) if config.idm_lora else idm
        self.vae = add_lora(vae, VAE_ENCODER_LORA_TARGETS, config.lora_rank,
                            config.lora_alpha) if config.vae_lora else vae
        if config.vae_lora and not config.vae_lora_active:
            self.vae.base_model.disable_adapter_layers()
        self.mom = mom
        self.transocr = transocr  # also the OCR-loss recognizer (TOLAModel shares it; one copy in memory)
        self.lrc = build_network(dict(config.lrc)) if config.lrc else None
        self.set_gradient_checkpointing(config.gradient_checkpointing)
        self.train(True)

    # the constructor's keywords are TOLAConfig's fields (BasicSR's strict option check reads this signature)
    __init__.__signature__ = inspect.Signature([
        inspect.Parameter('self', inspect.Parameter.POSITIONAL_OR_KEYWORD), *TOLAConfig.signature().parameters.values()
    ])

    @classmethod
    def from_config(cls, config: TOLAConfig) -> 'TOLANet':
        """The network of ``config``."""
        return cls(**config.options())

    def set_switches(self, **switches) -> 'TOLANet':
        """Set inference switches (``SWITCHES``: timestep, latent, noise, text_prior, confidence, context_route,
        clamp_output, precision, text_decoding; checked by ``TOLAConfig``); returns the network. Any other option
        fixes the architecture or the weights: naming one is an error."""
        switches = TOLAConfig.check_switches(switches)
        if 'precision' in switches and self.stage_runner.dtypes is not None:
            raise ValueError('TOLANet: the precision of a placed network is its runtime\'s decision '
                             f'({self.stage_runner.name}); change it through TOLAPipeline.set_switches or '
                             'Runtime.replan, which decide again')
        self.config = self.config.replace(**switches)
        if 'timestep' in switches:
            self.sqrt_alpha_bar, self.sqrt_one_minus_alpha_bar = schedule_constants(self.timestep)
        return self

    @contextlib.contextmanager
    def running(self, runner: StageRunner):
        """The stages run with ``runner`` (``stage_runner.py``) for the block, the runner before it back afterwards (an
        error included): the one way to change how this network runs (a runtime holding the network for its
        lifetime keeps the block open on an ``ExitStack``)."""
        previous, self.stage_runner = self.stage_runner, runner
        try:
            yield runner
        finally:
            self.stage_runner = previous

    def switches(self) -> Dict:
        """The inference switches as they are now ({name: value})."""
        return self.config.switches()

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

    def prepare_for_inference(self):
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
        runner = self.stage_runner
        dtypes = runner.stage_dtypes(self, lq.device)
        device = lq.device
        # inference-only networks run without autograd bookkeeping
        with torch.inference_mode() if self.inference_only else contextlib.nullcontext():
            # 1-2. Text prior: frozen TransOCR -> tokens + confidences, normalised and mapped to IDM indices. On
            # torch always fp32: its ids are discrete choices that low precision could flip on near-ties, and its
            # decoding steps are weight-bound matrix-vector products that casting the weights would only slow down.
            # On a runtime's stages (OpenVINO) in fp32 too, qualified equal to these.
            tokens, confidences, prior_texts = self.predict_text_prior(lq, gt_tokens)
            # Each stage in its own precision (``stage_dtypes``: a no-op for fp32); Algorithm 1's own arithmetic
            # (z_t, ẑ0, the residuals) stays in fp32 between them: ẑ0 carries ε̂'s error times 101.6 at t = 999.
            # 1. LoRA-adapted VAE encoder -> unscaled z_LR (3, H/4, W/4).
            with autocast(dtypes['vae_encoder'], device):
                posterior = runner.encode(self, lq)
                z_lr = posterior.mode() if self.latent == 'mode' else self.sample_posterior(posterior, noise_seeds)
            z_lr = full_precision(z_lr)
            # 3. q-sample at the fixed t with one ε per input.
            eps = self.draw_noise(z_lr, noise_seeds)
            z_t = self.sqrt_alpha_bar * z_lr + self.sqrt_one_minus_alpha_bar * eps
            # 4. MoM once: C_cond from confidence-scaled token embeddings (I_cond feeds only the TDM: skipped).
            with autocast(dtypes['mom'], device):
                context = full_precision(runner.encode_text(self, tokens, confidences, lq.shape[0], z_lr))
            # 5. LoRA-adapted IDM once on [z_t, z_LR] (z_t first, both unscaled, as DiffTSR); its output
            # convolution computes ε̂ in fp32 (idm_unet_arch.FullPrecisionOutputConv2d).
            t = torch.full((lq.shape[0], ), self.timestep, dtype=torch.long, device=device)
            with autocast(dtypes['idm'], device):
                eps_hat = full_precision(runner.denoise(self, torch.cat([z_t, z_lr], 1), t, context))
            # 6. ε-prediction -> clean latent; no reverse update follows.
            z0 = (z_t - self.sqrt_one_minus_alpha_bar * eps_hat) / self.sqrt_alpha_bar
            # 7. Latent residual correction of r = z_LR - ẑ0.
            if self.lrc is not None:
                r = z_lr - z0
                with autocast(dtypes['lrc'], device):
                    delta_r = full_precision(runner.correct(self, torch.cat([z_lr, r], 1)))
                z0_corr = z_lr - (r + delta_r)
            else:
                r, delta_r, z0_corr = None, None, z0
            # 8. Frozen VAE decoder of ẑ0corr / s (the official code multiplies by 1/s; same here, to the bit).
            with autocast(dtypes['vae_decoder'], device):
                image = runner.decode(self, (1.0 / LATENT_SCALE) * z0_corr)
        image = full_precision(image)  # bf16/fp16 -> fp32; fp32/fp64 kept
        if self.clamp_output:
            image = image.clamp(0.0, 1.0)
        if not return_intermediates:
            return image
        return dict(image=image, z_lr=z_lr, z_t=z_t, eps=eps, eps_hat=eps_hat, z0=z0, r=r, delta_r=delta_r,
                    z0_corr=z0_corr, tokens=tokens, confidences=confidences, prior_texts=prior_texts)

    def stage_dtypes(self, device) -> StageDtypes:
        """Stage (``archs/precision.STAGE_NAMES``) -> the dtype the forward computes it in (``stage_runner``'s): a
        runtime's (a precision per stage, qualified on this machine) when an entry point placed the network, else the
        precision switch as asked on every stage ('auto': fp32; in training bf16 keeps the IDM in fp32:
        ``archs/precision.stage_dtypes`` and ``requested_dtype``)."""
        return self.stage_runner.stage_dtypes(self, device)

    # --------------------------------------------------------------------------------- forward parts
    def predict_text_prior(self, lq: torch.Tensor, gt_tokens: Optional[torch.Tensor] = None):
        """-> (tokens (B, 24) long IDM indices, confidences (B, 24) float or None = unweighted, texts: the B
        strings the tokens encode), per text_prior; (None, None, None) for 'none'."""
        batch = lq.shape[0]
        if self.text_prior == 'none':
            return None, None, None
        if self.text_prior == 'predicted':
            ids, probs = self.decode_text(lq)
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

    def decode_text(self, lq: torch.Tensor):
        """TransOCR's greedy reading of ``lq`` for the text prior, per text_decoding -> (ids (B, S) long, probs (B, S)),
        by the ``stage_runner`` (torch's: ``transocr``)."""
        with torch.no_grad():  # frozen conditioning recognizer: nothing upstream of it is trained
            if self.text_decoding == 'full_prefix':
                return self.stage_runner.read_text(self, lq, TEXT_STEPS, incremental=False, stop_at_end=False)
            # the prior reads 23 steps, cut at END: later steps are never decoded
            return self.stage_runner.read_text(self, lq, DIFFTSR_MAX_TOKENS, incremental=True, stop_at_end=True)

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
