"""Every change this plugin makes to BasicSR 1.4.2, in one place.

1-3. The three functions that assume a GPU, replaced so CPU and gloo DDP work; each keeps upstream
     behaviour when CUDA is present (nccl, cuda devices).
4.   ``EnlargedSampler`` forwards the epoch (and each visit's unfolded index) to datasets that ask for
     it, so online degradation is reproducible per (seed, epoch, index); BasicSR's own datasets are
     unaffected.
"""
import os
import os.path as osp

import torch
import torch.distributed as dist
from torch.nn.parallel import DataParallel, DistributedDataParallel

from tola_plugin import _compat  # noqa: F401  (before basicsr)
import basicsr.train
import basicsr.utils.options
from basicsr.data.data_sampler import EnlargedSampler
from basicsr.models.base_model import BaseModel
from basicsr.utils import scandir
from basicsr.utils import check_resume


def init_dist(launcher, backend=None, **kwargs):
    """Upstream computes ``rank % torch.cuda.device_count()`` (ZeroDivisionError on CPU) and forces nccl."""
    import torch.multiprocessing as mp
    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method('spawn')
    if launcher == 'slurm':
        raise NotImplementedError('slurm launcher: use torchrun (--launcher pytorch)')
    if launcher != 'pytorch':
        raise ValueError(f'Invalid launcher type: {launcher}')
    if backend is None:
        backend = 'nccl' if torch.cuda.is_available() else 'gloo'
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', os.environ['RANK'])) % torch.cuda.device_count())
    dist.init_process_group(backend=backend, **kwargs)


def load_resume_state(opt):
    """Upstream calls torch.cuda.current_device() (fails on CPU) and looks CWD-relative for states."""
    resume_state_path = None
    if opt['auto_resume']:
        state_path = osp.join(opt['path']['experiments_root'], 'training_states')
        if osp.isdir(state_path):
            states = [int(v.split('.state')[0]) for v in scandir(state_path, suffix='state')]
            if states:
                resume_state_path = osp.join(state_path, f'{max(states):.0f}.state')
                opt['path']['resume_state'] = resume_state_path
    elif opt['path'].get('resume_state'):
        resume_state_path = opt['path']['resume_state']
    if resume_state_path is None:
        return None
    if torch.cuda.is_available() and opt['num_gpu'] != 0:
        location = f'cuda:{torch.cuda.current_device()}'
    else:
        location = 'cpu'
    resume_state = torch.load(resume_state_path, map_location=location, weights_only=True)
    check_resume(opt, resume_state['iter'])
    return resume_state


def model_to_device(self, net):
    """Upstream passes ``device_ids=[torch.cuda.current_device()]`` to DDP, which fails on CPU."""
    net = net.to(self.device)
    if self.opt['dist']:
        find_unused = self.opt.get('find_unused_parameters', False)
        if self.device.type == 'cuda':
            net = DistributedDataParallel(net, device_ids=[torch.cuda.current_device()],
                                          find_unused_parameters=find_unused)
        else:
            net = DistributedDataParallel(net, find_unused_parameters=find_unused)
    elif self.opt['num_gpu'] > 1:
        net = DataParallel(net)
    return net


_original_set_epoch, _original_iter = EnlargedSampler.set_epoch, EnlargedSampler.__iter__


def sampler_set_epoch(self, epoch):
    """Upstream never tells the dataset the epoch, so every epoch would repeat epoch 0's degradations.

    BasicSR's loop calls ``set_epoch`` before re-creating the DataLoader iterator; with
    ``persistent_workers: false`` (its default) workers are forked afresh then and see the new epoch.
    """
    _original_set_epoch(self, epoch)
    dataset_set_epoch = getattr(self.dataset, 'set_epoch', None)
    if callable(dataset_set_epoch):
        dataset_set_epoch(epoch)


def sampler_iter(self):
    """Upstream yields ``v % len(dataset)``, so the k visits of ``dataset_enlarge_ratio: k`` share one
    random stream; datasets with ``accepts_enlarged_indices = True`` get ``v`` itself (same permutation,
    same rank split) and read sample ``v % len`` themselves."""
    if not getattr(self.dataset, 'accepts_enlarged_indices', False):
        return _original_iter(self)
    g = torch.Generator()
    g.manual_seed(self.epoch)
    indices = torch.randperm(self.total_size, generator=g).tolist()
    return iter(indices[self.rank:self.total_size:self.num_replicas])


basicsr.utils.options.init_dist = init_dist  # parse_options calls the name imported into options
basicsr.train.load_resume_state = load_resume_state
BaseModel.model_to_device = model_to_device
EnlargedSampler.set_epoch = sampler_set_epoch
EnlargedSampler.__iter__ = sampler_iter


# ---------------------------------------------------------------------------------------------------------------
# 5. MessageLogger ETA (issue 10). Upstream estimates the remaining time as avg x (total - current - 1), so the
#    last logged iteration reads "eta: -1 day, 23:59:59", and it averages over current - start + 1 iterations
#    although its clock is reset after the first one. Fixed: avg over the iterations actually timed, times
#    max(total - current, 0). Everything else of the message is upstream's.
import datetime  # noqa: E402
import time  # noqa: E402

from basicsr.utils.dist_util import master_only  # noqa: E402
from basicsr.utils.logger import MessageLogger  # noqa: E402

_original_reset_start_time = MessageLogger.reset_start_time


def message_logger_reset_start_time(self):
    """basicsr.train resets the clock once, after the first iteration of a fresh run: remember that."""
    _original_reset_start_time(self)
    self.timed_from_iter = self.start_iter + 1


def message_logger_eta_seconds(self, current_iter: int) -> float:
    """Seconds left after ``current_iter`` (never negative), from the mean time of the timed iterations."""
    timed = current_iter - getattr(self, 'timed_from_iter', self.start_iter)
    if timed <= 0:
        return 0.0
    return (time.time() - self.start_time) / timed * max(self.max_iters - current_iter, 0)


def message_logger_call(self, log_vars):
    """Upstream ``MessageLogger.__call__`` (basicsr 1.4.2) with the ETA of ``message_logger_eta_seconds``."""
    epoch = log_vars.pop('epoch')
    current_iter = log_vars.pop('iter')
    lrs = log_vars.pop('lrs')
    message = f'[{self.exp_name[:5]}..][epoch:{epoch:3d}, iter:{current_iter:8,d}, lr:('
    for v in lrs:
        message += f'{v:.3e},'
    message += ')] '
    if 'time' in log_vars.keys():
        iter_time = log_vars.pop('time')
        data_time = log_vars.pop('data_time')
        eta_str = str(datetime.timedelta(seconds=int(message_logger_eta_seconds(self, current_iter))))
        message += f'[eta: {eta_str}, time (data): {iter_time:.3f} ({data_time:.3f})] '
    for k, v in log_vars.items():
        message += f'{k}: {v:.4e} '
        if self.use_tb_logger and 'debug' not in self.exp_name:
            self.tb_logger.add_scalar(f'losses/{k}' if k.startswith('l_') else k, v, current_iter)
    self.logger.info(message)


MessageLogger.reset_start_time = message_logger_reset_start_time
MessageLogger.__call__ = master_only(message_logger_call)
