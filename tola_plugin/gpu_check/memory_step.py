"""Steps 3 and 4 (training) of the GPU check: one training iteration at the paper's batch of 16 per GPU in fp32
and bf16, each without and with gradient checkpointing of all three parts, in this process on one GPU: the peak
GPU memory (``torch.cuda.max_memory_allocated``: tensors, as the estimate counts them) next to
``tools/estimate_memory.py``'s prediction (fp32 only: the estimate's precision), and the seconds per iteration (median
of the iterations after the first; a training run's math: IEEE fp32, cuDNN benchmarking). A dry run measures on the
CPU, where no peak is read."""
import gc
import statistics
import time
from typing import Dict, List

import torch

from basicsr.data import build_dataset
from basicsr.models import build_model

from tola_plugin.archs.tola_adaptation import CHECKPOINTABLE
from tola_plugin.benchmarks.memory_estimate import GIB, estimate
from tola_plugin.gpu_check.configs import training_options
from tola_plugin.utils import cuda_math

CONFIGS = [(precision, parts) for precision in ('fp32', 'bf16') for parts in ((), CHECKPOINTABLE)]


def batch_of(opt: Dict, size: int) -> Dict[str, torch.Tensor]:
    """``size`` training samples of the option dict's training set, stacked (lines repeat when it has fewer)."""
    data = build_dataset(opt['datasets']['train'])
    items = [data[i % len(data)] for i in range(size)]
    return {k: torch.stack([it[k] for it in items]) for k in items[0] if torch.is_tensor(items[0][k])}


def predicted_bytes(result: Dict, parts, batch: int) -> int:
    """The estimate's weights + optimizer state + peak for ``batch`` samples with checkpointing ``parts``."""
    row = next(r for r in result['training'] if tuple(r['gradient_checkpointing']) == tuple(parts))
    fixed = result['weights_bytes'] + result['optimizer_state_bytes'] + 2 * row['peak_batch1_bytes'] - row[
        'peak_batch2_bytes']
    return fixed + batch * row['per_sample_bytes']


def measure(model, batch: Dict, precision: str, parts, iterations: int, device: torch.device) -> Dict:
    """Peak memory and seconds of ``iterations`` optimizer steps of ``model`` in one configuration."""
    net = model.bare_net
    net.set_switches(precision=precision)
    net.set_gradient_checkpointing(parts)
    cuda = device.type == 'cuda'
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    seconds: List[float] = []
    try:
        model.feed_data(batch)
        for it in range(iterations):
            start = time.perf_counter()
            model.optimize_parameters(it + 1)
            if cuda:
                torch.cuda.synchronize(device)
            seconds.append(time.perf_counter() - start)
    except torch.cuda.OutOfMemoryError as err:
        return {'out_of_memory': str(err).splitlines()[0]}
    finally:
        model.optimizer_g.zero_grad(set_to_none=True)
        gc.collect()
    row = {
        'seconds_per_iteration': round(statistics.median(seconds[1:] or seconds),
                                       3), 'all_seconds': [round(s, 3) for s in seconds],
        'losses_finite': all(bool(torch.isfinite(torch.as_tensor(v))) for v in model.log_dict.values())
    }
    if cuda:
        row['peak_gib'] = round(torch.cuda.max_memory_allocated(device) / GIB, 2)
    return row


def memory_step(root: str, dry_run: bool) -> Dict:
    """Every configuration of ``CONFIGS`` at batch 16 (dry run: 2), with the estimate's prediction (fp32)."""
    batch_size, iterations = (1, 1) if dry_run else (16, 3)
    opt = training_options(root, dry_run, name='gpu_check_memory', total_iter=1, freq=0, batch=batch_size,
                           precision='fp32', checkpointing=(), accumulate=1, workers=0)
    opt.update(num_gpu=0 if dry_run else 1, dist=False, rank=0, world_size=1, is_train=True, auto_resume=False)
    device = torch.device('cpu' if dry_run else 'cuda')
    start = time.monotonic()
    prediction = estimate(opt, choices=[(), CHECKPOINTABLE])
    estimate_s = time.monotonic() - start
    opt['path'].update({
        k: f'experiments/{opt["name"]}'
        for k in ('experiments_root', 'models', 'training_states', 'log', 'visualization')
    })
    cuda_math.apply_options(dict(opt, deterministic=False))  # a training run's math: IEEE fp32 (allow_tf32: false)
    torch.backends.cudnn.benchmark = True  # and BasicSR's cuDNN benchmarking (the first iteration is not timed)
    model = build_model(opt)
    batch = batch_of(opt, batch_size)
    rows, threads = [], torch.get_num_threads()
    torch.set_num_threads(1 if dry_run else threads)  # the tiny network: one thread is faster on a shared CPU
    try:
        for precision, parts in CONFIGS:
            row = {'precision': precision, 'gradient_checkpointing': list(parts), 'batch': batch_size}
            row.update(measure(model, batch, precision, parts, iterations, device))
            if precision == 'fp32':
                row['predicted_gib'] = round(predicted_bytes(prediction, parts, batch_size) / GIB, 2)
            rows.append(row)
    finally:
        torch.set_num_threads(threads)
    del model
    gc.collect()
    return {
        'passed': all(r.get('losses_finite') for r in rows if 'out_of_memory' not in r), 'device': str(device),
        'rows': rows, 'estimate_seconds': round(estimate_s, 1)
    }
