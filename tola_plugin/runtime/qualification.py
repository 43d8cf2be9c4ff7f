"""Qualification: a path that we did not write (an OpenVINO stage in a precision, torch bf16/fp16 on a CPU, bf16/fp16
on CUDA) serves only after it has shown, on this machine, that it computes what the plain fp32 torch route computes,
judged where TOLA's one step amplifies its error.

The probe is a rendered text line (``probe_image``: the package's ``line_1x4.png``, "Text2025", rendered and
degraded x4 as the training lines, resized to 64x256: a quarter of a 128x512 canvas) through the real model: the
fp32 torch route runs it here and records each stage's inputs and output and the route's one-step latent ẑ0 and
image (``record_reference``). The candidate then shows two things:

- **its stages** (guards against a crash, NaN or garbage): each stage run in the candidate's child (the OpenVINO
  worker that would then serve, or ``torch_backend.py``'s) on the reference's stage inputs: finite and within its own
  measured relative RMS error (``STAGE_BOUNDS``, per stage and precision, ``check_output``); a path that runs the text
  prior's stages (OpenVINO) also reads the probe's text through them (``TEXT_PRIOR``: ids equal to the torch route's,
  confidences within ``PRIOR_BOUND``; the prior runs in fp32 on every path);
- **its route** (``ROUTE``): the candidate's whole forward on the probe (``record_route``: its ε̂ through Algorithm
  1's fp32 arithmetic, ẑ0 = (z_t - √(1-ᾱ) ε̂) / √ᾱ, the LRC, the decoder), against the fp32 route's: mean |Δẑ0| at most
  ``Z0_BOUND`` of the latent's own size mean |z_LR|, and the image's RMS error against the fp32 image at most
  ``IMAGE_RMS_BOUND`` (a PSNR of 41 dB; ``route_errors``). At t = 999 ẑ0 carries ε̂'s error x 101.6: this is where a low
  precision in the IDM shows, whatever the model does with ẑ0 afterwards. The bounds are derived in docs/inference.md,
  "Precision".

The verdict (qualified or not, why, the errors) is cached in ``qualification.json`` beside the speed decision, keyed
by the device (CPU model and flags, or the GPU), the runtime versions, the forced kernels, the backend, each stage's
precision and the model's digest; it is written atomically and read by
every later run. ``--requalify`` (``forget``) drops this machine's verdicts of a model.
"""
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import torch

from tola_plugin.archs.precision import StageDtypes, dtype_name
from tola_plugin.assets.rendered_samples import samples_dir
from tola_plugin.data.image_io import read_image_file
from tola_plugin.runtime.image_stages import IMAGE_STAGES, run_torch_stage, stage_modules
from tola_plugin.runtime.machine import device_identity, package_version
from tola_plugin.runtime.plan import BackendPrecision
from tola_plugin.runtime.routed_stages import RoutedStages
from tola_plugin.runtime.text_prior_stages import prior_stage_modules
from tola_plugin.utils.user_cache import JsonCache

#: 2: the text prior in an OpenVINO path's probe; 3: the prior always fp32; 4: a precision per stage, the route's ẑ0
#: and image judged, a rendered line as the probe
FORMAT = 'tola_plugin.qualification/4'
#: a quarter of a 128x512 canvas: every layer and weight of the model in a quarter of the time; what depends on the
#: shape alone is caught by the output check while serving
PROBE_SHAPE = (1, 3, 64, 256)
PROBE_LINE = 'line_1x4.png'  # of tola_plugin/assets/rendered_samples: "Text2025", rendered, bicubic x4 down to 32x128
ROUTE = 'route'  # the candidate's whole forward on the probe: {'z_lr', 'z0', 'image'}
#: largest mean |Δẑ0| / mean |z_LR| of a route against the fp32 route (docs/inference.md, "Precision": the ẑ0 error
#: at which the image of a model whose output follows ẑ0 reaches IMAGE_RMS_BOUND)
Z0_BOUND = 0.03
#: largest RMS error (images in [0, 1]) of a route's image against the fp32 route's: 10^(-41/20), a PSNR of 41 dB,
#: an independent error that costs at most 0.1 dB on a result of the paper's 24.8 dB (docs/inference.md,
#: "Precision")
IMAGE_RMS_BOUND = 0.0089
FP32, BF16, FP16 = torch.float32, torch.bfloat16, torch.float16
#: the guards: largest relative RMS error (||candidate - reference|| / ||reference||) of each stage's output on the
#: reference's inputs, per precision: fp32 100x the largest measured (2.9e-6), bf16 and fp16 10x the largest measured
#: on the probe (the tiny test model, the demo backbone, a full-size random model; torch and OpenVINO: bf16 VAE
#: encoder 0.022, IDM 0.033, VAE decoder 0.0089; fp16 0.0032, 0.0016, 0.0011; docs/inference.md, "Qualification").
#: They catch a crash, NaN or a wrong kernel; whether a precision is precise enough is the route's bounds' business
#: (the IDM's 0.033 in bf16 moves ẑ0 by 400 % on the tiny model).
STAGE_BOUNDS = {
    'vae_encoder': {FP32: 3e-4, BF16: 0.22, FP16: 0.032},
    'idm': {FP32: 3e-4, BF16: 0.33, FP16: 0.016},
    'vae_decoder': {FP32: 3e-4, BF16: 0.089, FP16: 0.011},
    'text_encoder': {FP32: 3e-4},
}
TEXT_PRIOR = 'text_prior'  # the probe's text read through the prior's stages: (ids (B, S), confidences (B, S))
#: what a path is checked on: the image stages and the route (torch: the text prior runs in fp32 there whatever the
#: plan), and on OpenVINO, which runs the text prior's stages too, the encoder's output and the greedy decode through
#: them
TORCH_CHECKS = IMAGE_STAGES + (ROUTE, )
PRIOR_CHECKS = ('text_encoder', TEXT_PRIOR)
OPENVINO_CHECKS = PRIOR_CHECKS + TORCH_CHECKS
#: largest relative RMS error of the text prior's confidences (its ids must be equal), which runs in fp32 on every
#: path: 100x the largest measured (docs/inference.md, "Qualification": OpenVINO fp32 vs torch fp32, 3.3e-6 on the
#: demo model's 32 lines)
PRIOR_BOUND = 3.3e-4

#: the verdict cache holds a few hundred bytes per verdict; a larger file (damaged, or grown by hand) is not read
#: (it cost 17 s and 1.4 GB at every start at 200 MB): taken as no cache, and replaced by the next verdict
MAX_CACHE_BYTES = 1 << 20
CACHE = JsonCache('qualification.json', FORMAT, MAX_CACHE_BYTES)  # verdicts: this process's and the machine's


@dataclass
class Verdict:
    """Whether ``path`` qualified on this machine, and why (``reason``: the failure, or how it qualified)."""
    qualified: bool
    reason: str
    errors: Dict[str, float] = field(default_factory=dict)
    source: str = 'measured'  # 'measured' now, or 'cache'
    seconds: float = 0.0

    def to_dict(self) -> Dict:
        return {
            'qualified': self.qualified, 'reason': self.reason, 'errors': self.errors, 'seconds': self.seconds,
            'measured': time.strftime('%Y-%m-%d %H:%M:%S')
        }


def probe_image(shape=PROBE_SHAPE) -> torch.Tensor:
    """The probe: the rendered line ``PROBE_LINE`` resized (bicubic) to ``shape`` (B copies), RGB in [0, 1]."""
    import cv2
    b, c, h, w = shape
    rgb = read_image_file(os.path.join(samples_dir(), PROBE_LINE), order='RGB')
    line = cv2.resize(rgb, (w, h), interpolation=cv2.INTER_CUBIC)
    return torch.from_numpy(line).permute(2, 0, 1).float().div(255).expand(b, c, h, w).contiguous()


def record_route(net, device: torch.device) -> Dict[str, torch.Tensor]:
    """The inference TOLANet ``net``'s whole forward on the probe as it runs now (its stage runner; noise seed 0):
    {'z_lr', 'z0', 'image'}, CPU tensors."""
    with torch.inference_mode():
        out = net(probe_image().to(device), noise_seeds=[0], return_intermediates=True)
    return {key: out[key].detach().float().cpu() for key in ('z_lr', 'z0', 'image')}


def record_reference(net, device: torch.device) -> Dict[str, Tuple]:
    """The fp32 torch route of the inference TOLANet ``net`` (its torch IDM and VAE, through a recording stage runner
    installed for the while) on the probe: stage -> (inputs, output), CPU tensors (the stages' inputs are what
    Algorithm 1 feeds them); ROUTE -> (the factor √(1-ᾱ)/√ᾱ that carries ε̂'s error into ẑ0, ``record_route``'s
    intermediates)."""
    modules = stage_modules(net.idm, net.vae)
    cases = {}

    def runner(stage, *tensors):
        out = run_torch_stage(modules[stage], tensors, FP32, device)
        cases[stage] = ([t.detach().cpu() for t in tensors], out)
        return out.to(device)

    recorder = RoutedStages(runner, StageDtypes.uniform(FP32), 'the fp32 torch route (recorded)', text=False)
    image = probe_image().to(device)
    with net.running(recorder), torch.inference_mode():
        factor = float(net.sqrt_one_minus_alpha_bar / net.sqrt_alpha_bar)
        cases[ROUTE] = (factor, record_route(net, device))
        network_input = net.transocr.preprocess(image)
        memory = prior_stage_modules(net.transocr)['text_encoder'](network_input)
        cases['text_encoder'] = ([network_input.cpu()], memory.float().cpu())
        cases[TEXT_PRIOR] = ([image.cpu()], tuple(t.cpu() for t in net.decode_text(image)))
    return cases


def relative_rms(candidate: torch.Tensor, reference: torch.Tensor) -> float:
    """||candidate - reference|| / ||reference|| in float64; inf when the candidate is not finite or misshaped."""
    if tuple(candidate.shape) != tuple(reference.shape) or not bool(torch.isfinite(candidate).all()):
        return float('inf')
    ref = reference.double()
    return float((candidate.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def rms_error(candidate: torch.Tensor, reference: torch.Tensor) -> float:
    """RMS of ``candidate - reference`` in float64; inf when the candidate is not finite or misshaped."""
    if tuple(candidate.shape) != tuple(reference.shape) or not bool(torch.isfinite(candidate).all()):
        return float('inf')
    return float(((candidate.double() - reference.double())**2).mean().sqrt())


def route_errors(candidate: Dict[str, torch.Tensor], reference: Dict[str, torch.Tensor]) -> Dict[str, float]:
    """{'z0': mean |Δẑ0| / mean |z_LR|, 'image_rms': the image's RMS error} of a route's intermediates
    (``record_route``) against the fp32 route's (inf when not finite)."""
    if tuple(candidate['z0'].shape) != tuple(reference['z0'].shape) or not bool(torch.isfinite(candidate['z0']).all()):
        z0 = float('inf')
    else:
        z0 = float((candidate['z0'].double() - reference['z0'].double()).abs().mean() /
                   reference['z_lr'].double().abs().mean().clamp_min(1e-30))
    return {'z0': z0, 'image_rms': rms_error(candidate['image'], reference['image'])}


def idm_share(candidate_eps: torch.Tensor, reference: Dict) -> float:
    """The IDM's own part of the route's ẑ0 error: its ε̂ on the reference's inputs carried into ẑ0 (x √(1-ᾱ)/√ᾱ),
    as a fraction of mean |z_LR| (exact: ẑ0 = (z_t - √(1-ᾱ) ε̂) / √ᾱ with the reference's z_t)."""
    factor, route = reference[ROUTE]
    delta = (candidate_eps.double() - reference['idm'][1].double()).abs().mean()
    return float(factor * delta / route['z_lr'].double().abs().mean().clamp_min(1e-30))


def check_output(check: str, candidate, reference, dtype: torch.dtype) -> Tuple[object, str]:
    """(the error shown in the verdict, what is wrong or '' when within bound) of the candidate's output of ``check``
    (a stage; TEXT_PRIOR: (ids, confidences); ROUTE: ``record_route``'s intermediates) against the reference's, the
    stage computed in ``dtype`` (the text prior's checks: fp32, whatever the path's)."""
    if check in PRIOR_CHECKS:
        dtype = FP32
    if check == ROUTE:
        errors = route_errors(candidate, reference)
        if not (np.isfinite(errors['z0']) and np.isfinite(errors['image_rms'])):
            return 'non-finite', 'non-finite or misshaped one-step latent or image'
        bad = []
        if errors['z0'] > Z0_BOUND:
            bad.append(f'moves ẑ0 by {errors["z0"]:.2%} of |z_LR| (bound {Z0_BOUND:.0%})')
        if errors['image_rms'] > IMAGE_RMS_BOUND:
            bad.append(f'its image is {errors["image_rms"]:.2g} RMS from the fp32 image (bound {IMAGE_RMS_BOUND:g}: '
                       '41 dB)')
        return errors, ' and '.join(bad)
    if check == TEXT_PRIOR:
        (ids, probs), (ref_ids, ref_probs) = candidate, reference
        if not bool(torch.isfinite(probs).all()):
            return 'non-finite', 'non-finite confidences'
        if tuple(ids.shape) != tuple(ref_ids.shape) or not torch.equal(ids, ref_ids):
            steps = min(ids.shape[1], ref_ids.shape[1])
            differ = (ids[:, :steps] != ref_ids[:, :steps]).any(0).nonzero()
            first = int(differ[0]) if len(differ) else steps
            return 'different ids', (f'other ids than the fp32 torch route from step {first} ({ids.shape[1]} steps '
                                     f'read, {ref_ids.shape[1]} there)')
        error, bound, what = relative_rms(probs, ref_probs), PRIOR_BOUND, 'confidences'
    else:
        error, bound, what = relative_rms(candidate, reference), STAGE_BOUNDS[check][dtype], 'output'
    if not np.isfinite(error):
        return 'non-finite', f'non-finite or misshaped {what}'
    return error, ('' if error <= bound else f'relative error of the {what} {error:.2g} > {bound:g}')


def compare(reference: Dict, outputs: Dict, path: BackendPrecision, checks=TORCH_CHECKS) -> Verdict:
    """The verdict of a candidate's ``outputs`` (stage -> output; TEXT_PRIOR -> (ids, confidences); ROUTE -> its
    route's intermediates, None when it could not run) against the reference, on ``checks``, each stage computed in
    ``path``'s precision (for OpenVINO the precisions it compiled)."""
    dtypes = path.dtypes
    errors, bad = {}, []
    for check in checks:
        if check == ROUTE and outputs.get(ROUTE) is None:
            continue  # a stage failed before the route could run: that stage is the reason
        errors[check], why = check_output(check, outputs[check], reference[check][1], dtypes.get(check, FP32))
        if why:
            bad.append(f'{check}: {why}')
    if 'idm' in checks and isinstance(errors.get('idm'), float):
        errors['idm_z0'] = idm_share(outputs['idm'], reference)
    if bad:
        if isinstance(errors.get(ROUTE), dict) and 'idm_z0' in errors and dtypes['idm'] != FP32:
            bad.append(f'the IDM in {dtype_name(dtypes["idm"])} alone moves ẑ0 by {errors["idm_z0"]:.2%}')
        return Verdict(False, f'wrong results ({", ".join(bad)})', errors)
    stages = [errors[c] for c in checks if c not in PRIOR_CHECKS + (ROUTE, )]
    route = errors[ROUTE]
    how = (f'ẑ0 within {route["z0"]:.2%} of |z_LR| (bound {Z0_BOUND:.0%}), the image within {route["image_rms"]:.2g} '
           f'RMS of the fp32 image (bound {IMAGE_RMS_BOUND:g}: 41 dB); stages within {max(stages):.2g} relative')
    if TEXT_PRIOR in checks:
        how += (f'; text prior in fp32: encoder within {errors["text_encoder"]:.2g} (bound '
                f'{STAGE_BOUNDS["text_encoder"][FP32]:g}), the same ids, confidences within {errors[TEXT_PRIOR]:.2g} '
                f'(bound {PRIOR_BOUND:g})')
    return Verdict(True, f'matches the fp32 torch route ({how})', errors)


# ------------------------------------------------------------------------------------------------------ verdicts
def verdict_key(device: torch.device, path: BackendPrecision, digest: str) -> str:
    """The cache key of a verdict on ``path`` (module docstring)."""
    runtime = f'openvino {package_version("openvino")}' if path.backend == 'openvino' else 'torch'
    return f'{device_identity(device)} | {runtime}: {path.signature} | model {digest[:16]} | {FORMAT}'


def cached_verdict(key: str) -> Optional[Verdict]:
    """The verdict cached for ``key`` (this process's memory first), or None."""
    entry = CACHE.get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get('qualified'), bool):
        return None
    return Verdict(entry['qualified'], str(entry.get('reason', '')), dict(entry.get('errors') or {}), 'cache',
                   float(entry.get('seconds') or 0.0))


def store_verdict(key: str, verdict: Verdict) -> bool:
    """Cache ``verdict`` (atomically; this process's memory as well). False when the cache file cannot be written
    (the verdict then holds for this process only)."""
    return CACHE.put(key, verdict.to_dict())


def forget(digest: Optional[str] = None) -> int:
    """Drop the cached verdicts of this machine (of the model ``digest`` only, if given); returns how many."""
    mark = f'| model {digest[:16]} |' if digest else ''
    drop = [k for k in set(CACHE.entries()) | set(CACHE.memory) if mark in k]
    CACHE.drop(drop)
    return len(drop)


def qualify(key: str, run_candidate: Callable[[], Dict], reference: Callable[[], Dict], path: BackendPrecision,
            checks=TORCH_CHECKS) -> Verdict:
    """The verdict of ``key``: cached, else measured now: ``run_candidate()`` (the candidate's outputs, from its
    child, and its route; a ChildFailure or RuntimeError is the verdict's reason) against ``reference()`` on
    ``checks``, each stage judged in ``path``'s precision (as it computes), then cached; a child killed from outside
    (``ChildFailure.killed_from_outside``) fails the path for this run only."""
    cached = cached_verdict(key)
    if cached is not None:
        return cached
    start = time.perf_counter()
    try:
        verdict = compare(reference(), run_candidate(), path, checks)
    except RuntimeError as err:
        if getattr(err, 'killed_from_outside', False):  # a ChildFailure by SIGKILL, SIGTERM, ...: says nothing
            return Verdict(False, f'{err} (killed from outside while qualifying; not remembered)')
        verdict = Verdict(False, str(err))
    verdict.seconds = round(time.perf_counter() - start, 2)
    store_verdict(key, verdict)
    return verdict
