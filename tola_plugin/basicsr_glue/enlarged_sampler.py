"""The BasicSR glue's sampler: ``EnlargedSampler`` forwards the epoch (and each visit's unfolded index) to datasets that
ask for it, so online degradation is reproducible per (seed, epoch, index); BasicSR's own datasets are unaffected. It is
also where a resumed run re-enters its epoch (``exact_resume``, ``training_resume.LOOP``): the samples already trained
on are skipped."""
import torch

from basicsr.data.data_sampler import EnlargedSampler

from tola_plugin.basicsr_glue.resource_bounds import sampler_indices_fit
from tola_plugin.basicsr_glue.training_resume import LOOP

_original_init, _original_set_epoch, _original_iter = (EnlargedSampler.__init__, EnlargedSampler.set_epoch,
                                                       EnlargedSampler.__iter__)


def sampler_init(self, dataset, num_replicas, rank, ratio=1):
    """Upstream's, once the epoch's index list is known to fit in memory (``resource_bounds``): a huge
    ``dataset_enlarge_ratio`` ended in a traceback of ``torch.randperm``."""
    sampler_indices_fit(len(dataset), ratio, num_replicas)
    _original_init(self, dataset, num_replicas, rank, ratio)


def sampler_set_epoch(self, epoch):
    """Upstream never tells the dataset the epoch, so every epoch would repeat epoch 0's degradations.

    BasicSR's loop calls ``set_epoch`` before re-creating the DataLoader iterator; with
    ``persistent_workers: false`` (its default) workers are forked afresh then and see the new epoch.
    It is also where a resumed run re-enters its epoch (``LOOP.start_epoch``: samples to skip, RNG streams).
    """
    _original_set_epoch(self, epoch)
    dataset_set_epoch = getattr(self.dataset, 'set_epoch', None)
    if callable(dataset_set_epoch):
        dataset_set_epoch(epoch)
    LOOP.start_epoch(self, epoch)


def sampler_iter(self):
    """Upstream yields ``v % len(dataset)``, so the k visits of ``dataset_enlarge_ratio: k`` share one
    random stream; datasets with ``accepts_enlarged_indices = True`` get ``v`` itself (same permutation,
    same rank split) and read sample ``v % len`` themselves. In the epoch a run resumes in, the samples the
    interrupted run already trained on are skipped (``resume_skip``)."""
    if getattr(self.dataset, 'accepts_enlarged_indices', False):
        g = torch.Generator()
        g.manual_seed(self.epoch)
        indices = torch.randperm(self.total_size, generator=g).tolist()[self.rank:self.total_size:self.num_replicas]
    else:
        indices = list(_original_iter(self))
    skip = getattr(self, 'resume_skip', None)
    if skip is not None and skip[0] == self.epoch:
        indices = indices[skip[1]:]
    return iter(indices)


def apply():
    EnlargedSampler.__init__ = sampler_init
    EnlargedSampler.set_epoch = sampler_set_epoch
    EnlargedSampler.__iter__ = sampler_iter
