"""The GPU check's shared-GPU step (issue 50 item 5): what one GPU can test of multi-GPU training. Two torchrun ranks
on one GPU through gloo (``dist_params.backend: gloo``; NCCL refuses a shared GPU: ``distributed.local_cuda_device``),
DDP over LoRA and the LRC with the backbone frozen, gradient checkpointing, bf16 autocast, on the demo backbone (dry
run: the tiny one, gloo on the CPU): ``first`` iterations, then ``--auto_resume`` to ``final`` with the same two
ranks (the state of two ranks resumed), then ``--auto_resume`` with one process, which must be refused in one line (an
exact resume needs the same processes; before the check it was a traceback or a silent restart). Passed: both runs
end, the second resumes from ``first`` and moves the weights, the ranks shared the GPU (said once), the third ends in
that line with exit status 2 and no traceback."""
import os
import re
from typing import Dict

import torch

from tola_lab.gpu_check.configs import training_options, write_yaml
from tola_lab.gpu_check.resume_step import LR, compare_states, read_log, torchrun
from tola_plugin.archs.tola_adaptation import CHECKPOINTABLE

REFUSAL = 'the training data changed since it was saved'
SHARED = re.compile(r'warning: dist_params\.backend gloo: 2 processes share 1 CUDA device')


def shared_gpu_step(root: str, data: str, work: str, dry_run: bool) -> Dict:
    """Run the three torchrun calls in ``work``; -> the step's figures (``passed``: module docstring)."""
    on_gpu = not dry_run
    first, final = 2, 3
    common = dict(root=root, data=data, backbone='tiny' if dry_run else 'demo', on_gpu=on_gpu, name='shared_gpu',
                  freq=first, batch=2, precision='fp32' if dry_run else 'bf16', checkpointing=CHECKPOINTABLE,
                  accumulate=1, workers=0, lr=LR)
    env = dict(os.environ, OMP_NUM_THREADS='1')
    os.makedirs(work, exist_ok=True)
    runs, outputs = {}, {}
    for run, total, nproc in (('two ranks', first, 2), ('two ranks resumed', final, 2), ('one rank resumed', final, 1)):
        opt = training_options(total_iter=total, **common)
        opt['dist_params'] = {'backend': 'gloo'}
        if on_gpu:
            opt['num_gpu'] = 1  # both ranks on the one GPU
        option_file = write_yaml(os.path.join(work, f'{run.replace(" ", "_")}.yml'), opt)
        try:
            runs[run] = torchrun(work, option_file, nproc, resume=run != 'two ranks', timeout=600, env=env, output=True)
            outputs[run] = runs[run].pop('stderr')
        except RuntimeError as err:
            runs[run], outputs[run] = {'failed': True}, str(err)
    experiment = os.path.join(work, 'experiments', common['name'])
    log = read_log(experiment)
    resumed_from = re.findall(r'Resuming training from epoch: \d+, iter: (\d+)\.', log)[:1]  # the two ranks'
    models = os.path.join(experiment, 'models')
    moved = (
        compare_states(os.path.join(models, f'net_g_{first}.pth'), os.path.join(models, 'net_g_latest.pth'))
        if os.path.isfile(os.path.join(models, f'net_g_{first}.pth')) else {'differ': 0})
    one = outputs['one rank resumed']
    # the rank's line, once (torchrun's failure quotes the ranks' error lines before its output's tail)
    said = list(dict.fromkeys(line for line in one.splitlines() if line.startswith('error: ')))
    refused = (
        runs['one rank resumed'].get('failed') and len(said) == 1 and REFUSAL in said[0]
        and 'num_replicas 2 then, 1 now' in said[0] and re.search(r'exitcode\s*:\s*2\b', one))
    shared = bool(SHARED.search(outputs['two ranks'])) if on_gpu else None
    passed = (not runs['two ranks'].get('failed') and not runs['two ranks resumed'].get('failed')
              and resumed_from == [str(first)] and moved['differ'] > 0 and bool(refused) and shared is not False)
    return {
        'passed': passed, 'devices': torch.cuda.device_count() if on_gpu else 0, 'backend': 'gloo',
        'precision': common['precision'], 'gradient_checkpointing': list(CHECKPOINTABLE), 'shared_said': shared,
        'resumed_from_iteration': resumed_from, 'moved_after_resume_point': moved, 'refused_one_rank': bool(refused),
        'one_rank_said': said, 'runs': runs, 'iterations': {'first': first, 'resumed_to': final}
    }
