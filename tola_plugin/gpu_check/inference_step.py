"""Step 4 (inference) of the GPU check: ``tola-infer`` on the package's sample lines in fp32, auto, bf16 and fp16 (one
process each, as a user runs it: the runtime line it printed, seconds per line with the model's loading, and PSNR of
each output against fp32's, held to the qualification's image bound), and the network alone on the same lines with
each precision's plan (warm seconds per line; every output finite).

Quality is judged on a trained model whose image follows the one-step latent ẑ0: the demo backbone's frozen route
(``benchmarks/precision_route.frozen_demo_net``: no LoRA, no LRC), exported merged; random weights make ẑ0 amplified
noise, where no precision but fp32 qualifies. A precision tola-infer refuses (its route outside the qualification's
bounds, docs/inference.md "Precision") is a row with the reason, not a failure. Speed is measured on the full-size
network with random weights (dry run: the tiny one), each stage in the precision the plan chose on the demo
backbone."""
import glob
import importlib.resources
import math
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.benchmarks.benchmarking import build_benchmark_tola
from tola_plugin.data.image_io import list_image_files, read_image_file
from tola_plugin.data.text_line_source import to_canvas
from tola_plugin.gpu_check.configs import model_option_file
from tola_plugin.metrics.image_metrics import float_psnr
from tola_plugin.runtime.placement import NoPathLeft, Runtime
from tola_plugin.runtime.plan import RuntimePlan
from tola_plugin.runtime.qualification import IMAGE_RMS_BOUND

PRECISIONS = ('fp32', 'auto', 'bf16', 'fp16')
#: the qualification's bound on the image (``IMAGE_RMS_BOUND``) as a PSNR against fp32, on each sample line
IMAGE_BOUND_DB = float_psnr(torch.zeros(1), torch.full((1, ), IMAGE_RMS_BOUND))
REFUSED = 'no path can run'  # tola-infer's error when every path of the request is outside the bounds
DRY_RUN_LINES = 1  # of the 6 samples: bf16 and fp16 are emulated on most CPUs, many times slower
RUN_TIMEOUT_S = 900


def export_model(root: str, work: str, dry_run: bool) -> str:
    """The merged file of the check's model (``configs.model_option_file``) with seeded random adaptation weights."""
    path = os.path.join(work, 'merged.safetensors')
    opt_path = model_option_file(root, dry_run, os.path.join(work, 'model.yml'))
    build_benchmark_tola(opt_path, random_weights=True, adaptation=True).save_merged(path)
    return path


def export_demo_model(work: str) -> str:
    """The merged file of the demo backbone's frozen route (trained weights; its image follows ẑ0)."""
    path = os.path.join(work, 'demo_frozen.safetensors')
    TOLANet(backbone_init='demo', idm_lora=False, vae_lora=False, lrc=None).save_merged(path)
    return path


def tola_infer(model: str, lines: str, out: str, device: str, precision: str, env: Dict) -> Tuple[float, str, str]:
    """One ``tola-infer`` process (``python -m tola_cli.infer``) over the folder ``lines`` -> (its seconds, the
    runtime line it printed, '' or why it refused the precision: every path outside the qualification's bounds).
    Any other failure is a RuntimeError."""
    args = [
        sys.executable, '-m', 'tola_cli.infer', '-i', lines, '-o', out, '--model', model, '--device', device,
        '--precision', precision, '--backend', 'torch', '--overwrite'
    ]
    start = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        if REFUSED in proc.stderr:
            return seconds, '', proc.stderr.strip().splitlines()[-1]
        raise RuntimeError(f'tola-infer --precision {precision} failed (exit status {proc.returncode}):\n'
                           f'{proc.stderr[-3000:]}')
    runtime = [line for line in proc.stderr.splitlines() if 'runtime: ' in line]
    return seconds, runtime[0].split('runtime: ', 1)[1] if runtime else '', ''


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
    net = TOLANet.load_for_inference(model, precision=precision)
    runtime = Runtime(net, device, 'torch', source=model, say=lambda message: None)
    try:
        return runtime.plan.path
    finally:
        runtime.close()


def network_seconds(model: str, canvases: torch.Tensor, device: str, path) -> Dict:
    """The network alone with each stage in ``path``'s precision: warm seconds per line (one line per call, after one
    warm-up) and whether every output value is finite."""
    net = TOLANet.load_for_inference(model).to(device)
    net.plan = RuntimePlan(torch.device(device), path, reason='timed')
    seconds, finite = [], True
    with torch.inference_mode():
        net(canvases[:1].to(device), noise_seeds=[0])
        for i in range(len(canvases)):
            if device.startswith('cuda'):
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = net(canvases[i:i + 1].to(device), noise_seeds=[i])
            if device.startswith('cuda'):
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - start)
            finite = finite and bool(torch.isfinite(out).all())
    del net
    return {'network_seconds_per_line': round(float(np.median(seconds)), 4), 'finite': finite}


def precision_row(models: Tuple[str, str], lines: str, canvases: torch.Tensor, work: str, device: str, precision: str,
                  env: Dict, reference: Optional[List[torch.Tensor]]) -> Tuple[Dict, List[torch.Tensor]]:
    """tola-infer in one precision on the demo model (``models[0]``), PSNR against ``reference`` (fp32's images;
    None: this is fp32) and within the image bound, or refused with the reason; the network alone with the chosen
    plan on the timed model (``models[1]``). -> (the row, tola-infer's images)."""
    demo, timed = models
    out = os.path.join(work, f'tola_infer_{precision}')
    seconds, runtime, refused = tola_infer(demo, lines, out, device, precision, env)
    row = {'precision': precision, 'lines': len(canvases)}
    if refused:
        return dict(row, refused=refused, finite=True), []
    images = images_of(out)
    row.update(runtime=runtime, tola_infer_seconds_per_line=round(seconds / len(canvases), 3))
    if reference is not None:
        values = [float_psnr(a, b) for a, b in zip(images, reference)]
        row.update(
            psnr_vs_fp32_db_mean=db(sum(values) / len(values)), psnr_vs_fp32_db_min=db(min(values)),
            within_bound=min(values) >= IMAGE_BOUND_DB)
    try:
        path = chosen_path(demo, device, precision)
    except NoPathLeft as err:  # tola-infer served it a moment ago: a verdict that changed is worth a failure
        raise RuntimeError(f'precision {precision}: served by tola-infer, refused now: {err}') from None
    row.update(plan=path.name, **network_seconds(timed, canvases, device, path))
    return row, images


def inference_step(root: str, work: str, dry_run: bool) -> Dict:
    """tola-infer and the network in each precision on the sample lines; -> the step's figures (``passed``: every
    run finished and every output is finite)."""
    device = 'cpu' if dry_run else 'cuda'
    samples = str(importlib.resources.files('tola_plugin.samples'))  # real LR lines of DiffTSR's test set
    lines = os.path.join(work, 'lines')
    os.makedirs(lines, exist_ok=True)
    files = [os.path.join(samples, name) for name in list_image_files(samples)][:DRY_RUN_LINES if dry_run else None]
    for path in files:
        shutil.copy2(path, lines)
    canvases = torch.stack(
        [torch.from_numpy(to_canvas(read_image_file(p, order='RGB'), order='RGB')).permute(2, 0, 1) for p in files])
    models = export_demo_model(work), export_model(root, work, dry_run)
    rows, reference = [], None
    env = dict(os.environ, OMP_NUM_THREADS='1') if dry_run else dict(os.environ)  # the tiny network: one thread
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if dry_run else threads)
    try:
        for precision in PRECISIONS:
            row, images = precision_row(models, lines, canvases, work, device, precision, env, reference)
            reference = images if reference is None else reference
            rows.append(row)
    finally:
        torch.set_num_threads(threads)
    served = [r for r in rows if 'refused' not in r]
    return {
        'passed': all(r['finite'] and r.get('within_bound', True)
                      for r in served) and {'fp32', 'auto'} <= {r['precision']
                                                                for r in served}, 'device': device,
        'quality_model': "the demo backbone's frozen route (trained; its image follows ẑ0)",
        'image_bound_db': IMAGE_BOUND_DB,
        'model': 'tiny, random weights (dry run)' if dry_run else 'full size, random weights', 'rows': rows
    }
