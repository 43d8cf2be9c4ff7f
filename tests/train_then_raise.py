"""``python tests/train_then_raise.py RANK ITER KIND -opt FILE.yml --launcher pytorch``: the training launcher whose
rank RANK raises in the middle of iteration ITER's step (after its forward, before the backward's gradient all-reduce
that the other ranks then wait in): KIND 'error' a RuntimeError, 'oom' torch's OutOfMemoryError as CUDA raises it.
``destroy_process_group`` blocks, as NCCL's can while peers wait in a collective: gloo's returns at once, which would
hide a launcher that waits on it."""
import sys
import time

import torch
import torch.distributed as dist

from tola_plugin import train  # registers the plugin
from tola_plugin.models.tola_model import TOLAModel


def main():
    rank, fail_at, kind = int(sys.argv.pop(1)), int(sys.argv.pop(1)), sys.argv.pop(1)
    step = TOLAModel.optimize_parameters

    def step_then_raise(self, current_iter):
        if current_iter == fail_at and dist.get_rank() == rank:
            self.net_g(self.lq)  # mid-step: the forward ran
            if kind == 'oom':
                raise torch.cuda.OutOfMemoryError(f'CUDA out of memory. Tried to allocate 2.00 GiB. GPU {rank} has a '
                                                  'total capacity of 79.11 GiB of which 1.25 GiB is free. (planted)')
            raise RuntimeError(f'planted failure of rank {rank} at iteration {current_iter}')
        return step(self, current_iter)

    TOLAModel.optimize_parameters = step_then_raise
    dist.destroy_process_group = lambda *args, **kwargs: time.sleep(3600)
    train.main()


if __name__ == '__main__':
    main()
