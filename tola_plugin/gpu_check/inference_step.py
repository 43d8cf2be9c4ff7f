"""Step 4 (inference) of the GPU check: ``tola-infer`` on the package's sample lines in fp32, bf16 and fp16 (one
process each, as a user runs it: seconds per line with the model's loading, and PSNR of each output against
fp32's), and the network alone on the same lines in each precision (warm seconds per line; every output finite).
The model: the full-size network with random weights (dry run: the demo backbone), exported merged."""
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

PRECISIONS = ('fp32', 'bf16', 'fp16')
DRY_RUN_LINES = 1  # of the 6 samples: bf16 and fp16 are emulated on most CPUs, many times slower
RUN_TIMEOUT_S = 900


def export_model(root: str, work: str, dry_run: bool) -> str:
    """The merged file of the check's model (``configs.model_option_file``) with seeded random adaptation weights."""
    path = os.path.join(work, 'merged.safetensors')
    opt_path = model_option_file(root, dry_run, os.path.join(work, 'model.yml'))
    build_benchmark_tola(opt_path, random_weights=True, adaptation=True).save_merged(path)
    return path


def tola_infer(model: str, lines: str, out: str, device: str, precision: str, env: Dict) -> float:
    """Seconds of one ``tola-infer`` process (``python -m tola_cli.infer``) over the folder ``lines``."""
    args = [
        sys.executable, '-m', 'tola_cli.infer', '-i', lines, '-o', out, '--model', model, '--device', device,
        '--precision', precision, '--backend', 'torch', '--overwrite'
    ]
    start = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f'tola-infer --precision {precision} failed (exit status {proc.returncode}):\n'
                           f'{proc.stderr[-3000:]}')
    return time.monotonic() - start


def images_of(folder: str) -> List[torch.Tensor]:
    return [
        torch.from_numpy(read_image_file(p, order='RGB')).float() / 255.0
        for p in sorted(glob.glob(os.path.join(folder, '*.png')))
    ]


def db(value: float):
    """A PSNR for the report: rounded, 'identical' for equal images (inf)."""
    return 'identical' if math.isinf(value) else round(value, 2)


def network_seconds(model: str, canvases: torch.Tensor, device: str, precision: str) -> Dict:
    """The network alone: warm seconds per line (one line per call, after one warm-up) and whether every output
    value is finite."""
    net = TOLANet.load_for_inference(model, precision=precision).to(device)
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


def precision_row(model: str, lines: str, canvases: torch.Tensor, work: str, device: str, precision: str, env: Dict,
                  reference: Optional[List[torch.Tensor]]) -> Tuple[Dict, List[torch.Tensor]]:
    """tola-infer and the network in one precision; PSNR against ``reference`` (fp32's images; None: this is fp32).
    -> (the row, tola-infer's images)."""
    out = os.path.join(work, f'tola_infer_{precision}')
    seconds = tola_infer(model, lines, out, device, precision, env)
    images = images_of(out)
    row = {
        'precision': precision, 'lines': len(images), 'tola_infer_seconds_per_line': round(seconds / len(canvases), 3)
    }
    if reference is not None:
        values = [float_psnr(a, b) for a, b in zip(images, reference)]
        row.update(psnr_vs_fp32_db_mean=db(sum(values) / len(values)), psnr_vs_fp32_db_min=db(min(values)))
    row.update(network_seconds(model, canvases, device, precision))
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
    model = export_model(root, work, dry_run)
    rows, reference = [], None
    env = dict(os.environ, OMP_NUM_THREADS='1') if dry_run else dict(os.environ)  # the tiny network: one thread
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if dry_run else threads)
    try:
        for precision in PRECISIONS:
            row, images = precision_row(model, lines, canvases, work, device, precision, env, reference)
            reference = images if reference is None else reference
            rows.append(row)
    finally:
        torch.set_num_threads(threads)
    return {
        'passed': all(r['finite'] for r in rows), 'device': device,
        'model': 'tiny, random weights (dry run)' if dry_run else 'full size, random weights', 'rows': rows
    }
