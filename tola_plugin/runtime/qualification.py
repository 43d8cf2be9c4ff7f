"""Qualification: a path that we did not write (an OpenVINO stage in a precision, torch bf16/fp16 on a CPU, bf16/fp16
on CUDA) serves only after it has computed, in a child process on this machine, what the plain fp32 torch route
computes.

The probe is one 64x256 input (``probe_image``) through the real model: the fp32 torch route runs it here and
records each stage's inputs and output (``record_reference``); the candidate runs the same stage inputs in its child
(the OpenVINO worker that would then serve, or ``torch_probe.py``) and its outputs must be finite and within
``BOUNDS`` of the reference (relative RMS error per stage, ``compare``). A path that runs the text prior's stages
(OpenVINO) also reads the probe's text through them (``TEXT_PRIOR``: the greedy decode, as ``TOLANet.decode_text``):
its ids must equal the torch route's and its confidences be within ``PRIOR_BOUND`` (the prior runs in fp32 on every
path). The verdict (qualified or not, why, the errors) is cached in ``qualification.json`` beside the bf16
decision, keyed by the device (CPU model and flags, or the GPU), the runtime versions, the forced kernels, the
backend (with OpenVINO's streams where not 1), the precision and the model's digest; it is written atomically and
read by every later run. ``--requalify`` (``forget``) drops this machine's verdicts of a model.
"""
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from tola_plugin.archs.precision import dtype_name
from tola_plugin.runtime.machine import device_identity, package_version
from tola_plugin.runtime.plan import RuntimePlan
from tola_plugin.runtime.stages import IMAGE_STAGES, RoutedIDM, RoutedVAE, run_torch_stage, stage_modules
from tola_plugin.runtime.text_prior_stages import prior_stage_modules
from tola_plugin.utils.atomic_files import read_json_dict, write_json
from tola_plugin.utils.user_cache import cache_path

FORMAT = 'tola_plugin.qualification/3'  # 2: the text prior in an OpenVINO path's probe; 3: the prior always fp32
CACHE_FILE = 'qualification.json'
#: a quarter of a 128x512 canvas: every layer and weight of the model in a quarter of the time; what depends on the
#: shape alone is caught by the output check while serving
PROBE_SHAPE = (1, 3, 64, 256)
#: largest relative RMS error (||candidate - reference|| / ||reference|| per stage output) a precision may show: 100x
#: the largest measured on the tiny test model and the demo model (OpenVINO and torch, docs/inference.md
#: "Qualification": fp32 2.9e-6, bf16 3.5e-2, fp16 1.7e-3), capped at 0.35: a third of the error of an all-zero
#: output, which a wrong kernel reaches (bf16's 100x would be 3.5 and catch nothing)
BOUNDS = {torch.float32: 3e-4, torch.bfloat16: 0.35, torch.float16: 0.17}
TEXT_PRIOR = 'text_prior'  # the probe's text read through the prior's stages: (ids (B, S), confidences (B, S))
#: what a path is checked on: the image stages (torch: the text prior runs in fp32 there whatever the plan), and
#: on OpenVINO, which runs the text prior's stages too, the encoder's output and the greedy decode through them
TORCH_CHECKS = IMAGE_STAGES
PRIOR_CHECKS = ('text_encoder', TEXT_PRIOR)
OPENVINO_CHECKS = PRIOR_CHECKS + IMAGE_STAGES
#: largest relative RMS error of the text prior's confidences (its ids must be equal), which runs in fp32 on every
#: path: 100x the largest measured (docs/inference.md, "Qualification": OpenVINO fp32 vs torch fp32, 3.3e-6 on the
#: demo model's 32 lines)
PRIOR_BOUND = 3.3e-4

#: the verdict cache holds a few hundred bytes per verdict; a larger file (damaged, or grown by hand) is not read
#: (it cost 17 s and 1.4 GB at every start at 200 MB): taken as no cache, and replaced by the next verdict
MAX_CACHE_BYTES = 1 << 20
_memory: Dict[str, Dict] = {}  # verdicts of this process when the cache file cannot be written


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
    """A deterministic text-like probe in [0, 1]: dark strokes (smoothed random blobs) on a light, shaded ground."""
    gen = torch.Generator().manual_seed(20261125)
    b, c, h, w = shape
    blobs = torch.nn.functional.avg_pool2d(torch.rand(b, 1, h, w, generator=gen), 5, 1, 2)
    strokes = (blobs > 0.55).float()
    ground = 0.85 + 0.1 * torch.linspace(0, 1, w).view(1, 1, 1, w) * torch.rand(b, c, 1, 1, generator=gen)
    return (ground * (1 - 0.8 * strokes)).expand(b, c, h, w).clamp(0, 1).contiguous()


def record_reference(net, device: torch.device) -> Dict[str, Tuple[List[torch.Tensor], torch.Tensor]]:
    """The fp32 torch route of the inference TOLANet ``net`` (its torch IDM and VAE) on the probe: stage ->
    (inputs, output), CPU tensors. The stages' inputs are what Algorithm 1 feeds them."""
    modules = stage_modules(net.idm, net.vae)
    cases = {}

    def runner(stage, *tensors):
        out = run_torch_stage(modules[stage], stage, tensors, torch.float32, device)
        cases[stage] = ([t.detach().cpu() for t in tensors], out)
        return out.to(device)

    idm, vae, plan, recognizer = net.idm, net.vae, net.plan, net.text_recognizer
    net.idm, net.vae, net.plan = RoutedIDM(runner), RoutedVAE(runner, vae.config), RuntimePlan.reference(device)
    net.text_recognizer = None
    image = probe_image().to(device)
    try:
        with torch.inference_mode():
            net(image, noise_seeds=[0])
            network_input = net.transocr.preprocess(image)
            memory = prior_stage_modules(net.transocr)['text_encoder'](network_input)
            cases['text_encoder'] = ([network_input.cpu()], memory.float().cpu())
            cases[TEXT_PRIOR] = ([image.cpu()], tuple(t.cpu() for t in net.decode_text(image)))
    finally:
        net.idm, net.vae, net.plan, net.text_recognizer = idm, vae, plan, recognizer
    return cases


def relative_rms(candidate: torch.Tensor, reference: torch.Tensor) -> float:
    """||candidate - reference|| / ||reference|| in float64; inf when the candidate is not finite or misshaped."""
    if tuple(candidate.shape) != tuple(reference.shape) or not bool(torch.isfinite(candidate).all()):
        return float('inf')
    ref = reference.double()
    return float((candidate.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def check_output(check: str, candidate, reference, dtype: torch.dtype) -> Tuple[object, str]:
    """(the error shown in the verdict, what is wrong or '' when within bound) of the candidate's output of ``check``
    (a stage, or TEXT_PRIOR: (ids, confidences)) against the reference's, in compute dtype ``dtype`` (the text
    prior's checks: fp32, whatever the path's)."""
    if check in PRIOR_CHECKS:
        dtype = torch.float32
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
        error, bound, what = relative_rms(candidate, reference), BOUNDS[dtype], 'output'
    if not np.isfinite(error):
        return 'non-finite', f'non-finite or misshaped {what}'
    return error, ('' if error <= bound else f'relative error of the {what} {error:.2g} > {bound:g}')


def compare(reference: Dict, outputs: Dict, dtype: torch.dtype, checks=TORCH_CHECKS) -> Verdict:
    """The verdict of a candidate's ``outputs`` (stage -> output; TEXT_PRIOR -> (ids, confidences)) against the
    reference, on ``checks``, in compute dtype ``dtype``."""
    errors, bad = {}, []
    for check in checks:
        errors[check], why = check_output(check, outputs[check], reference[check][1], dtype)
        if why:
            bad.append(f'{check}: {why}')
    if bad:
        return Verdict(False, f'wrong results ({", ".join(bad)})', errors)
    stages = [errors[c] for c in checks if c not in PRIOR_CHECKS]
    how = f'largest relative error {max(stages):.2g}, bound {BOUNDS[dtype]:g}'
    if TEXT_PRIOR in checks:
        how += (f'; text prior in fp32: encoder within {errors["text_encoder"]:.2g} (bound '
                f'{BOUNDS[torch.float32]:g}), the same ids, confidences within {errors[TEXT_PRIOR]:.2g} (bound '
                f'{PRIOR_BOUND:g})')
    return Verdict(True, f'matches the fp32 torch route ({how})', errors)


def save_cases(reference: Dict, path: str) -> None:
    """The reference's stage inputs as an .npz (``<stage>.<i>``) for a child."""
    arrays = {f'{stage}.{i}': t.numpy() for stage, (inputs, _) in reference.items() for i, t in enumerate(inputs)}
    np.savez(path, **arrays)


# ------------------------------------------------------------------------------------------------------ verdicts
def verdict_key(device: torch.device, backend: str, dtype: torch.dtype, digest: str, streams=1) -> str:
    """The cache key of a verdict (module docstring); OpenVINO's throughput streams (``streams`` other than 1: another
    compiled configuration of the same IR) are a path of their own."""
    runtime = f'openvino {package_version("openvino")}' if backend == 'openvino' else 'torch'
    if backend == 'openvino' and streams != 1:
        runtime += f' streams {streams}'
    return f'{device_identity(device)} | {runtime} {dtype_name(dtype)} | model {digest[:16]} | {FORMAT}'


def cache_file() -> str:
    return cache_path(CACHE_FILE)


def _entries() -> Dict:
    try:
        data = read_json_dict(cache_file(), MAX_CACHE_BYTES)
    except OSError:  # the cache folder cannot be made: this process's memory only
        data = None
    entries = data.get('entries') if data and data.get('format') == FORMAT else None
    return dict(entries) if isinstance(entries, dict) else {}


def cached_verdict(key: str) -> Optional[Verdict]:
    """The verdict cached for ``key`` (this process's memory first), or None."""
    entry = _memory.get(key) or _entries().get(key)
    if not isinstance(entry, dict) or not isinstance(entry.get('qualified'), bool):
        return None
    return Verdict(entry['qualified'], str(entry.get('reason', '')), dict(entry.get('errors') or {}), 'cache',
                   float(entry.get('seconds') or 0.0))


def store_verdict(key: str, verdict: Verdict) -> bool:
    """Cache ``verdict`` (atomically; this process's memory as well). False when the cache file cannot be written
    (the verdict then holds for this process only)."""
    _memory[key] = verdict.to_dict()
    entries = _entries()
    entries[key] = verdict.to_dict()
    try:
        write_json(cache_file(), {'format': FORMAT, 'entries': entries})
    except OSError:
        return False
    return True


def forget(digest: Optional[str] = None) -> int:
    """Drop the cached verdicts of this machine (of the model ``digest`` only, if given); returns how many."""
    mark = f'| model {digest[:16]} |' if digest else ''
    drop = [k for k in set(_entries()) | set(_memory) if mark in k]
    for key in drop:
        _memory.pop(key, None)
    entries = {k: v for k, v in _entries().items() if k not in drop}
    try:
        write_json(cache_file(), {'format': FORMAT, 'entries': entries})
    except OSError:
        pass
    return len(drop)


def qualify(key: str, run_candidate: Callable[[], Dict], reference: Callable[[], Dict], dtype: torch.dtype,
            checks=TORCH_CHECKS) -> Verdict:
    """The verdict of ``key``: cached, else measured now: ``run_candidate()`` (the candidate's outputs, from its
    child; a ChildFailure or RuntimeError is the verdict's reason) against ``reference()`` on ``checks``, then
    cached; a child killed from outside (``ChildFailure.killed_from_outside``) fails the path for this run only."""
    cached = cached_verdict(key)
    if cached is not None:
        return cached
    start = time.perf_counter()
    try:
        verdict = compare(reference(), run_candidate(), dtype, checks)
    except RuntimeError as err:
        if getattr(err, 'killed_from_outside', False):  # a ChildFailure by SIGKILL, SIGTERM, ...: says nothing
            return Verdict(False, f'{err} (killed from outside while qualifying; not remembered)')
        verdict = Verdict(False, str(err))
    verdict.seconds = round(time.perf_counter() - start, 2)
    store_verdict(key, verdict)
    return verdict


def scratch_file(suffix: str) -> str:
    """A private temporary file name (the caller removes it)."""
    handle, path = tempfile.mkstemp(suffix=suffix, prefix='tola-qualify-')
    os.close(handle)
    return path
