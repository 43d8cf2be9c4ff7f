"""The three training stages of the demo backbone, each a plain loop over the line pool.

1. ``train_vae``: the kl-f4 VAE reconstructs random crops of HR and LR lines (L1 + kl_weight x KL, LDM's
   first-stage objective without its GAN and LPIPS terms, which need weights that are not available offline);
   afterwards ``normalise_latent_scale`` rescales the latent exactly so that DiffTSR's 0.18215 x z has unit
   standard deviation on HR lines, the convention LDM's scale factor assumes.
2. ``train_transocr``: TransOCR learns to read HR and LR lines (teacher-forced cross-entropy on the
   lower-cased targets the datasets make, as DiffTSR's recognizer was trained).
3. ``train_idm``: the IDM and the MoM text encoder with DiffTSR's latent diffusion objective: L1 on ε at
   t ~ U{0..999}, conditioned on z_LR (concatenated) and the text (cross-attention). Part of every batch is
   at t = 999 with z_t noised from z_LR, exactly TOLA's one step, and is scored in ẑ0 space: at t = 999
   ẑ0 = (z_t - √(1-ᾱ)ε̂)/√ᾱ multiplies ε errors by ~102, so an ε loss alone leaves that step unusable
   (docs/demo_backbone.md). The text is the TransOCR prior with its confidences, the ground truth, or the
   empty text (all pads), drawn per sample.
Every stage is deterministic given its seed and the thread count (the caller fixes both). A ``StageRun`` says where a
stage computes (CPU or CUDA), where its loop starts (a stage resumed from its partial file) and when it must stop (a
deadline, read from an injectable clock); a stage stopped early returns ``iterations_done`` below its total. A run with
a time budget (``seconds``: a GPU whose speed is not known in advance) sizes its schedule to it once it has timed its
first iterations.
"""
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.optimization import get_cosine_schedule_with_warmup

from tola_lab.demo.latents import LatentCache
from tola_lab.demo.one_step_path import FixedPath, graft
from tola_lab.demo.pool import LinePool
from tola_plugin.archs.diffusion_schedule import NUM_TRAIN_TIMESTEPS, make_ldm_scheduler
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.text.alphabets import IDM_MAX_LEN, IDM_PAD

Log = Callable[[str], None]


@dataclass
class StageRun:
    """How one stage's loop runs: on ``device``, from iteration ``start`` (its earlier iterations done by a run that
    stopped), until its total or until ``clock()`` reaches ``deadline`` (None: no deadline)."""
    device: str = 'cpu'
    start: int = 0
    deadline: Optional[float] = None
    clock: Callable[[], float] = time.monotonic
    seconds: Optional[float] = None  # this run's time budget: the total is cut to what it allows (``sized``)
    timed: Sequence[int] = (10, 40)  # the iterations of this run between which its speed is measured
    _marks: Dict[int, float] = field(default_factory=dict, repr=False)

    def stop(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def sized(self, it: int, iterations: int) -> Optional[int]:
        """Called before iteration ``it``: with a budget, the total that fits it (at most ``iterations``) once the
        iterations ``timed`` have run, else None (keep the schedule)."""
        if self.seconds is None:
            return None
        done = it - self.start
        if done == 0 or done == self.timed[0]:
            self._marks[done] = self.clock()
        if done != self.timed[1]:
            return None
        now = self.clock()
        per_it = max((now - self._marks[self.timed[0]]) / (self.timed[1] - self.timed[0]), 1e-9)
        left = self.seconds - (now - self._marks[0])
        return max(it + 1, min(iterations, it + int(left / per_it)))  # this iteration runs


def images(array: np.ndarray, rows: Sequence[int], stride=(1, 1), device='cpu') -> torch.Tensor:
    """uint8 (N,H,W,3) rows -> float (B,3,H/sy,W/sx) in [0,1] on ``device`` (``stride`` = nearest subsampling)."""
    sy, sx = stride
    batch = np.stack([array[int(r), ::sy, ::sx] for r in rows])
    return torch.from_numpy(batch).to(device).permute(0, 3, 1, 2).float().div_(255.0)


class Progress:
    """Running means of the losses and a line every ``every`` iterations with speed and ETA."""

    def __init__(self, stage: str, total: int, every: int, log: Log, start: int = 0):
        self.stage, self.total, self.every, self.log, self.first = stage, total, every, log, start
        self.start = time.time()
        self.sums: Dict[str, float] = {}
        self.count = 0
        self.last: Dict[str, float] = {}

    def update(self, it: int, lr: float, **losses: float) -> None:
        for k, v in losses.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v)
        self.count += 1
        if (it + 1) % self.every == 0 or it + 1 == self.total:
            self.last = {k: v / self.count for k, v in self.sums.items()}
            elapsed = time.time() - self.start
            per_it = elapsed / (it + 1 - self.first)
            text = ' '.join(f'{k} {v:.4f}' for k, v in self.last.items())
            self.log(f'{self.stage} {it + 1}/{self.total} {text} lr {lr:.2e} {per_it:.2f} s/it '
                     f'eta {per_it * (self.total - it - 1) / 60:.1f} min')
            self.sums, self.count = {}, 0

    @property
    def seconds(self) -> float:
        return time.time() - self.start


def _optimizer(params, lr: float, iterations: int, warmup: int, weight_decay: float = 0.0, start: int = 0):
    """AdamW with warm-up and cosine decay over ``iterations``, its schedule at iteration ``start`` (a resumed stage
    continues its schedule; its moments start afresh, as they are not kept)."""
    optimizer = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)
    for group in optimizer.param_groups:
        group.setdefault('initial_lr', lr)
    return optimizer, get_cosine_schedule_with_warmup(optimizer, min(warmup, iterations // 2), iterations,
                                                      last_epoch=start - 1)


def _resized(run: StageRun, it: int, iterations: int, optimizer, warmup: int, progress: 'Progress'):
    """(total, new scheduler or None): the schedule cut to ``run``'s time budget when it is measured (``sized``)."""
    total = run.sized(it, iterations)
    if total is None or total == iterations:
        return iterations, None
    progress.log(f'{progress.stage}: {total} iterations fit the {run.seconds:.0f} s budget (of {iterations})')
    progress.total = total
    return total, get_cosine_schedule_with_warmup(optimizer, min(warmup, total // 2), total, last_epoch=it - 1)


def _finish(progress: 'Progress', it: int) -> Dict[str, float]:
    return {
        **{f'final_{k}': v
           for k, v in progress.last.items()}, 'seconds': progress.seconds, 'iterations_done': it,
        'iterations': progress.total
    }


# --------------------------------------------------------------------------------------------------- VAE
def train_vae(vae, pool: LinePool, iterations: int, batch_size: int, crop: Sequence[int], lr: float,
              kl_weight: float = 1e-6, lr_fraction: float = 0.5, warmup: int = 100, seed: int = 0, log: Log = print,
              log_every: int = 50, run: Optional[StageRun] = None) -> Dict[str, float]:
    """Reconstruction of random ``crop`` (h, w) windows of HR (and, with probability ``lr_fraction``, LR)
    lines. The VAE is convolutional (no mid-block attention in the demo config), so crops train the same
    function as whole lines at a fraction of the cost. Returns the last logged losses, the seconds and the
    iterations done (``run``: device, start, deadline)."""
    run = run or StageRun()
    rng = np.random.default_rng(seed + run.start)
    generator = torch.Generator(run.device).manual_seed(seed + run.start)
    optimizer, scheduler = _optimizer(vae.parameters(), lr, iterations, warmup, start=run.start)
    ch, cw = int(crop[0]), int(crop[1])
    progress = Progress('vae', iterations, log_every, log, run.start)
    vae.train()
    it = run.start
    while it < iterations and not run.stop():
        iterations, resized = _resized(run, it, iterations, optimizer, warmup, progress)
        scheduler = resized or scheduler
        batch = []
        for _ in range(batch_size):
            source = pool.lr if rng.random() < lr_fraction else pool.hr
            row, y, x = rng.integers(source.shape[0]), rng.integers(128 - ch + 1), rng.integers(512 - cw + 1)
            batch.append(source[row, y:y + ch, x:x + cw])
        x = torch.from_numpy(np.stack(batch)).to(run.device).permute(0, 3, 1, 2).float().div_(255.0)
        posterior = vae.encode(x).latent_dist
        recon = vae.decode(posterior.sample(generator=generator)).sample
        l1 = (recon - x).abs().mean()
        kl = posterior.kl().sum() / x.shape[0]  # LDM: summed over the latent, averaged over the batch
        loss = l1 + kl_weight * kl
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        progress.update(it, scheduler.get_last_lr()[0], l1=l1.item(), kl=kl.item())
        it += 1
    vae.eval()
    return _finish(progress, it)


@torch.no_grad()
def normalise_latent_scale(vae, hr: torch.Tensor) -> float:
    """Rescale the latent by k so that std(LATENT_SCALE · mode(z)) = 1 over the (B,3,H,W) lines ``hr``; the
    VAE's image-to-image function is unchanged (quant_conv mean · k, log-variance + 2 ln k, post_quant_conv
    weights / k). Returns k."""
    std = float(vae.encode(hr).latent_dist.mode().std())
    k = 1.0 / (LATENT_SCALE * std)
    c = vae.config.latent_channels
    vae.quant_conv.weight[:c] *= k
    vae.quant_conv.bias[:c] *= k
    vae.quant_conv.bias[c:] += 2.0 * math.log(k)
    vae.post_quant_conv.weight /= k
    return k


# ---------------------------------------------------------------------------------------------- TransOCR
def train_transocr(ocr, pool: LinePool, iterations: int, batch_size: int, lr: float, hr_fraction: float = 0.3,
                   warmup: int = 200, seed: int = 0, log: Log = print, log_every: int = 50,
                   run: Optional[StageRun] = None) -> Dict[str, float]:
    """Teacher-forced CE on HR lines (probability ``hr_fraction``) and LR lines. Images are subsampled to
    32x256 exactly as TransOCR's 'difftsr' preprocessing does (x[:, :, ::4, ::2]) before they are made
    float, so the loop never touches the full 128x512 arrays."""
    if ocr.preprocess_mode != 'difftsr':
        raise ValueError("train_transocr: the demo TransOCR uses preprocess 'difftsr'")
    run = run or StageRun()
    rng = np.random.default_rng(seed + run.start)
    torch.manual_seed(seed + run.start)  # dropout
    optimizer, scheduler = _optimizer(ocr.parameters(), lr, iterations, warmup, weight_decay=0.01, start=run.start)
    progress = Progress('transocr', iterations, log_every, log, run.start)
    n, stride = pool.num_lines, (4, 2)
    ocr.train()
    it = run.start
    while it < iterations and not run.stop():
        iterations, resized = _resized(run, it, iterations, optimizer, warmup, progress)
        scheduler = resized or scheduler
        lines = rng.integers(n, size=batch_size)
        use_hr = rng.random(batch_size) < hr_fraction
        rows_lr = rng.integers(pool.degradations, size=batch_size) * n + lines
        x = torch.cat([
            images(pool.hr if h else pool.lr, [line if h else row], stride, run.device)
            for h, line, row in zip(use_hr, lines, rows_lr)
        ])
        targets = torch.from_numpy(pool.ocr_target[lines]).to(run.device)
        logits = ocr(x, targets)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ocr.parameters(), 5.0)
        optimizer.step()
        scheduler.step()
        progress.update(it, scheduler.get_last_lr()[0], ce=loss.item())
        it += 1
    ocr.eval()
    return _finish(progress, it)


# -------------------------------------------------------------------------------------------- IDM + MoM
TEXT_SOURCES = ('predicted', 'gt', 'empty')


def text_condition(kind: str, cache: LatentCache, pool: LinePool, row: int, line: int):
    """(IDM tokens (24,), token weights (24,)) of one sample: the cached TransOCR prior of LR row ``row`` with
    its confidences, the ground truth of ``line`` (weight 1 on characters, 0 on pads, as TOLANet's 'gt'
    prior), or the empty text ('empty': all pads, weight 0, TOLANet's 'null' prior)."""
    if kind == 'predicted':
        return torch.from_numpy(cache.prior_tokens[row]), torch.from_numpy(cache.prior_confidences[row])
    if kind == 'gt':
        tokens = torch.from_numpy(pool.idm_tokens[line])
        return tokens, (tokens != IDM_PAD).float()
    return torch.full((IDM_MAX_LEN, ), IDM_PAD, dtype=torch.long), torch.zeros(IDM_MAX_LEN)


def train_idm(idm, mom, cache: LatentCache, pool: LinePool, iterations: int, batch_size: int, lr: float,
              one_step_fraction: float = 0.5, x0_weight: float = 1.0, text_probs: Optional[Dict] = None,
              warmup: int = 200, seed: int = 0, log: Log = print, log_every: int = 50, run: Optional[StageRun] = None,
              one_step_path: bool = False) -> Dict[str, float]:
    """DiffTSR's objective for the IDM and the MoM text encoder (see the module docstring).

    The first round(batch_size · one_step_fraction) samples of a batch are at t = 999 with
    z_t = √ᾱ z_LR + √(1-ᾱ) ε (TOLA's Algorithm 1) and loss x0_weight · L1(ẑ0, z0); the others at t ~ U{0..999}
    with z_t = q_sample(z0) (diffusers' DDPM add_noise) and loss L1(ε̂, ε). z0 = 0.18215 · mode(VAE(HR));
    z_LR = mode(VAE(LR)), unscaled, as DiffTSR feeds it. ``text_probs``: probabilities of the text sources
    {predicted, gt, empty}. ``one_step_path``: the IDM carries the exact t = 999 path of ``one_step_path.py`` (written
    unless it holds it already, kept fixed after every step); it trains at t = 999 only (one_step_fraction 1)."""
    if one_step_path and one_step_fraction != 1:
        raise ValueError(f'one_step_path: the path is exact at t = 999 only, so the IDM trains there only '
                         f'(one_step_fraction 1), got one_step_fraction {one_step_fraction}')
    probs = dict(text_probs or {'predicted': 0.5, 'gt': 0.4, 'empty': 0.1})
    unknown = sorted(set(probs) - set(TEXT_SOURCES))
    if unknown or not math.isclose(sum(probs.values()), 1.0, abs_tol=1e-6):
        raise ValueError(f'text_probs must give probabilities of {TEXT_SOURCES} summing to 1, got {probs}')
    if probs.get('predicted', 0) > 0 and cache.prior_tokens is None:
        raise ValueError("train_idm: text_probs uses 'predicted' priors but the latent cache has none "
                         '(build it with a TransOCR)')
    run = run or StageRun()
    device = run.device
    rng = np.random.default_rng(seed + run.start)
    generator = torch.Generator(device).manual_seed(seed + run.start)
    scheduler_ddpm = make_ldm_scheduler('ddpm')
    alpha_bar = scheduler_ddpm.alphas_cumprod
    last_t = NUM_TRAIN_TIMESTEPS - 1
    s0, s1 = float(alpha_bar[last_t].double().sqrt()), float((1 - alpha_bar[last_t].double()).sqrt())
    if one_step_path and graft(idm):
        log('idm: the exact t = 999 path written (ẑ0 = s·z_LR before training)')
    fixed = FixedPath(idm) if one_step_path else None
    params = list(idm.parameters()) + list(mom.text_encoder.parameters())
    optimizer, scheduler = _optimizer(params, lr, iterations, warmup, weight_decay=0.01, start=run.start)
    progress = Progress('idm', iterations, log_every, log, run.start)
    n_one = int(round(batch_size * one_step_fraction))
    kinds, weights = list(probs), np.array(list(probs.values()))
    n, k_deg = pool.num_lines, pool.degradations
    idm.train()
    mom.train()
    it = run.start
    while it < iterations and not run.stop():
        iterations, resized = _resized(run, it, iterations, optimizer, warmup, progress)
        scheduler = resized or scheduler
        lines = rng.integers(n, size=batch_size)
        rows = rng.integers(k_deg, size=batch_size) * n + lines
        z0 = LATENT_SCALE * torch.from_numpy(np.stack([cache.z_hr[i] for i in lines])).to(device)
        z_lr = torch.from_numpy(np.stack([cache.z_lr[r] for r in rows])).to(device)
        texts = [
            text_condition(kinds[rng.choice(len(kinds), p=weights)], cache, pool, r, i) for r, i in zip(rows, lines)
        ]
        tokens = torch.stack([t for t, _ in texts]).to(device)
        token_weights = torch.stack([w for _, w in texts]).to(device)
        eps = torch.randn(z0.shape, generator=generator, device=device)
        t = torch.from_numpy(rng.integers(NUM_TRAIN_TIMESTEPS, size=batch_size)).to(device)
        t[:n_one] = last_t
        z_t = scheduler_ddpm.add_noise(z0, eps, t)
        z_t[:n_one] = s0 * z_lr[:n_one] + s1 * eps[:n_one]
        context = mom.encode_text(tokens, token_weights)
        eps_hat = idm(torch.cat([z_t, z_lr], 1), t, context)
        losses = {}
        loss = 0.0
        if n_one:
            z0_hat = (z_t[:n_one] - s1 * eps_hat[:n_one]) / s0
            losses['x0_t999'] = (z0_hat - z0[:n_one]).abs().mean()
            loss = loss + x0_weight * losses['x0_t999']
        if n_one < batch_size:
            losses['eps'] = (eps_hat[n_one:] - eps[n_one:]).abs().mean()
            loss = loss + losses['eps']
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        if fixed is not None:
            fixed.restore()
        scheduler.step()
        progress.update(it, scheduler.get_last_lr()[0], **{k: v.item() for k, v in losses.items()})
        it += 1
    idm.eval()
    mom.eval()
    return _finish(progress, it)
