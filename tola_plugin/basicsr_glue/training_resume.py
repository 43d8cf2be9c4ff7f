"""Resume a BasicSR training run exactly, and only from complete files.

BasicSR's training state holds the epoch, the iteration, the optimizers and the schedulers. Resuming from it
restarts the epoch's sample order from its first batch and re-seeds nothing, so a resumed run sees the
epoch's first batches twice, never sees the rest, and draws different noise. Here the state also records
(key ``'loop'``):

- the position inside the epoch (batches already taken from the training loader), so the sampler skips
  exactly those samples (``EnlargedSampler`` is told through ``resume_skip``);
- every RNG stream the data path and the model draw from (Python ``random``, NumPy's global RNG, torch CPU
  and the CUDA device the rank computes on), per rank, at the moment of saving;
- the same streams at the start of the epoch, before the DataLoader drew its base seed, so the resumed
  loader gives its workers the seeds the interrupted one gave them.

Validation runs with the RNG streams saved and restored (``rng_preserved``), so whether and how often it runs
never changes the training's random numbers.

``find_resume_state`` validates the newest ``N.state`` (pickle-free, complete, with its ``net_*_N.pth``) and
falls back to the newest complete one, naming each skipped file. In a distributed run rank 0 alone decides which
state the run resumes from, and every rank reads that one (``agreed_resume_state``): ranks that chose on their own
could resume different iterations from a lagging or per-node filesystem, and then hang.

Schedulers: a training state holds each scheduler's whole ``__dict__``, so BasicSR's resume would bring back the
saved settings (``periods``, ``milestones``, ...) over the option file's: a finished run extended with longer
periods crashes one step past the old end. ``scheduler_settings`` / ``keep_option_settings`` restore the option
file's settings after the state is loaded (its position, ``last_epoch``, is kept) and say which differed.
"""
import contextlib
import copy
import inspect
import os
import os.path as osp
import random
import re
from collections import Counter
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

from tola_plugin.utils.checkpoint_io import UnsafeCheckpointError, check_weights_file, safe_torch_load
from tola_plugin.utils.user_text import say, shown

LOOP_FORMAT = 1
STATE_NAME = re.compile(r'^(\d+)\.state$')
STATE_KEYS = ('epoch', 'iter', 'optimizers', 'schedulers')


# ------------------------------------------------------------------------------------------------ schedulers
def scheduler_settings(scheduler) -> Dict:
    """The settings a scheduler was built with (its constructor's arguments but the optimizer and ``last_epoch``,
    as the object holds them, plus what it derives from them, e.g. ``cumulative_period``): what resuming a saved
    state would overwrite."""
    names = [
        n for n in inspect.signature(type(scheduler).__init__).parameters
        if n not in ('self', 'optimizer', 'last_epoch', 'verbose')
    ]
    names += [n for n in ('cumulative_period', ) if hasattr(scheduler, n)]
    return {n: copy.deepcopy(getattr(scheduler, n)) for n in names if hasattr(scheduler, n)}


def _comparable(value):
    """A setting in a form that compares and prints plainly (tuples as lists, milestone Counters as sorted lists)."""
    if isinstance(value, Counter):
        return sorted(value.elements())
    return list(value) if isinstance(value, tuple) else value


def keep_option_settings(schedulers: List, configured: List[Dict], log: Callable[[str], None]) -> None:
    """Put back the option file's scheduler ``configured`` settings (``scheduler_settings`` taken before the state
    was loaded) where the loaded state brought others, with one ``log`` line per scheduler that differed."""
    for index, (scheduler, settings) in enumerate(zip(schedulers, configured)):
        differ = [(k, getattr(scheduler, k, None), v) for k, v in settings.items()
                  if k != 'cumulative_period' and _comparable(getattr(scheduler, k, None)) != _comparable(v)]
        for key, value in settings.items():
            setattr(scheduler, key, copy.deepcopy(value))
        if differ:
            said = '; '.join(f'{k}: {_comparable(saved)} saved, {_comparable(now)} in the option file'
                             for k, saved, now in differ)
            log(f'scheduler {index} ({type(scheduler).__name__}) of the resumed state differs from the option file '
                f'({said}): the option file\'s settings are used from iteration {scheduler.last_epoch + 1} on')


# ----------------------------------------------------------------------------------------------- RNG streams
def capture_rng() -> Dict:
    """Every global RNG stream of this process, in a form ``weights_only`` loading accepts (tensors, ints,
    tuples, lists; NumPy's key array as a tensor). Of CUDA only the current device's stream (``'cuda'``: a
    tensor, or None before CUDA is used): the one this rank draws from, so a state resumes on another GPU
    layout (all visible devices' streams would not fit a machine with fewer GPUs)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        'python': random.getstate(), 'numpy': (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                                               float(gauss)), 'torch': torch.get_rng_state(), 'cuda': None
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state['cuda'] = torch.cuda.get_rng_state(torch.cuda.current_device())
    return state


def restore_rng(state: Dict) -> None:
    """Inverse of ``capture_rng``. A CUDA stream goes to the current device; states of tola-plugin before this
    format hold a list of every device's stream, of which the current device's is used."""
    version, internal, gauss = state['python']
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state['numpy']
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state['torch'])
    cuda = state.get('cuda')
    if cuda is None or not torch.cuda.is_available() or (isinstance(cuda, (list, tuple)) and not cuda):
        return
    device = torch.cuda.current_device()
    if isinstance(cuda, (list, tuple)):
        if device >= len(cuda):
            raise ValueError(f'the training state holds the CUDA RNG streams of {len(cuda)} device(s); this process '
                             f'computes on device {device}')
        cuda = cuda[device]
    torch.cuda.set_rng_state(cuda, device)


@contextlib.contextmanager
def rng_preserved() -> Iterator[None]:
    """Run a block (validation) without moving any global RNG stream."""
    saved = capture_rng()
    try:
        yield
    finally:
        restore_rng(saved)


def _gather(obj) -> List:
    """``obj`` of every rank (a list of one outside distributed runs); a collective: every rank must call it."""
    if dist.is_available() and dist.is_initialized():
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out
    return [obj]


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _from_rank_zero(obj):
    """Rank 0's ``obj`` on every rank (``obj`` itself outside distributed runs); a collective."""
    if dist.is_available() and dist.is_initialized():
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    return obj


# ------------------------------------------------------------------------------------- the loop's position
class LoopPosition:
    """Where the training loop is inside its epoch: BasicSR keeps this in local variables of
    ``train_pipeline``, so the overrides report it here (one training loop per process)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.sampler = None
        self.epoch = None
        self.batches = 0  # batches taken from the training loader in this epoch
        self.epoch_rng = None  # RNG streams at the start of this epoch (before the loader's base seed)
        self.pending = None  # the 'loop' record of a state being resumed, until the loop reaches it
        self.notes = []  # messages for the log once BasicSR's logger exists

    # -- hooks called by the BasicSR overrides
    def start_epoch(self, sampler, epoch: int) -> None:
        """``EnlargedSampler.set_epoch``: called before the epoch's DataLoader iterator is created."""
        self.sampler, self.epoch, self.batches = sampler, epoch, 0
        sampler.resume_skip = None
        pending = self.pending
        if pending is not None and pending['epoch'] == epoch:
            self._check_geometry(sampler, pending)
            restore_rng(self._mine(pending['epoch_rng']))
            sampler.resume_skip = (epoch, pending['batches'] * pending['batch_size'])
            self.batches = pending['batches']
        self.epoch_rng = capture_rng()

    def loader_restarted(self) -> None:
        """``*Prefetcher.reset``: the epoch's iterator exists (its base seed is drawn); continue every stream
        exactly where the interrupted run saved it."""
        pending = self.pending
        if pending is not None and pending['epoch'] == self.epoch:
            restore_rng(self._mine(pending['rng']))
            self.pending = None

    def batch_taken(self) -> None:
        self.batches += 1

    # -- saving and resuming
    def record(self, epoch: int, batch_size: int) -> Optional[Dict]:
        """The 'loop' entry of a training state (a collective under DDP: every rank's RNG is gathered)."""
        rngs = _gather(capture_rng())
        if self.sampler is None or epoch != self.epoch:
            return None  # not inside BasicSR's loop (e.g. a model saved by hand)
        return {
            'format': LOOP_FORMAT, 'epoch': epoch, 'batches': self.batches, 'batch_size': int(batch_size),
            'num_replicas': self.sampler.num_replicas, 'total_size': self.sampler.total_size,
            'dataset_len': len(self.sampler.dataset), 'rng': rngs, 'epoch_rng': _gather(self.epoch_rng)
        }

    def resume(self, loop: Optional[Dict], where: str, warn: Callable[[str], None]) -> None:
        """Arm the position of a loaded state; the loop consumes it when it reaches that epoch."""
        if loop is None:
            warn(f'{where} has no loop position (written by BasicSR or an older tola-plugin): the epoch restarts '
                 'from its first batch and the random streams are not restored, so this resume is not an exact '
                 'continuation')
            self.pending = None
            return
        if loop.get('format') != LOOP_FORMAT:
            raise ValueError(f'{where}: loop position format {loop.get("format")!r}, expected {LOOP_FORMAT}')
        self.pending = dict(loop, where=where)

    @staticmethod
    def _check_geometry(sampler, pending):
        now = {
            'num_replicas': sampler.num_replicas, 'total_size': sampler.total_size, 'dataset_len': len(sampler.dataset)
        }
        differ = {k: (pending[k], v) for k, v in now.items() if pending[k] != v}
        if differ:
            said = ', '.join(f'{k} {a} then, {b} now' for k, (a, b) in differ.items())
            raise ValueError(f'{pending["where"]}: the training data changed since it was saved ({said}; from the '
                             'dataset length, dataset_enlarge_ratio and the number of processes), so its position '
                             'in the epoch means nothing now. Resume with the same data and processes, or start a '
                             'new run from its weights (path.pretrain_network_g).')

    @staticmethod
    def _mine(per_rank: List):
        rank = _rank()
        if len(per_rank) <= rank:
            raise ValueError(f'the training state holds RNG streams of {len(per_rank)} process(es); this is rank '
                             f'{rank}')
        return per_rank[rank]


LOOP = LoopPosition()


def warn_early(message: str) -> None:
    """A warning before BasicSR's logger exists (its file handler is added later): stderr now, the log later
    (``LOOP.notes``, written by ``exact_resume.resume_training``)."""
    say(f'warning: {message}')
    LOOP.notes.append(shown(message))


# ------------------------------------------------------------------------------------ finding a usable state
def network_files(opt: Dict, resume_iter: int) -> List[str]:
    """The ``net_*_N.pth`` files BasicSR's ``check_resume`` will load for a state of iteration N."""
    ignored = opt['path'].get('ignore_resume_networks') or []
    return [
        osp.join(opt['path']['models'], f'net_{key[len("network_"):]}_{resume_iter}.pth') for key in opt
        if key.startswith('network_') and key not in ignored
    ]


def read_training_state(path: str, opt: Dict) -> Dict:
    """Load and check one training state: pickle-free, complete, with readable network files. Raises
    ValueError / FileNotFoundError naming the file and what is wrong."""
    state = safe_torch_load(path, 'training state')
    if not isinstance(state, dict) or any(k not in state for k in STATE_KEYS):
        raise UnsafeCheckpointError(f'training state {path!r} is not a BasicSR training state (expected a dict '
                                    f'with {list(STATE_KEYS)})')
    for net_file in network_files(opt, state['iter']):
        if not osp.isfile(net_file):
            raise FileNotFoundError(f'training state {path!r} has no network file {net_file!r}')
        check_weights_file(net_file, 'network checkpoint')
    return state


def remove_interrupted_saves(folder: str, names: List[str], warn: Callable[[str], None]) -> None:
    """Delete the temporary files of saves that were interrupted (atomic writes: never complete); a file that is
    already gone (removed by another process) is fine."""
    for name in names:
        if name.startswith('.') and name.endswith('.tmp'):
            try:
                os.remove(osp.join(folder, name))
            except FileNotFoundError:
                continue
            warn(f'removed {osp.join(folder, name)}, the temporary file of an interrupted save')


def find_resume_state(opt: Dict, warn: Callable[[str], None]) -> Tuple[Optional[str], Optional[Dict]]:
    """(path, state) of the newest usable ``N.state`` of the experiment, or (None, None) when it has none.

    A newer file that is incomplete, corrupt, or lacks its network files is skipped with a warning naming
    it; if every state is unusable that is an error (training does not silently start over). No state at all where
    an archive of the experiment (``<name>_archived_<time>``, BasicSR's rename at a fresh start) holds one is an
    error naming the archive (``check_no_archived_state``).
    """
    folder = opt['path']['training_states']
    if not osp.isdir(folder):
        check_no_archived_state(opt)
        return None, None
    names = os.listdir(folder)
    if opt.get('rank', 0) == 0:  # under torchrun every rank looks; only rank 0 (the one that saves) cleans up
        remove_interrupted_saves(folder, names, warn)
    iters = sorted((int(m.group(1)) for m in map(STATE_NAME.match, names) if m), reverse=True)
    problems = []
    for it in iters:
        path = osp.join(folder, f'{it}.state')
        try:
            return path, read_training_state(path, opt)
        except (ValueError, OSError) as err:
            problems.append(f'{path}: {err}')
            warn(f'--auto_resume skips {path}: {err}')
    if problems:
        raise ValueError(f'--auto_resume: no usable training state in {folder}: ' + '; '.join(problems))
    check_no_archived_state(opt)
    return None, None


def archived_states(opt: Dict) -> List[Tuple[str, str]]:
    """(archive folder, its newest ``N.state``) of every ``<experiments_root>_archived_*`` that holds a training
    state, newest archive first."""
    states = osp.normpath(opt['path']['training_states'])
    root = osp.normpath(opt['path'].get('experiments_root') or osp.dirname(states))
    parent, prefix = osp.dirname(root), osp.basename(root) + '_archived_'
    try:
        archives = sorted((n for n in os.listdir(parent or '.') if n.startswith(prefix)), reverse=True)
    except OSError:
        return []
    found = []
    for name in archives:
        archived = osp.join(parent, name, osp.relpath(states, root))
        try:
            iters = [int(m.group(1)) for m in map(STATE_NAME.match, os.listdir(archived)) if m]
        except OSError:
            continue
        if iters:
            found.append((osp.join(parent, name), osp.join(archived, f'{max(iters)}.state')))
    return found


def check_no_archived_state(opt: Dict) -> None:
    """``--auto_resume`` found no state in the experiment: a ValueError when an archive of it holds one (a start
    that failed after BasicSR moved the experiment away, or a fresh start that saved nothing yet), rather than a
    silent start from iteration 0."""
    archived = archived_states(opt)
    if archived:
        archive, state = archived[0]
        root = opt['path'].get('experiments_root') or osp.dirname(osp.normpath(opt['path']['training_states']))
        raise ValueError(f'--auto_resume: {root} holds no training state, but {archive} does ({state}): a start '
                         f'without --auto_resume moved the experiment there (BasicSR renames {root} when a run starts '
                         f'afresh). To continue it, move it back (mv {archive} {root}, after moving away what '
                         f'{root} holds now) and run again; to start over, run without --auto_resume')


def agreed_resume_state(opt: Dict, warn: Callable[[str], None]) -> Tuple[Optional[str], Optional[Dict]]:
    """(path, state) that every rank resumes from, or (None, None): rank 0 decides (``find_resume_state`` with
    ``--auto_resume``, else ``path.resume_state``) and every rank reads that file itself. Where any rank cannot (a
    lagging or per-node filesystem), every rank raises the same ValueError naming each such rank and what it lacks,
    instead of ranks resuming different iterations and hanging. A collective: every rank must call it."""
    rank, path, state, problem = _rank(), opt['path'].get('resume_state'), None, ''
    if opt['auto_resume'] and rank == 0:
        try:
            path, state = find_resume_state(opt, warn)
        except (ValueError, OSError) as err:
            problem = str(err)
    path, decided = _from_rank_zero((path, problem))
    if decided:
        raise ValueError(decided if rank == 0 else f'rank 0 found no state to resume from: {decided}')
    if opt['auto_resume'] and path is not None:  # the same state in this rank's own experiment folder
        path = osp.join(opt['path']['training_states'], osp.basename(path))
    if path is not None and state is None:
        try:
            state = read_training_state(path, opt)
        except (ValueError, OSError) as err:
            problem = f'rank {rank}: {err}'
    gathered = _gather(problem)
    if len(gathered) == 1 and problem:  # one process: the error itself, no ranks to speak of
        raise ValueError(problem.split(': ', 1)[1])
    problems = [p for p in gathered if p]
    if problems:
        raise ValueError(f'rank 0 resumes from {osp.basename(path)}, but not every rank can read it '
                         f'({"; ".join(problems)}): every rank must see the same training states (one filesystem '
                         'shared by all nodes, up to date)')
    return path, state
