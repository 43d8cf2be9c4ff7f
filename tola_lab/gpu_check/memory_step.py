"""The GPU check's memory step: training iterations at the paper's batch of 16 per GPU at full size, in this process
on one GPU, in IEEE fp32, fp32 with TF32 (PyTorch's default for convolutions) and bf16, without and with gradient
checkpointing of all three parts: the peak GPU memory (``torch.cuda.max_memory_allocated``: tensors, as the estimate
counts them, read after a first iteration whose cuDNN benchmarking trials are not training's memory) next to
``tools/estimate_memory.py``'s prediction (fp32: the estimate's precision), and the seconds per iteration (median of
the iterations after the first; the first, with cuDNN's trials of every new shape and precision, is reported apart:
docs/training_gpus.md, "The steps and the report", has what they cost). A configuration that does not fit, or whose
kernels fail to allocate (cuDNN), is recorded as such and the next one runs. A dry run measures the tiny network on
the CPU (one iteration of 32x128 lines), where no peak is read."""
import gc
import statistics
import time
from typing import Dict, List

import torch

from tola_lab.gpu_check.configs import training_options
from tola_plugin.archs.tola_adaptation import CHECKPOINTABLE
from tola_plugin.basicsr_glue.resource_bounds import is_out_of_device_memory
from tola_plugin.commands.estimate_memory import GIB, estimate
from tola_plugin.utils import cuda_math

# (precision, TF32, checkpointed parts); the first row that must fit a GPU of 40 GB or more: fp32, all checkpointed
CONFIGS = [('fp32', False, ()), ('fp32', False, CHECKPOINTABLE), ('fp32', True, ()), ('bf16', False, ()),
           ('bf16', False, CHECKPOINTABLE)]
REQUIRED = ('fp32', False, CHECKPOINTABLE)  # 1.05 GiB per sample + 3.9 GiB of weights: 21 GiB at batch 16

DRY_RUN_SIZE = (32, 128)  # a dry run's lines, shrunk: the tiny network's cost is the image size's


def batch_of(opt: Dict, size: int, shrink: bool = False) -> Dict[str, torch.Tensor]:
    """``size`` training samples of the option dict's training set, stacked (lines repeat when it has fewer);
    ``shrink``: images resized to ``DRY_RUN_SIZE``."""
    from basicsr.data import build_dataset
    data = build_dataset(opt['datasets']['train'])
    items = [data[i % len(data)] for i in range(size)]
    batch = {k: torch.stack([it[k] for it in items]) for k in items[0] if torch.is_tensor(items[0][k])}
    if shrink:
        for key in ('lq', 'gt'):
            batch[key] = torch.nn.functional.interpolate(batch[key], size=DRY_RUN_SIZE, mode='area')
    return batch


def predicted_bytes(result: Dict, parts, batch: int) -> int:
    """The estimate's weights + optimizer state + peak for ``batch`` samples with checkpointing ``parts``."""
    row = next(r for r in result['training'] if tuple(r['gradient_checkpointing']) == tuple(parts))
    fixed = result['weights_bytes'] + result['optimizer_state_bytes'] + 2 * row['peak_batch1_bytes'] - row[
        'peak_batch2_bytes']
    return fixed + batch * row['per_sample_bytes']


def measure(model, batch: Dict, precision: str, tf32: bool, parts, iterations: int, device: torch.device) -> Dict:
    """Peak memory and seconds of ``iterations`` optimizer steps of ``model`` in one configuration; the peak is
    reset after the first (warm-up) iteration, whose seconds (cuDNN's trials) are reported apart."""
    net = model.bare_net
    net.set_switches(precision=precision)
    net.set_gradient_checkpointing(parts)
    cuda_math.set_tf32(tf32)
    cuda = device.type == 'cuda'
    seconds: List[float] = []
    peak = None
    try:
        model.feed_data(batch)
        for it in range(iterations):
            if cuda and it == 1:
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            model.optimize_parameters(it + 1)
            if cuda:
                torch.cuda.synchronize(device)
            seconds.append(time.perf_counter() - start)
        if cuda:
            peak = torch.cuda.max_memory_allocated(device)
    except RuntimeError as err:
        kind = 'out_of_memory' if is_out_of_device_memory(err) else 'error'
        return {kind: f'{type(err).__name__}: {str(err).splitlines()[0][:300]}'}
    finally:
        model.optimizer_g.zero_grad(set_to_none=True)
        model.output = None
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    row = {
        'seconds_per_iteration': round(statistics.median(seconds[1:] or seconds), 3),
        'first_iteration_seconds': round(seconds[0], 3),  # with cuDNN's trials (report.py's column of that name)
        'all_seconds': [round(s, 3) for s in seconds],
        'losses_finite': all(bool(torch.isfinite(torch.as_tensor(v))) for v in model.log_dict.values())
    }
    if peak is not None:
        row['peak_gib'] = round(peak / GIB, 2)
    return row


def memory_step(root: str, data: str, work: str, dry_run: bool) -> Dict:
    """Every configuration of ``CONFIGS`` at batch 16 (dry run: the tiny network, batch 1), with the estimate's
    prediction (fp32). Passed when ``REQUIRED`` fits, no configuration failed other than by running out of memory,
    and every one that fit had finite losses."""
    from basicsr.models import build_model
    batch_size, iterations = (1, 1) if dry_run else (16, 3)
    opt = training_options(root, data, 'tiny' if dry_run else 'fullsize', on_gpu=not dry_run, name='gpu_check_memory',
                           total_iter=1, freq=0, batch=batch_size, precision='fp32', checkpointing=(), accumulate=1,
                           workers=0, work=work)
    opt.update(num_gpu=0 if dry_run else 1, dist=False, rank=0, world_size=1, is_train=True, auto_resume=False)
    device = torch.device('cpu' if dry_run else 'cuda')
    start = time.monotonic()
    prediction = estimate(opt, choices=[(), CHECKPOINTABLE])
    estimate_s = time.monotonic() - start
    opt['path'].update({
        k: f'experiments/{opt["name"]}'
        for k in ('experiments_root', 'models', 'training_states', 'log', 'visualization')
    })
    cuda_math.apply_options(dict(opt, deterministic=False))
    torch.backends.cudnn.benchmark = True  # BasicSR's cuDNN benchmarking (its trials: the first iteration, untimed)
    model = build_model(opt)
    batch = batch_of(opt, batch_size, shrink=dry_run)
    rows = []
    for precision, tf32, parts in CONFIGS:
        row = {'precision': precision, 'tf32': tf32, 'gradient_checkpointing': list(parts), 'batch': batch_size}
        row.update(measure(model, batch, precision, tf32, parts, iterations, device))
        if precision == 'fp32' and not tf32:
            row['predicted_gib'] = round(predicted_bytes(prediction, parts, batch_size) / GIB, 2)
        rows.append(row)
    cuda_math.set_tf32(False)
    return {
        'passed': memory_verdict(rows), 'device': str(device), 'rows': rows, 'estimate_seconds': round(estimate_s, 1)
    }


def memory_verdict(rows: List[Dict]) -> bool:
    """Whether the rows pass: ``REQUIRED`` fitted, no configuration failed other than by running out of memory, and
    every one that fitted had finite losses."""
    required = [r for r in rows if (r['precision'], r['tf32'], tuple(r['gradient_checkpointing'])) == REQUIRED]
    fitted = [r for r in rows if 'out_of_memory' not in r and 'error' not in r]
    return (len(required) == 1 and 'seconds_per_iteration' in required[0] and not any('error' in r for r in rows)
            and all(r['losses_finite'] for r in fitted))
