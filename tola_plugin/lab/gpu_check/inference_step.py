"""The GPU check's inference step: what a user gets in each precision, and how fast.

- **Quality and the plan**, as a user runs it: ``tola-infer --precision fp32|auto|bf16|fp16`` (one process each) on the
  package's six sample lines with a trained model whose image follows the one-step latent ẑ0, the demo backbone's
  frozen route (no LoRA, no LRC; random weights make ẑ0 amplified noise, where no precision but fp32 qualifies): the
  plan it printed (each stage's precision as computed), seconds per line with the process's start and the model's
  loading, and each output's PSNR against fp32's, held to the qualification's image bound. A precision tola-infer
  refuses (its route outside the qualification's bounds, docs/inference.md "Precision") is a row with the reason,
  not a failure.
- **Speed at full size**: the full-size network (random backbone weights, ``configs.fullsize_backbone``, seeded random
  adaptation weights, exported merged) alone on the same lines with each served plan (warm seconds per line; every
  value finite before the clamp), and each stage's warm seconds in IEEE fp32, fp32 with TF32, bf16 and fp16.

Dry run: the tiny network on the CPU, one line; tola-infer in fp32 and auto only (bf16's refusal on the demo backbone
is tests/test_runtime_precision.py's; fp16 is emulated on CPUs without fp16 instructions, many times slower), no TF32
row (a CUDA switch)."""
import glob
import importlib.resources
import math
import os
import shutil
import statistics
import sys
import time
from typing import Dict, List, Optional

import torch

from tola_plugin.archs.precision import autocast, stage_dtypes
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.data.image_io import list_image_files, read_image_file
from tola_plugin.data.text_line_source import to_canvas
from tola_plugin.lab.gpu_check.configs import model_option_file
from tola_plugin.lab.gpu_check.precision_step import LOW, compute_dtype, tf32
from tola_plugin.metrics.image_metrics import float_psnr
from tola_plugin.utils.process_tree import TreeTimeout, run_tree

PRECISIONS = ('fp32', 'auto') + LOW  # tola-infer's; fp32 first: the reference
STAGE_PRECISIONS = ('fp32', 'tf32') + LOW
DRY_RUN_LINES = 1
REFUSED = 'no path can run'  # tola-infer's error when every path of the request is outside the bounds
RUN_TIMEOUT_S = 300


def image_bound_db() -> float:
    """The qualification's bound on the image (``IMAGE_RMS_BOUND``) as a PSNR against fp32."""
    from tola_plugin.runtime.qualification import IMAGE_RMS_BOUND
    return float_psnr(torch.zeros(1), torch.full((1, ), IMAGE_RMS_BOUND))


def precisions(names, dry_run: bool, dry_run_names=('fp32', 'auto', 'bf16')):
    return tuple(p for p in names if not dry_run or p in dry_run_names)


def export_model(root: str, work: str, dry_run: bool) -> str:
    """The merged file of the timed model with seeded random adaptation weights (at init LoRA and the LRC add exact
    zeros, which would hide what merging changes)."""
    from tola_plugin.lab.benchmarks.benchmarking import build_benchmark_tola
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


def export_demo_model(work: str) -> str:
    """The merged file of the demo backbone's frozen route (trained weights; its image follows ẑ0)."""
    from tola_plugin.archs.tola_arch import TOLANet
    path = os.path.join(work, 'demo_frozen.safetensors')
    TOLANet(backbone_init='demo', idm_lora=False, vae_lora=False, lrc=None).save_merged(path)
    return path


def tola_infer(model: str, lines: str, out: str, device: str, precision: str, env: Dict) -> Dict:
    """One ``tola-infer`` process (``python -m tola_cli.infer``) over the folder ``lines``: its seconds, the runtime
    line it printed, and '' or why it refused the precision (every path outside the qualification's bounds). Any
    other failure is a RuntimeError."""
    args = [
        sys.executable, '-m', 'tola_cli.infer', '-i', lines, '-o', out, '--model', model, '--device', device,
        '--precision', precision, '--backend', 'torch', '--overwrite'
    ]
    start = time.monotonic()
    try:
        proc = run_tree(args, timeout=RUN_TIMEOUT_S, env=env)
    except TreeTimeout:
        raise RuntimeError(f'tola-infer --precision {precision} ran past {RUN_TIMEOUT_S} s and was killed') from None
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        if REFUSED in proc.stderr:
            return {'seconds': seconds, 'runtime': '', 'refused': proc.stderr.strip().splitlines()[-1]}
        raise RuntimeError(f'tola-infer --precision {precision} failed (exit status {proc.returncode}):\n'
                           f'{proc.stderr[-3000:]}')
    runtime = [line for line in proc.stderr.splitlines() if 'runtime: ' in line]
    return {'seconds': seconds, 'runtime': runtime[0].split('runtime: ', 1)[1] if runtime else '', 'refused': ''}


def images_of(folder: str) -> List[torch.Tensor]:
    return [
        torch.from_numpy(read_image_file(p, order='RGB')).float() / 255.0
        for p in sorted(glob.glob(os.path.join(folder, '*.png')))
    ]


def db(value: float):
    """A PSNR for the report: rounded, 'identical' for equal images (inf)."""
    return 'identical' if math.isinf(value) else round(value, 2)


def chosen_path(model: str, device: str, precision: str):
    """The path the runtime chose for ``precision`` on ``model`` (the verdicts tola-infer cached are read)."""
    from tola_plugin.archs.tola_arch import TOLANet
    from tola_plugin.runtime.serving import Runtime
    net = TOLANet.load_for_inference(model, precision=precision)
    runtime = Runtime(net, device, 'torch', source=model, say=lambda message: None)
    try:
        return runtime.plan.path
    finally:
        runtime.close()


def synchronize(device: str) -> None:
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def network_seconds(net, canvases: torch.Tensor, device: str, path, allow_tf32: bool = False) -> Dict:
    """The network alone with each stage in ``path``'s precision (``allow_tf32``: fp32 with TF32, else IEEE fp32 as
    tola-infer computes it): warm seconds per line (one line per call, after one warm-up) and whether every value is
    finite before the clamp."""
    from tola_plugin.archs.stage_runner import StageRunner
    previous = net.use_stage_runner(StageRunner(path.dtypes, f'{path.name} (timed)'))
    seconds, finite = [], True
    try:
        with torch.inference_mode(), tf32(allow_tf32):
            net(canvases[:1].to(device), noise_seeds=[0])
            for i in range(len(canvases)):
                synchronize(device)
                start = time.perf_counter()
                out = net(canvases[i:i + 1].to(device), noise_seeds=[i])
                synchronize(device)
                seconds.append(time.perf_counter() - start)
                finite = finite and bool(torch.isfinite(out).all())
    finally:
        net.use_stage_runner(previous)
    return {'network_seconds_per_line': round(statistics.median(seconds), 4), 'finite': finite}


def stage_seconds(net, canvas: torch.Tensor, device: str, names, repeats: int) -> List[Dict]:
    """Warm seconds (median of ``repeats``) of the VAE encoder, the IDM and the VAE decoder on one line in each
    precision of ``names`` (autocast as TOLANet runs a stage; 'tf32': fp32 with TF32; the decoder stays fp32 under
    fp16, as ``archs/precision.stage_dtypes`` has it)."""
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
        dtypes = stage_dtypes(compute_dtype(precision))
        row = {'precision': precision}
        for stage, call in calls.items():
            times = []
            with torch.inference_mode(), tf32(precision == 'tf32'), autocast(dtypes[stage], device):
                for _ in range(repeats + 1):
                    synchronize(device)
                    start = time.perf_counter()
                    call()
                    synchronize(device)
                    times.append(time.perf_counter() - start)
            row[stage] = round(statistics.median(times[1:]), 4)
        rows.append(row)
    return rows


def quality_row(demo: str, lines: str, work: str, device: str, precision: str, env: Dict,
                reference: Optional[List[torch.Tensor]], bound_db: float) -> Dict:
    """tola-infer in one precision on the demo model: its plan, seconds, PSNR against ``reference`` (fp32's images;
    None: this is fp32) within ``bound_db``, or refused with the reason. The row keeps its images under 'images'."""
    out = os.path.join(work, f'tola_infer_{precision}')
    run = tola_infer(demo, lines, out, device, precision, env)
    row = {'precision': precision}
    if run['refused']:
        return dict(row, refused=run['refused'])
    images = images_of(out)
    row.update(runtime=run['runtime'], lines=len(images),
               tola_infer_seconds_per_line=round(run['seconds'] / max(len(images), 1), 3), images=images)
    if reference is not None:
        values = [float_psnr(a, b) for a, b in zip(images, reference)]
        row.update(
            psnr_vs_fp32_db_mean=db(sum(values) / len(values)), psnr_vs_fp32_db_min=db(min(values)),
            within_bound=min(values) >= bound_db)
    return row


def inference_step(root: str, work: str, dry_run: bool) -> Dict:
    """tola-infer's plans and quality on the demo model, the full-size network's speed with each plan and per stage;
    -> the step's figures (``passed``: fp32 and auto served, every served precision within the image bound, every
    output finite)."""
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
    env = dict(os.environ, OMP_NUM_THREADS='1') if dry_run else dict(os.environ)  # the tiny network: one thread
    demo, bound = export_demo_model(work), image_bound_db()
    rows, reference = [], None
    for precision in precisions(PRECISIONS, dry_run, ('fp32', 'auto')):
        row = quality_row(demo, lines, work, device, precision, env, reference, bound)
        reference = row.get('images') if reference is None else reference
        rows.append(row)
    timed = TOLANet.load_for_inference(export_model(root, work, dry_run)).to(device)
    timed.set_switches(clamp_output=False)
    for row in rows:
        row.pop('images', None)
        if 'refused' not in row:
            path = chosen_path(demo, device, row['precision'])
            row.update(plan=path.name, **network_seconds(timed, canvases, device, path))
    tf32_row = None if dry_run else {'precision': 'fp32 + TF32 (not a tola-infer precision)'}
    if tf32_row is not None:
        fp32_path = chosen_path(demo, device, 'fp32')
        tf32_row.update(plan=fp32_path.name, **network_seconds(timed, canvases, device, fp32_path, allow_tf32=True))
    stages = stage_seconds(timed, canvases[:1], device, precisions(STAGE_PRECISIONS, dry_run, ('fp32', 'bf16')),
                           1 if dry_run else 5)
    served = [r for r in rows if 'refused' not in r]
    return {
        'passed': {'fp32', 'auto'} <= {r['precision']
                                       for r in served}
        and all(r['finite'] and r.get('within_bound', True) for r in served) and (tf32_row or {}).get('finite', True),
        'device': device, 'quality_model': "the demo backbone's frozen route (trained; its image follows ẑ0)",
        'image_bound_db': round(bound, 2),
        'model': 'tiny, random weights (dry run)' if dry_run else 'full size, random weights', 'rows': rows,
        'tf32': tf32_row, 'stage_seconds': stages
    }
