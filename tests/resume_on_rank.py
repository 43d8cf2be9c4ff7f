"""``python tests/resume_on_rank.py RANK WORLD PORT EXPERIMENT ITERS``: one rank of a gloo group on 127.0.0.1:PORT
whose experiment folder (its own, as on a per-node filesystem) holds training states of the comma-separated ITERS;
it runs BasicSR's ``load_resume_state`` with ``--auto_resume`` (the plugin's) and prints one JSON line: the
iteration it resumes from, or the error."""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

import basicsr.train

import tola_plugin  # noqa: F401  (patches load_resume_state)


def main():
    rank, world, port, root, iters = sys.argv[1:6]
    paths = {k: os.path.join(root, k) for k in ('models', 'training_states')}
    for it in [int(i) for i in iters.split(',') if i]:
        os.makedirs(paths['models'], exist_ok=True)
        os.makedirs(paths['training_states'], exist_ok=True)
        torch.save({'epoch': 0, 'iter': it, 'optimizers': [], 'schedulers': []},
                   os.path.join(paths['training_states'], f'{it}.state'))
        torch.save({'params': {'w': torch.ones(1)}}, os.path.join(paths['models'], f'net_g_{it}.pth'))
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=int(rank), world_size=int(world),
                            timeout=datetime.timedelta(seconds=600))  # the other rank may import slowly
    opt = {
        'name': 'exp', 'num_gpu': 0, 'auto_resume': True, 'rank': int(rank), 'network_g': {'type': 'RRDBNet'},
        'path': dict(paths, experiments_root=root, resume_state=None)
    }
    try:
        state = basicsr.train.load_resume_state(opt)
        print(json.dumps({'iter': None if state is None else state['iter']}), flush=True)
    except ValueError as err:
        print(json.dumps({'error': str(err)}), flush=True)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
