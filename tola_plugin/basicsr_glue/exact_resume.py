"""The BasicSR glue's exact resume. The training state also holds the position inside the epoch and every RNG stream
(``BaseModel.save_training_state``); ``BaseModel.resume_training`` arms them, the sampler skips the consumed samples
(``enlarged_sampler``), the prefetchers count the batches and continue the RNG streams, and ``BaseModel.validation``
leaves the RNG streams untouched (the bookkeeping: ``training_resume.py``). The option file's scheduler settings win
over the saved ones (a log line says which differed)."""
import os

from basicsr.data.prefetch_dataloader import CPUPrefetcher, CUDAPrefetcher
from basicsr.models.base_model import BaseModel
from basicsr.utils import get_root_logger
from basicsr.utils.dist_util import get_dist_info

from tola_plugin.basicsr_glue import distributed
from tola_plugin.basicsr_glue.atomic_saves import save_with_retries
from tola_plugin.basicsr_glue.training_resume import LOOP, keep_option_settings, rng_preserved, scheduler_settings
from tola_plugin.options.reader import OptionError

_original_resume_training = BaseModel.resume_training
_original_validation = BaseModel.validation


def save_training_state(self, epoch, current_iter):
    """Upstream's state (epoch, iter, optimizers, schedulers) plus the loop position and RNG streams of every
    rank ('loop'), written atomically by rank 0 (``atomic_saves``). Called on every rank (gathering the RNG is a
    collective)."""
    if current_iter == -1:
        return
    loop = LOOP.record(epoch, distributed.loader_batch_size(self.opt))
    if get_dist_info()[0] != 0:
        return
    state = {
        'epoch': epoch, 'iter': current_iter, 'optimizers': [o.state_dict() for o in self.optimizers],
        'schedulers': [s.state_dict() for s in self.schedulers], 'loop': loop
    }
    save_with_retries(state, os.path.join(self.opt['path']['training_states'], f'{current_iter}.state'),
                      'training state')


def resume_training(self, resume_state):
    """Upstream restores optimizers and schedulers (the option file's scheduler settings are put back where the
    saved ones differ, with a log line); also arm the loop position and RNG streams."""
    configured = [scheduler_settings(s) for s in self.schedulers]
    _original_resume_training(self, resume_state)
    logger = get_root_logger()
    for note in LOOP.notes:  # warnings printed before the logger existed
        logger.warning(note)
    LOOP.notes.clear()
    keep_option_settings(self.schedulers, configured, logger.warning)
    LOOP.resume(resume_state.get('loop'), self.opt['path'].get('resume_state') or 'the training state', logger.warning)


def validation(self, dataloader, current_iter, tb_logger, save_img=False):
    """Upstream's validation, leaving every RNG stream as it found it (its DataLoader draws a base seed)."""
    with rng_preserved():
        return _original_validation(self, dataloader, current_iter, tb_logger, save_img)


def empty_epoch(loader) -> None:
    """An epoch that gave no batch: BasicSR's loop would run its epochs empty and save the untrained network as if it
    had trained (its loader drops the last incomplete batch). -> OptionError naming the sizes."""
    samples = len(loader.sampler) if hasattr(loader.sampler, '__len__') else len(loader.dataset)
    raise OptionError(f'datasets.train: an epoch has {samples:,} sample(s) per process (the dataset\'s '
                      f'{len(loader.dataset):,} x dataset_enlarge_ratio, over the processes) and batch_size_per_gpu is '
                      f'{loader.batch_size:,}: no batch can be drawn (the last incomplete batch is dropped); set '
                      f'batch_size_per_gpu to at most {samples:,} or raise dataset_enlarge_ratio')


def _prefetcher_hooks(cls):
    original_reset, original_next = cls.reset, cls.next

    def reset(self):
        original_reset(self)
        LOOP.loader_restarted()

    def next_batch(self):
        batch = original_next(self)
        if batch is not None:
            LOOP.batch_taken()
        elif LOOP.batches == 0:
            empty_epoch(self.ori_loader)
        return batch

    reset.__doc__ = f'{cls.__name__}.reset, then continue a resumed run\'s RNG streams (training_resume.LOOP).'
    next_batch.__doc__ = f'{cls.__name__}.next, counting the batches of the epoch for the training state.'
    cls.reset, cls.next = reset, next_batch


def apply():
    BaseModel.save_training_state = save_training_state
    BaseModel.resume_training = resume_training
    BaseModel.validation = validation
    _prefetcher_hooks(CPUPrefetcher)
    _prefetcher_hooks(CUDAPrefetcher)
