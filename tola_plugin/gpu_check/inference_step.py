"""The GPU check's inference step, at full size: ``tola-infer`` on the package's six sample lines in fp32, bf16, fp16
and auto (one process each, as a user runs it: seconds per line with the model's loading; the runtime it reports;
PSNR of each output against fp32's), the network alone on the same lines in each precision (warm seconds per line;
every value finite before the clamp), and each stage's warm seconds in each precision (fp32, fp32 with TF32, bf16,
fp16; fp32 is IEEE fp32, TF32 off, as tola-infer computes it). The model: the full-size backbone with random weights
(``configs.fullsize_backbone``) and seeded random adaptation weights, exported merged. Random weights say nothing of
quality: the precisions' effect on a trained model is the precision step's. Dry run: the tiny network on the CPU,
one line."""
import contextlib
import glob
import importlib.resources
import math
import os
import shutil
import statistics
import sys
import time
from typing import Dict, List

import torch

from tola_plugin.archs.precision import autocast, decoder_autocast
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.data.image_io import list_image_files, read_image_file
from tola_plugin.data.text_line_source import to_canvas
from tola_plugin.gpu_check.configs import model_option_file
from tola_plugin.gpu_check.precision_step import tf32
from tola_plugin.metrics.image_metrics import float_psnr
from tola_plugin.utils.process_tree import TreeTimeout, run_tree

PRECISIONS = ('fp32', 'bf16', 'fp16', 'auto')  # tola-infer's; fp32 first: the reference
NETWORK_PRECISIONS = ('fp32', 'tf32', 'bf16', 'fp16')
STAGE_PRECISIONS = ('fp32', 'tf32', 'bf16', 'fp16')
# A dry run: one of the 6 samples, and fp16 left out (emulated on CPUs without AMX-FP16: many times slower than fp32;
# its code path is bf16's with another dtype)
DRY_RUN_LINES = 1


def precisions(names, dry_run: bool):
    return tuple(p for p in names if not (dry_run and p == 'fp16'))


RUN_TIMEOUT_S = 300


def export_model(root: str, work: str, dry_run: bool) -> str:
    """The merged file of the check's model with seeded random adaptation weights (at init LoRA and the LRC add exact
    zeros, which would hide what merging changes)."""
    from tola_plugin.benchmarks.benchmarking import build_benchmark_tola
    path = os.path.join(work, 'merged.safetensors')
    opt_path = model_option_file(root, 'tiny' if dry_run else 'fullsize', work, os.path.join(work, 'model.yml'))
    net = build_benchmark_tola(opt_path, random_weights=False, adaptation=False)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in net.parameters():
            if param.requires_grad:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.01)
    net.save_merged(path)
    return path


def tola_infer(model: str, lines: str, out: str, device: str, precision: str, env: Dict) -> Dict:
    """One ``tola-infer`` process (``python -m tola_cli.infer``) over the folder ``lines``: its seconds and the
    runtime line it printed."""
    args = [
        sys.executable, '-m', 'tola_cli.infer', '-i', lines, '-o', out, '--model', model, '--device', device,
        '--precision', precision, '--backend', 'torch', '--overwrite'
    ]
    start = time.monotonic()
    try:
        proc = run_tree(args, timeout=RUN_TIMEOUT_S, env=env)
    except TreeTimeout:
        raise RuntimeError(f'tola-infer --precision {precision} ran past {RUN_TIMEOUT_S} s and was killed') from None
    if proc.returncode != 0:
        raise RuntimeError(f'tola-infer --precision {precision} failed (exit status {proc.returncode}):\n'
                           f'{proc.stderr[-3000:]}')
    runtime = [line for line in proc.stderr.splitlines() if line.startswith('tola-infer: ')]
    return {'seconds': time.monotonic() - start, 'runtime': runtime[0][len('tola-infer: '):] if runtime else ''}


def images_of(folder: str) -> List[torch.Tensor]:
    return [
        torch.from_numpy(read_image_file(p, order='RGB')).float() / 255.0
        for p in sorted(glob.glob(os.path.join(folder, '*.png')))
    ]


def db(value: float):
    """A PSNR for the report: rounded, 'identical' for equal images (inf)."""
    return 'identical' if math.isinf(value) else round(value, 2)


def synchronize(device: str) -> None:
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def network_row(net, canvases: torch.Tensor, device: str, precision: str) -> Dict:
    """The network alone in ``precision`` ('tf32': fp32 with TF32; 'fp32': IEEE fp32, TF32 off, as tola-infer runs
    it, where PyTorch's own default would run convolutions in TF32): warm seconds per line (one line per call, after
    one warm-up) and whether every value is finite (before the clamp)."""
    net.set_switches(precision=precision if precision in ('bf16', 'fp16') else 'fp32')
    seconds, finite = [], True
    with torch.inference_mode(), tf32(precision == 'tf32'):
        net(canvases[:1].to(device), noise_seeds=[0])
        for i in range(len(canvases)):
            synchronize(device)
            start = time.perf_counter()
            out = net(canvases[i:i + 1].to(device), noise_seeds=[i])
            synchronize(device)
            seconds.append(time.perf_counter() - start)
            finite = finite and bool(torch.isfinite(out).all())
    net.set_switches(precision='fp32')
    return {'precision': precision, 'network_seconds_per_line': round(statistics.median(seconds), 4), 'finite': finite}


def stage_seconds(net, canvas: torch.Tensor, device: str, names, repeats: int) -> List[Dict]:
    """Warm seconds (median of ``repeats``) of the VAE encoder, the IDM and the VAE decoder on one line in each
    precision of ``names`` (autocast as TOLANet runs them; the decoder stays fp32 under fp16)."""
    captured = {}
    hook = net.idm.register_forward_hook(lambda m, a, k, o: captured.update(args=a, kwargs=k), with_kwargs=True)
    with torch.inference_mode():
        out = net(canvas.to(device), noise_seeds=[0], return_intermediates=True)
    hook.remove()
    args = captured['args']
    context = args[2] if len(args) > 2 else captured['kwargs']['encoder_hidden_states']
    calls = {
        'vae_encoder': lambda: net.vae.encode(canvas.to(device)).latent_dist.mode(),
        'idm': lambda: net.idm(args[0], args[1], context),
        'vae_decoder': lambda: net.vae.decode((1.0 / LATENT_SCALE) * out['z0_corr']).sample,
    }
    rows = []
    for precision in names:
        dtype = {'bf16': torch.bfloat16, 'fp16': torch.float16}.get(precision, torch.float32)
        row = {'precision': precision}
        for stage, call in calls.items():
            times = []
            with torch.inference_mode(), tf32(precision == 'tf32'), autocast(dtype, device):
                with decoder_autocast(dtype, device) if stage == 'vae_decoder' else contextlib.nullcontext():
                    for _ in range(repeats + 1):
                        synchronize(device)
                        start = time.perf_counter()
                        call()
                        synchronize(device)
                        times.append(time.perf_counter() - start)
            row[stage] = round(statistics.median(times[1:]), 4)
        rows.append(row)
    return rows


def inference_step(root: str, work: str, dry_run: bool) -> Dict:
    """tola-infer, the network and its stages in each precision on the sample lines; -> the step's figures
    (``passed``: every run finished and every output is finite)."""
    from tola_plugin.archs.tola_arch import TOLANet
    device = 'cpu' if dry_run else 'cuda'
    samples = str(importlib.resources.files('tola_plugin.samples'))  # real LR lines of DiffTSR's test set
    lines = os.path.join(work, 'lines')
    os.makedirs(lines, exist_ok=True)
    files = [os.path.join(samples, name) for name in list_image_files(samples)][:DRY_RUN_LINES if dry_run else None]
    for path in files:
        shutil.copy2(path, lines)
    canvases = torch.stack(
        [torch.from_numpy(to_canvas(read_image_file(p, order='RGB'), order='RGB')).permute(2, 0, 1) for p in files])
    model = export_model(root, work, dry_run)
    env = dict(os.environ, OMP_NUM_THREADS='1') if dry_run else dict(os.environ)  # the tiny network: one thread
    rows, reference = [], None
    for precision in precisions(PRECISIONS, dry_run):
        out = os.path.join(work, f'tola_infer_{precision}')
        run = tola_infer(model, lines, out, device, precision, env)
        images = images_of(out)
        row = {
            'precision': precision, 'lines': len(images), 'runtime': run['runtime'],
            'tola_infer_seconds_per_line': round(run['seconds'] / len(files), 3)
        }
        if reference is None:
            reference = images
        else:
            values = [float_psnr(a, b) for a, b in zip(images, reference)]
            row.update(psnr_vs_fp32_db_mean=db(sum(values) / len(values)), psnr_vs_fp32_db_min=db(min(values)))
        rows.append(row)
    net = TOLANet.load_for_inference(model).to(device)
    net.set_switches(clamp_output=False)
    network = [network_row(net, canvases, device, p) for p in precisions(NETWORK_PRECISIONS, dry_run)]
    stages = stage_seconds(net, canvases[:1], device, precisions(STAGE_PRECISIONS, dry_run), 1 if dry_run else 5)
    return {
        'passed': all(r['lines'] == len(files) for r in rows) and all(r['finite'] for r in network), 'device': device,
        'model': 'tiny, random weights (dry run)' if dry_run else 'full size, random weights', 'rows': rows,
        'network': network, 'stage_seconds': stages
    }
