"""The GPU check's resume step: training under torchrun (nccl on the GPUs; gloo on the CPU in a dry run) with bf16,
gradient checkpointing of the IDM and both VAE halves and ``accumulate_grad_batches: 4``, with validation, on the demo
backbone (a trained model; dry run: the tiny one): a run of ``first`` iterations, the same run resumed with
``--auto_resume`` to ``final``, and an uninterrupted run to ``final``, all inside the first epoch and resuming in its
middle; the two final adaptation states must be equal (``deterministic: true``). The learning rate (3e-3, constant:
the demo's) moves LoRA's weights well past bf16's resolution within these iterations, so equal states show an exact
resume, not a training that changed nothing: the weights must also have moved after the resume point."""
import glob
import os
import re
import socket
import sys
import time
from typing import Dict, List

import torch

from tola_lab.gpu_check.configs import training_options, write_yaml
from tola_plugin.archs.tola_adaptation import CHECKPOINTABLE
from tola_plugin.utils.process_tree import TreeTimeout, run_tree

RUN_TIMEOUT_S = 600


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def torchrun(folder: str, option_file: str, nproc: int, resume: bool, timeout: float, env: Dict,
             output: bool = False) -> Dict:
    """``python -m torch.distributed.run -m tola_plugin.train`` in ``folder``; -> seconds and the command (and its
    ``stderr`` with ``output``). RuntimeError (with the output's end) when it fails."""
    args = [
        sys.executable, '-m', 'torch.distributed.run', f'--nproc_per_node={nproc}', f'--master_port={free_port()}',
        '-m', 'tola_plugin.train', '-opt', option_file, '--launcher', 'pytorch'
    ] + (['--auto_resume'] if resume else [])
    start = time.monotonic()
    try:
        proc = run_tree(args, timeout=timeout, cwd=folder, env=env)
    except TreeTimeout as err:
        raise RuntimeError(f'torchrun in {folder} ran past {timeout:g} s and was killed with its workers:\n'
                           f'{(err.stderr or "")[-3000:]}') from None
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        said = '\n'.join([line for line in proc.stderr.splitlines() if line.startswith('error: ')][-4:])
        raise RuntimeError(f'torchrun in {folder} failed (exit status {proc.returncode}) after {seconds:.0f} s:\n'
                           f'{said}\n{proc.stderr[-4000:]}')  # the ranks' own error lines first: torchrun's follow
    result = {'seconds': round(seconds, 1), 'command': ' '.join(args[1:])}
    return dict(result, stderr=proc.stderr) if output else result


def read_log(experiment: str) -> str:
    return '\n'.join(
        open(p, encoding='utf-8').read() for p in sorted(glob.glob(os.path.join(experiment, 'train_*.log'))))


def compare_states(a: str, b: str) -> Dict:
    """Equality of two BasicSR network files' 'params' (every tensor bit for bit)."""
    x = torch.load(a, map_location='cpu', weights_only=True)['params']
    y = torch.load(b, map_location='cpu', weights_only=True)['params']
    differ: List[str] = [k for k in x if k not in y or not torch.equal(x[k], y[k])]
    common = [k for k in x if k in y and x[k].shape == y[k].shape]
    max_diff = max((float((x[k].double() - y[k].double()).abs().max()) for k in common), default=0.0)
    return {'tensors': len(x), 'differ': len(differ) + len(set(y) - set(x)), 'max_abs_difference': max_diff}


LR = 3e-3


def resume_verdict(comparison: Dict, moved: Dict, resumed_from: List[str], first: int, validations: int) -> bool:
    """Passed: the resumed and the uninterrupted run's weights are equal bit for bit, the resumed run started from
    iteration ``first``, the uninterrupted one validated, and the weights moved after ``first`` (a resume of a run
    that changes nothing would be equal too)."""
    return comparison['differ'] == 0 and resumed_from == [str(first)] and validations > 0 and moved['differ'] > 0


def resume_step(root: str, data: str, work: str, dry_run: bool) -> Dict:
    """Run the three trainings in ``work`` and compare; -> the step's figures (``passed``: weights equal, resumed
    from ``first``, validated, and moved after ``first``)."""
    nproc = 1 if dry_run else max(1, torch.cuda.device_count())
    batch = 4 if dry_run else 8
    first, final, freq = 2, 3 if dry_run else 4, 2  # 32 lines: 8 (dry run) or 4 iterations per epoch
    common = dict(root=root, data=data, backbone='tiny' if dry_run else 'demo', on_gpu=not dry_run,
                  name='gpu_check_resume', freq=freq, batch=batch, precision='fp32' if dry_run else 'bf16',
                  checkpointing=CHECKPOINTABLE, accumulate=4, workers=0 if dry_run else 2, lr=LR)
    runs, folders = {}, {}
    env = dict(os.environ, OMP_NUM_THREADS='1') if dry_run else dict(os.environ)  # tiny networks: one thread
    for run, total in (('interrupted', first), ('resumed', final), ('uninterrupted', final)):
        folder = folders.setdefault(run, os.path.join(work, 'uninterrupted' if run == 'uninterrupted' else 'resumed'))
        os.makedirs(folder, exist_ok=True)
        opt_file = write_yaml(os.path.join(folder, f'{run}.yml'), training_options(total_iter=total, **common))
        runs[run] = torchrun(folder, opt_file, nproc, resume=run == 'resumed', timeout=RUN_TIMEOUT_S, env=env)
    experiment = os.path.join('experiments', common['name'])
    resumed_log = read_log(os.path.join(folders['resumed'], experiment))
    uninterrupted_log = read_log(os.path.join(folders['uninterrupted'], experiment))
    comparison = compare_states(
        os.path.join(folders['resumed'], experiment, 'models', 'net_g_latest.pth'),
        os.path.join(folders['uninterrupted'], experiment, 'models', 'net_g_latest.pth'))
    models = os.path.join(folders['resumed'], experiment, 'models')
    moved = compare_states(os.path.join(models, f'net_g_{first}.pth'), os.path.join(models, 'net_g_latest.pth'))
    resumed_from = re.findall(r'Resuming training from epoch: \d+, iter: (\d+)\.', resumed_log)
    validations = len(re.findall(r'# psnr:', uninterrupted_log))
    return {
        'passed': resume_verdict(comparison, moved, resumed_from, first, validations), 'processes': nproc,
        'learning_rate': LR, 'moved_after_resume_point': moved, 'iterations_per_epoch': 32 // batch,
        'backend': 'gloo' if dry_run else 'nccl', 'precision': common['precision'],
        'gradient_checkpointing': list(CHECKPOINTABLE), 'accumulate_grad_batches': 4, 'batch_per_gpu': batch,
        'iterations': {'first': first, 'resumed_to': final}, 'resumed_from_iteration': resumed_from,
        'validations_uninterrupted': validations, 'weights': comparison, 'runs': runs
    }
