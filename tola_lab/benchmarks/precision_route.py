"""Where a low precision's error lands (docs/inference.md, "Precision"): each stage of Algorithm 1 in bf16 or fp16,
alone and all together, on torch and on OpenVINO, against the fp32 route on the same inputs and noise: the IDM's ε̂,
the one-step latent ẑ0 (which carries ε̂'s error x 101.6 at t = 999) and the image; and the speed of per-stage plans.

``frozen_demo_net`` is a model whose output follows ẑ0: the demo backbone's one-step route without LoRA and LRC, so
its image is the decoder of ẑ0 (the demo model's LRC learned to restore from z_LR and discards ẑ0, which would hide
the error). The tables are measured with ``unqualified`` (each path run as it is, OpenVINO
reporting the precision it compiled), on rendered lines (``benchmarks/inference_inputs.rendered_lines``) or the
qualification's probe.
"""
import contextlib
import os
import statistics
import time
import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from tola_lab.benchmarks.inference_inputs import rendered_lines
from tola_plugin.archs.precision import STAGE_NAMES, dtype_name, precision_dtype
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.metrics.image_metrics import float_psnr
from tola_plugin.runtime import qualification
from tola_plugin.runtime.plan import FP32, BackendPrecision
from tola_plugin.runtime.serving import Runtime
from tola_plugin.utils import procfs

TABLE_BACKENDS = ('torch', 'openvino')  # the engines the precision table measures (not runtime.plan.BACKENDS' choices)
LOW = (torch.bfloat16, torch.float16)
ALL = 'all'  # the row of a precision on every stage (``BackendPrecision.uniform``: the VAE decoder fp32 under fp16)


def frozen_demo_net() -> TOLANet:
    """The demo backbone's frozen one-step route (``backbone_init: demo``, no LoRA, no LRC), inference-only: its
    image is the VAE decoder of ẑ0."""
    return TOLANet(backbone_init='demo', idm_lora=False, vae_lora=False, lrc=None).prepare_for_inference()


def route(net, lq: torch.Tensor) -> Dict[str, torch.Tensor]:
    """The network's forward as it runs now on ``lq`` (per-image noise seeds 0..B-1): ε̂, z_LR, ẑ0 and the image."""
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter('ignore')  # an explicit low precision where it is emulated warns
        out = net(lq, noise_seeds=list(range(lq.shape[0])), return_intermediates=True)
    return {key: out[key].float().cpu() for key in ('eps_hat', 'z_lr', 'z0', 'image')}


def errors(candidate: Dict[str, torch.Tensor], reference: Dict[str, torch.Tensor],
           z_hr: Optional[torch.Tensor] = None) -> Dict[str, float]:
    """A route's errors against the fp32 route (mean absolute values, unscaled latents): 'eps' |Δε̂|, 'z0' |Δẑ0|,
    'z0_of_z_lr' |Δẑ0| / |z_LR| (the qualification's measure, ``qualification.route_errors``), 'image_db' the image's
    PSNR against the fp32 image (``metrics.image_metrics.float_psnr``; the qualification bounds its RMS error); with
    ``z_hr`` (the HR lines' latents) also 'z0_of_lr_to_hr' |Δẑ0| / |z_LR - z_HR|."""
    judged = qualification.route_errors(candidate, reference)
    out = {
        'eps': float((candidate['eps_hat'] - reference['eps_hat']).abs().mean()), 'z0': float(
            (candidate['z0'] - reference['z0']).abs().mean()), 'z0_of_z_lr': judged['z0'],
        'image_db': float_psnr(candidate['image'], reference['image'])
    }
    if z_hr is not None:
        out['z0_of_lr_to_hr'] = out['z0'] / float((reference['z_lr'] - z_hr).abs().mean())
    return out


def stage_paths(backend: str, precisions: Sequence[torch.dtype] = LOW) -> List[BackendPrecision]:
    """Each stage alone in each precision (the others fp32), then each precision on every stage (``ALL``)."""
    fp32 = BackendPrecision.uniform(backend, FP32)
    return [fp32.replace(**{stage: dtype}) for dtype in precisions
            for stage in STAGE_NAMES] + [BackendPrecision.uniform(backend, dtype) for dtype in precisions]


def which_stage(path: BackendPrecision) -> str:
    """The stage a ``stage_paths`` path runs low, or ``ALL``."""
    low = [stage for stage, dtype in path.dtypes.items() if dtype != FP32]
    return low[0] if len(low) == 1 and path != BackendPrecision.uniform(path.backend, path.dtypes[low[0]]) else ALL


def error_table(net, lq: torch.Tensor, hr: Optional[torch.Tensor] = None, backends: Sequence[str] = TABLE_BACKENDS,
                precisions: Sequence[torch.dtype] = LOW, say=print) -> Dict:
    """The errors (``errors``) of every ``stage_paths`` path of each backend on ``lq`` against the fp32 torch route
    of the inference TOLANet ``net`` -> {'reference': sizes of the fp32 route's latents, 'rows': [{'backend',
    'precision', 'stage', 'computed' (the path as it computed: OpenVINO's compiled precisions), errors...}]}."""
    runtime = Runtime(net, 'cpu', 'torch', say=say)
    try:
        reference = route(net, lq)
        z_hr = None
        if hr is not None:
            with torch.inference_mode():
                z_hr = net.vae.encode(hr).latent_dist.mode().float()
        sizes = {'z_lr': float(reference['z_lr'].abs().mean()), 'z0': float(reference['z0'].abs().mean())}
        if z_hr is not None:
            sizes.update(
                z_hr=float(z_hr.abs().mean()), z_lr_to_hr=float((reference['z_lr'] - z_hr).abs().mean()),
                z0_to_hr=float((reference['z0'] - z_hr).abs().mean()))
        rows = []
        for backend in backends:
            for path in ([BackendPrecision.uniform(backend, FP32)] if backend != 'torch' else []) + stage_paths(
                    backend, precisions):
                try:
                    with unqualified(runtime, path) as (running, _):
                        out = route(net, lq)
                except RuntimeError as err:
                    say(f'{path.name}: not measured: {err}')
                    continue
                low = [d for d in path.dtypes.values() if d != FP32]
                row = dict(backend=backend, precision=dtype_name(low[0]) if low else 'fp32', stage=which_stage(path),
                           computed=running.precision, **errors(out, reference, z_hr))
                say(f"{path.name} (computed {running.precision}): |Δε̂| {row['eps']:.2e}, |Δẑ0| {row['z0']:.4f} = "
                    f"{row['z0_of_z_lr']:.2%} of |z_LR|, image {row['image_db']:.1f} dB")
                rows.append(row)
    finally:
        runtime.close()
    return {'lines': int(lq.shape[0]), 'shape': list(lq.shape[1:]), 'reference': sizes, 'rows': rows}


@contextlib.contextmanager
def unqualified(runtime: Runtime, path: BackendPrecision):
    """``runtime``'s network runs ``path`` for the block without qualifying it: what these tables measure, the errors
    of paths that do not qualify among them. Yields (the path as it computes, its backend), a backend of its own,
    closed after. An OpenVINO path that cannot start is a RuntimeError naming why."""
    backend = runtime.new_backends()[path.backend]
    try:
        runner = backend.start(path)
        runner.name += ' (not qualified: measured)'
        with runtime.net.running(runner):
            yield BackendPrecision(path.backend, runner.dtypes), backend
    finally:
        backend.close()


def cpu_seconds(backend) -> float:
    """CPU seconds this process and ``backend``'s OpenVINO worker (if it has one) have used (user + system): what a
    route costs on a machine shared with other work, where its wall time depends on the others' load."""
    used = time.process_time()
    worker = getattr(backend, 'worker', None)
    fields = procfs.stat_fields(worker.proc.pid) if worker is not None else None
    if fields is not None:
        used += (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')  # utime, stime
    return used


def plan_speeds(net, lq: torch.Tensor, paths: Sequence[BackendPrecision], repeats: int = 3,
                say=print) -> Dict[str, Dict]:
    """Seconds per line of the inference TOLANet ``net`` on ``lq`` with each path (``unqualified``), wall and
    CPU (``cpu_seconds``), the paths interleaved, a warm-up each, median of ``repeats``; and each path's route errors
    against fp32 torch -> {path name: {'computed', 'seconds', 'cpu_seconds', 'all_s', errors...}}."""
    runtime = Runtime(net, 'cpu', 'torch', say=say)
    times: Dict[str, List[Tuple[float, float]]] = {path.name: [] for path in paths}
    out: Dict[str, Dict] = {}
    try:
        reference = route(net, lq)
        for repeat in range(repeats + 1):
            for path in paths:
                with unqualified(runtime, path) as (running, backend):
                    route(net, lq[:1])  # the worker's first call compiles for the shape
                    start, cpu = time.perf_counter(), cpu_seconds(backend)
                    result = route(net, lq)
                    seconds = (time.perf_counter() - start) / lq.shape[0]
                    used = (cpu_seconds(backend) - cpu) / lq.shape[0]
                if repeat:
                    times[path.name].append((seconds, used))
                else:
                    out[path.name] = dict(computed=running.name, **errors(result, reference))
                say(f'{path.name} {"warm-up" if repeat == 0 else f"run {repeat}"}: {seconds:.2f} s per line, '
                    f'{used:.2f} CPU s')
    finally:
        runtime.close()
    for name, runs in times.items():
        out[name].update(
            seconds=statistics.median(r[0] for r in runs), cpu_seconds=statistics.median(r[1] for r in runs),
            all_s=[r[0] for r in runs])
    return out


def demo_lines(count: int):
    """``count`` held-out rendered lines of the demo's character set (seed 1, as the demo's test lines), degraded
    x4 as the benchmark's: (LR canvases, HR lines), (count, 3, 128, 512) in [0, 1]."""
    lq, hr, _ = rendered_lines(count, seed=1, with_targets=True, chinese_chars='demo')
    return lq.float(), hr.float()


def plan_paths(backend: str, precisions: Sequence[str]) -> List[BackendPrecision]:
    """The per-stage plans timed on ``backend``: fp32, and for each low precision of ``precisions`` the paths 'auto'
    tries on a machine where it is fast (``plan.auto_paths``: the VAE in bf16, or the IDM in fp16), then that
    precision on every stage."""
    paths = [BackendPrecision.uniform(backend, FP32)]
    for name in precisions:
        if name == 'fp32':
            continue
        dtype = precision_dtype(name)
        fast = {'vae_encoder': dtype, 'vae_decoder': dtype} if dtype == torch.bfloat16 else {'idm': dtype}
        first = BackendPrecision.uniform(backend, FP32).replace(**fast)
        paths += [first] + ([first.replace(vae_encoder=FP32)] if dtype == torch.bfloat16 else [])
        paths.append(BackendPrecision.uniform(backend, dtype))
    return paths


def precision_benchmark(opt_path: str, checkpoint=None, random_weights: bool = False,
                        precisions: Sequence[str] = ('fp32', 'bf16'), lines: int = 8, repeats: int = 3,
                        backends: Sequence[str] = TABLE_BACKENDS, say=print) -> Dict:
    """tools/benchmark_inference.py --precision-table: the errors of each stage in bf16 and fp16 on the demo
    backbone's frozen route (``frozen_demo_net``, ``lines`` held-out rendered lines) and on the option file's network
    (full size with ``random_weights``; the qualification's probe, ``precisions``), and the speed of each per-stage
    plan of ``precisions`` (``plan_paths``) on that network, one 128x512 line."""
    from tola_lab.benchmarks.benchmarking import build_benchmark_tola
    from tola_lab.benchmarks.machine_ceiling import machine
    lq, hr = demo_lines(lines)
    result = {
        'machine': machine(), 'bounds': {'z0': qualification.Z0_BOUND, 'image_rms': qualification.IMAGE_RMS_BOUND}
    }
    say(f'the demo backbone\'s frozen route on {lines} rendered lines')
    result['demo'] = error_table(frozen_demo_net(), lq, hr, backends, LOW, say)
    net = build_benchmark_tola(opt_path, random_weights, adaptation=True, checkpoint=checkpoint)
    net = net.prepare_for_inference()
    low = [precision_dtype(p) for p in precisions if p != 'fp32']
    say('the option file\'s network on the qualification\'s probe')
    result['model'] = error_table(net, qualification.probe_image(), None, backends, low, say)
    paths = [path for backend in backends for path in plan_paths(backend, precisions)]
    say(f'{len(paths)} per-stage plans, one 128x512 line, median of {repeats}')
    result['speed'] = plan_speeds(net, lq[:1], paths, repeats, say)
    return result


def precision_markdown(result: Dict) -> str:
    """The tables of ``precision_benchmark``."""
    out = []
    for key, title in (('demo', "the demo backbone's frozen route"), ('model', "the option file's network")):
        table = result[key]
        ref = table['reference']
        sizes = ', '.join(f'|{k}| {v:.3f}' for k, v in ref.items())
        out += [
            '', f"{title} ({table['lines']} x {'x'.join(map(str, table['shape']))}; mean absolute values: {sizes}):",
            '',
            '| backend | precision | stage | computed | Δε̂ | Δẑ0 | Δẑ0 / z_LR | Δẑ0 / (z_LR - z_HR) | image vs fp32 |',
            '|---|---|---|---|---:|---:|---:|---:|---:|'
        ]
        for row in table['rows']:
            lr_hr = f"{row['z0_of_lr_to_hr']:.3f}" if 'z0_of_lr_to_hr' in row else '-'
            out.append(f"| {row['backend']} | {row['precision']} | {row['stage']} | {row['computed']} | "
                       f"{row['eps']:.2e} | {row['z0']:.4f} | {row['z0_of_z_lr']:.2%} | {lr_hr} | "
                       f"{row['image_db']:.1f} dB |")
    out += [
        '', 'per-stage plans (one 128x512 line):', '', '| plan | computed | s / line | Δẑ0 / z_LR | image vs fp32 |',
        '|---|---|---:|---:|---:|'
    ]
    for name, row in result['speed'].items():
        out.append(f"| {name} | {row['computed']} | {row['seconds']:.2f} | {row['z0_of_z_lr']:.2%} | "
                   f"{row['image_db']:.1f} dB |")
    bounds = result['bounds']
    out += [
        '', f"qualification bounds: Δẑ0 / z_LR <= {bounds['z0']:.0%}, the image's RMS error <= {bounds['image_rms']:g} "
        f"({float_psnr(torch.zeros(1), torch.full((1, ), bounds['image_rms'])):.0f} dB)"
    ]
    return '\n'.join(out)
