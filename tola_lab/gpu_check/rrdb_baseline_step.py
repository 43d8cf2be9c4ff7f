"""The GPU check's rrdb_baseline step: the demo's plain-CNN row trained with a GPU's compute (docs/demo_backbone.md,
"The plain CNN with a GPU's compute"). A stock BasicSR RRDBNet x4 (options/demo/train_RRDB_demo_same_data.yml's) from
scratch, through BasicSR's launcher, on the lines the demo model's GPU adaptation trains on (3,000 rendered lines of
seed 0, degraded x4 on the fly; rendered here with the carried fonts) at its batch, for the time the step is given;
its weights and record come back in ``out`` and are scored here, on ``make demo``'s held-out lines, by the commands
of that section. A dry run does the same on the CPU with four lines and a few iterations."""
import json
import os
import shutil
import time
from typing import Dict

import torch

from tola_lab.gpu_check.configs import read_yaml, write_yaml
from tola_lab.gpu_check.demo_model_step import adaptation_lines, carried_fonts, latest_checkpoint, launch_training

OPTIONS = 'options/demo/train_RRDB_demo_same_data.yml'
WEIGHTS_FILE, RECORD_FILE = 'net_g_rrdb.pth', 'rrdb_baseline.json'
# The demo adaptation's batch on a GPU (demo_model_step.GPU_ADAPTATION) and an assumed speed (the lines are degraded
# on the fly by the loader's workers): the schedule is sized to the time left; a slower run is stopped at the
# deadline with its last checkpoint, a faster one ends early. The record says which.
GPU_RUN = dict(batch=16, seconds_per_iteration=0.05, checkpoint_every=500, workers=12, max_iter=50000)
DRY_RUN = dict(batch=2, seconds_per_iteration=10.0, checkpoint_every=2, workers=0, max_iter=4)
RESERVE_S = 20  # after training: copying the weights and writing the record


def rrdb_options(root: str, work: str, lines: str, dry_run: bool, seconds: float) -> Dict:
    """The plain-CNN row's option file on ``lines`` with the step's batch, its schedule sized to ``seconds``.
    -> {'option_file', 'total_iter'}."""
    size = DRY_RUN if dry_run else GPU_RUN
    total = min(size['max_iter'], max(2, int(seconds / size['seconds_per_iteration'])))
    opt = read_yaml(os.path.join(root, OPTIONS))
    opt.update(name='demo_RRDB_gpu', num_gpu=0 if dry_run else 1)
    opt['datasets']['train'].update(dataroot_gt=lines, labels=os.path.join(lines, 'labels.tsv'),
                                    batch_size_per_gpu=size['batch'], num_worker_per_gpu=size['workers'],
                                    dataset_enlarge_ratio=100)
    opt['train'].update(total_iter=total)
    opt['train']['scheduler']['periods'] = [total]
    opt['logger'].update(print_freq=max(1, total // 20), save_checkpoint_freq=size['checkpoint_every'])
    return {'option_file': write_yaml(os.path.join(work, 'rrdb.yml'), opt), 'total_iter': total}


def rrdb_baseline_step(root: str, data: str, work: str, dry_run: bool, out: str, seconds: float) -> Dict:
    """Render, train within ``seconds`` (less ``RESERVE_S``), copy the newest weights into ``out``; -> the figures."""
    start = time.monotonic()
    if not dry_run and not torch.cuda.is_available():
        return {'passed': False, 'error': 'no usable GPU'}
    left = lambda: seconds - RESERVE_S - (time.monotonic() - start)  # noqa: E731
    os.makedirs(work, exist_ok=True)
    renderer, lines = adaptation_lines(work, carried_fonts(data), dry_run)
    if renderer is not None:
        renderer.join(max(left(), 1.0))
        renderer.terminate()
    if not os.path.isfile(os.path.join(lines, 'labels.tsv')):
        return {'passed': False, 'error': f'the lines were not rendered in time ({lines})'}
    record = dict(
        rrdb_options(root, work, lines, dry_run, max(left() - 15, 1.0)), lines=lines,
        device=torch.cuda.get_device_name(0) if not dry_run else 'cpu (dry run)',
        render_seconds=round(time.monotonic() - start, 1))
    run = launch_training(record['option_file'], max(left(), 1.0), work)
    record.update(exit_status=run['exit_status'], output_tail=run['output_tail'], train_seconds=run['seconds'])
    weights = latest_checkpoint(os.path.join(work, 'experiments', 'demo_RRDB_gpu'))
    os.makedirs(out, exist_ok=True)
    if weights is not None:
        shutil.copy2(weights, os.path.join(out, WEIGHTS_FILE))
    record.update(weights=os.path.basename(weights) if weights else None, seconds=round(time.monotonic() - start, 1))
    with open(os.path.join(out, RECORD_FILE), 'w', encoding='utf-8') as f:
        json.dump(record, f, indent=1, default=str)
    summary = {k: v for k, v in record.items() if k not in ('output_tail', 'lines')}
    return dict(summary, passed=weights is not None and not record['output_tail'], out=out)
