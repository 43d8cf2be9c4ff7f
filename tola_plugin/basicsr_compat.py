"""Every change this plugin makes to BasicSR 1.4.2 and its environment, in one place: ``tola_plugin/__init__``
imports this module before anything else, so no other module of the package needs to care.

0.   The torchvision shim, run before any ``import basicsr`` (``tola_plugin_shim.install_torchvision_shim``: the
     import hook applies it before basicsr's own imports; here it covers a process without the hook): basicsr
     1.4.2 (the last PyPI release) imports ``torchvision.transforms.functional_tensor``, which torchvision
     removed in 0.17.

1-3. The three functions that assume a GPU, replaced so CPU and gloo DDP work: the process group starts once the
     options are known (backend by device, one GPU per process, timeout, device binding; torchrun and srun), DDP
     broadcasts no frozen buffers, DataParallel is refused for frozen backbones (decisions: utils/distributed.py).
4.   ``EnlargedSampler`` forwards the epoch (and each visit's unfolded index) to datasets that ask for
     it, so online degradation is reproducible per (seed, epoch, index); BasicSR's own datasets are
     unaffected.
5.   Start-up checks (``parse_options``, train and test launchers): the option file is read by the package's one
     safe, bounded reader (utils/option_files.py; BasicSR's own ``yaml.load`` gets its loader, and
     ``--force_yml`` lists are read as YAML, not ``eval``-ed), the keys every run needs are checked on the file as
     written before BasicSR's parser indexes them, then strict option keys for every model, ``total_iter > 0``,
     ``num_gpu`` no more than the devices present (utils/option_checks.py), ``num_gpu: auto`` refused when a
     driver is installed that this torch cannot use; the CUDA math options ``allow_tf32`` and ``deterministic``
     (utils/cuda_math.py); and one run per experiment (results) folder: a lock file with the PID, stale locks
     replaced (utils/run_lock.py).
6.   Checkpoints and training states are written atomically (temporary file, fsync, rename); a save that
     keeps failing is an error instead of upstream's "Just ignore it".
7.   ``load_resume_state``: reads states weights-only and, with ``--auto_resume``, skips an incomplete or
     corrupt newest state (or one without its network file) for the newest complete one, with a warning
     naming each skipped file; in a distributed run rank 0 decides and every rank checks it can read that file.
8.   Exact resume: the training state also holds the position inside the epoch and every RNG stream;
     ``resume_training`` arms them, the sampler skips the consumed samples, and validation leaves the RNG
     streams untouched (utils/training_resume.py). The option file's scheduler settings win over the saved
     ones (a log line says which differed).
9.   ``BaseModel.load_network`` reads weights-only (upstream's bare ``torch.load``).
10.  ``MessageLogger``'s ETA: the mean over the timed iterations, never negative (upstream's last line reads
     "eta: -1 day, 23:59:59").
11.  BasicSR's own launchers: ``basicsr.train`` and ``basicsr.test`` get the plugin's ``parse_options`` and
     ``load_resume_state``. Run as scripts (a checkout's ``basicsr/train.py``, ``python -m basicsr.train``,
     torchrun), they execute in their own ``__main__`` namespace instead, so ``parse_options`` is also patched
     where they import it from, and gives the calling script the same functions; run from an installed basicsr
     (``python -m``), whose root would be site-packages, experiments/, tb_logger/ and results/ go under the
     current directory instead. Their bad input ends in one ``error:`` line (exit status 2) as with our launchers
     (``cli_errors.install_excepthook``; ``--debug`` shows the traceback).
12.  What the command line may change beyond upstream's ``--force_yml`` (which can only set values): an entry of
     ``val.metrics`` set to ``~`` is removed (upstream would call the metric ``None``: ``val:metrics:lpips=~``
     drops LPIPS and keeps PSNR/SSIM); ``short_run: N`` applies the short-run preset (utils/short_run.py). Then
     every weight file a metric or loss of the run reads is checked at start: a missing one is an error naming it,
     where it comes from, and the override that runs without it (pretrained/metric_weights.require_run_weights).
13.  BasicSR's LMDB reader (``LmdbBackend``) checks each LMDB before mapping it (utils/lmdb_check.py): a truncated
     ``data.mdb`` is an error naming it, not a SIGBUS.
"""
import sys

from tola_plugin_shim import install_torchvision_shim

install_torchvision_shim()

# isort: split
# Everything below imports basicsr, so it comes after the shim (setup.cfg lets flake8 accept E402 here).
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DataParallel, DistributedDataParallel

import basicsr.test
import basicsr.train
import basicsr.utils.options
from basicsr.data.data_sampler import EnlargedSampler
from basicsr.data.prefetch_dataloader import CPUPrefetcher, CUDAPrefetcher
from basicsr.models.base_model import BaseModel
from basicsr.utils import check_resume, get_root_logger, set_random_seed
from basicsr.utils.dist_util import get_dist_info, master_only
from basicsr.utils.file_client import LmdbBackend
from basicsr.utils.logger import MessageLogger

from tola_plugin.pretrained.metric_weights import require_run_weights
from tola_plugin.utils import cuda_math, distributed, run_lock
from tola_plugin.utils.checkpoint_io import atomic_torch_save, weights_only_loads
from tola_plugin.utils.cli_errors import install_excepthook
from tola_plugin.utils.devices import cuda_device_count
from tola_plugin.utils.lmdb_check import check_lmdb
from tola_plugin.utils.option_checks import check_options, check_required
from tola_plugin.utils.option_files import OptionError, OptionLoader, read_option_file, read_option_value
from tola_plugin.utils.short_run import apply_short_run
from tola_plugin.utils.training_resume import (LOOP, agreed_resume_state, keep_option_settings, rng_preserved,
                                               scheduler_settings)


def run_pipeline(pipeline) -> int:
    """Run BasicSR's ``train_pipeline`` or ``test_pipeline`` from the current directory, as ``python -m
    tola_plugin.train`` / ``.test`` do: every ``torch.load`` weights-only; afterwards the run's locks are released and
    a distributed run's process group destroyed (torchrun / srun: NCCL warns, and may leak, when a group is never
    destroyed). A rank of several that raises ends its process at once instead, naming the error
    (``distributed.end_failed_rank``: destroying the group could wait on the other ranks for the whole timeout).
    -> 0."""
    try:
        with weights_only_loads():
            pipeline(os.getcwd())
    except Exception as err:
        if distributed.distributed_world() > 1:
            run_lock.release_all()
            distributed.end_failed_rank(err)
        raise
    finally:
        run_lock.release_all()
        distributed.end_process_group()
    return 0


def _warn_early(message: str) -> None:
    """A warning before BasicSR's logger exists (its file handler is added later): stderr now, the log later."""
    print(f'warning: {message}', file=sys.stderr, flush=True)
    LOOP.notes.append(message)


# ---------------------------------------------------------------------------------------------- 1-3: CPU/DDP
_LAUNCH = {}  # inside our parse_options: the launcher upstream's asked init_dist for, until the options are known


def init_dist(launcher, backend=None, **kwargs):
    """Upstream starts the process group here, before the option file is read: ``rank % torch.cuda.device_count()``
    (ZeroDivisionError on CPU, two ranks on one GPU when there are more ranks than GPUs), nccl always, no timeout.
    Called by our ``parse_options`` (every launcher, BasicSR's own too: 11), the request is recorded and the group
    started once ``num_gpu`` and ``dist_params`` are known; called by upstream's parse_options (a script that
    imported it before the plugin), it starts the group now for the devices present (``kwargs``: slurm's
    ``dist_params``)."""
    if launcher not in ('pytorch', 'slurm'):
        raise ValueError(f'Invalid launcher type: {launcher}')
    if _LAUNCH.get('deferring'):
        _LAUNCH['launcher'] = launcher
        return
    start_distributed({'num_gpu': cuda_device_count(), 'dist_params': kwargs}, launcher)


def start_distributed(opt, launcher):
    """The process group of a torchrun (``pytorch``) or srun (``slurm``) run (utils/distributed.py): nccl for a
    CUDA model, gloo for a CPU one (``dist_params.backend`` may say), one GPU per process (checked), bound to it
    (``device_id``), with ``dist_params.timeout_minutes``."""
    import torch.multiprocessing as mp
    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method('spawn')
    params = opt.get('dist_params') or {}
    backend = distributed.process_group_backend(opt['num_gpu'], params.get('backend'))
    if launcher == 'slurm':
        os.environ.update(distributed.slurm_environment(os.environ, params.get('port')))
    device = None
    if opt['num_gpu'] > 0:
        local_world = os.environ.get('LOCAL_WORLD_SIZE') if launcher == 'pytorch' else None
        index = distributed.local_cuda_device(
            int(os.environ.get('LOCAL_RANK', os.environ['RANK'])), torch.cuda.device_count(),
            None if local_world is None else int(local_world))
        torch.cuda.set_device(index)
        device = torch.device('cuda', index)
    dist.init_process_group(backend=backend, timeout=distributed.process_group_timeout(params),
                            device_id=device if backend == 'nccl' else None)


def load_resume_state(opt):
    """Upstream calls torch.cuda.current_device() (fails on CPU), looks CWD-relative for states, loads with
    pickles allowed and takes the newest file even when it is truncated. States are read on the CPU
    (the optimizers move their state to the parameters' device when loading it). Called right after
    ``train_pipeline`` set ``cudnn.benchmark = True``: the ``deterministic`` option is applied again first."""
    cuda_math.apply_options(opt)
    if not opt['auto_resume'] and not opt['path'].get('resume_state'):
        return None
    path, state = agreed_resume_state(opt, _warn_early)  # rank 0 decides, every rank checks it has that file
    if path is None:
        return None
    opt['path']['resume_state'] = path
    check_resume(opt, state['iter'])
    return state


def model_to_device(self, net):
    """Upstream passes ``device_ids=[torch.cuda.current_device()]`` to DDP (fails on CPU), broadcasts every buffer
    at every step and silently falls back to DataParallel without a launcher (utils/distributed.py)."""
    net = net.to(self.device)
    if self.opt['dist']:
        index = torch.cuda.current_device() if self.device.type == 'cuda' else None
        net = DistributedDataParallel(
            net,
            **distributed.ddp_options(self.device.type, index, self.opt.get('find_unused_parameters', False),
                                      distributed.buffers_change(net)))
    elif self.opt['num_gpu'] > 1:
        distributed.check_data_parallel(net, self.opt['num_gpu'])
        net = DataParallel(net)
    return net


# ------------------------------------------------------------------------------ 4 + 8: sampler and prefetcher
_original_set_epoch, _original_iter = EnlargedSampler.set_epoch, EnlargedSampler.__iter__


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


def _prefetcher_hooks(cls):
    original_reset, original_next = cls.reset, cls.next

    def reset(self):
        original_reset(self)
        LOOP.loader_restarted()

    def next_batch(self):
        batch = original_next(self)
        if batch is not None:
            LOOP.batch_taken()
        return batch

    reset.__doc__ = f'{cls.__name__}.reset, then continue a resumed run\'s RNG streams (training_resume.LOOP).'
    next_batch.__doc__ = f'{cls.__name__}.next, counting the batches of the epoch for the training state.'
    cls.reset, cls.next = reset, next_batch


# ------------------------------------------------------------------------------------ 5: start-up checks, lock
_original_parse_options = basicsr.utils.options.parse_options
_original_ordered_yaml = basicsr.utils.options.ordered_yaml
_original_postprocess_yml_value = basicsr.utils.options._postprocess_yml_value


def ordered_yaml():
    """Upstream's (Loader, Dumper) pair with the package's safe, bounded loader (utils/option_files.py): upstream's is
    yaml's full Loader, which builds any Python object a file names (``!!python/object/apply:os.system``)."""
    return OptionLoader, _original_ordered_yaml()[1]


def postprocess_yml_value(value):
    """A ``--force_yml key=value`` value as upstream reads it, except that a list is read as YAML (upstream
    ``eval``-s it)."""
    if value.startswith('['):
        return read_option_value(value, f'--force_yml value {value!r}')
    return _original_postprocess_yml_value(value)


def _option_file_argument():
    """The ``-opt`` of the command line, before upstream's parser reads it (None when absent: its error)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument('-opt')
    return parser.parse_known_args(sys.argv[1:])[0].opt


def _requested_num_gpu(args):
    """``num_gpu`` as the option file and ``--force_yml`` say it, before upstream resolves 'auto'."""
    value = read_option_file(args.opt).get('num_gpu')
    for entry in args.force_yml or []:
        key, _, raw = entry.partition('=')
        if key.strip() == 'num_gpu':
            value = raw.strip()
    return value


def check_cuda_usable(opt, args):
    """``num_gpu: auto`` that found no GPU on a machine with an NVIDIA driver this torch cannot use (too old for
    the wheel's CUDA build, or a CPU build) is an error, not a silent CPU run; ``num_gpu: 0`` is a choice."""
    if opt['num_gpu'] != 0:
        return
    reason = distributed.cuda_unusable_reason(torch.cuda.is_available(), torch.version.cuda,
                                              distributed.nvidia_driver_version())
    if reason and str(_requested_num_gpu(args)).lower() == 'auto':
        raise OptionError(f'num_gpu: auto found no usable GPU: {reason}. Set num_gpu: 0 to run on the CPU on purpose')


def drop_removed_metrics(opt) -> None:
    """Remove the ``val.metrics`` entries set to ``~`` (12); no metric left is ``metrics: ~``, as upstream's own."""
    val = opt.get('val')
    metrics = val.get('metrics') if isinstance(val, dict) else None
    if isinstance(metrics, dict):
        for name in [name for name, metric in metrics.items() if metric is None]:
            del metrics[name]
        if not metrics:
            val['metrics'] = None


def parse_options(root_path, is_train=True):
    """Upstream's parser, then the command line's removals and presets (12), the start-up checks (options, weight
    files), the process group of a distributed run (started here, once the options are known:
    ``start_distributed``), the CUDA math options (utils/cuda_math.py) and the experiment lock (rank 0). Called first
    by BasicSR's pipelines, it also fits the calling launcher script to the plugin (11)."""
    root_path = _adopt_launcher_script(sys._getframe(1).f_globals, root_path)
    path = _option_file_argument()
    if path is not None:
        written = read_option_file(path)  # errors name the file and line
        try:
            check_required(written, is_train)
        except OptionError as err:
            raise OptionError(f'{path}: {err}') from None
    _LAUNCH.clear()
    _LAUNCH['deferring'] = True
    try:
        opt, args = _original_parse_options(root_path, is_train)
    finally:
        _LAUNCH['deferring'] = False
    LOOP.reset()
    drop_removed_metrics(opt)
    try:
        note = apply_short_run(opt)
        check_options(opt)
        check_cuda_usable(opt, args)
    except OptionError as err:
        raise OptionError(f'{args.opt}: {err}') from None
    if note:
        print(f'note: {note}', file=sys.stderr, flush=True)
    try:
        require_run_weights(opt)
    except FileNotFoundError as err:
        raise FileNotFoundError(f'{args.opt}: {err}') from None
    if 'launcher' in _LAUNCH:
        start_distributed(opt, _LAUNCH['launcher'])
        opt['rank'], opt['world_size'] = get_dist_info()
        set_random_seed(opt['manual_seed'] + opt['rank'])  # upstream seeded before the group existed: as rank 0
    cuda_math.apply_options(opt)
    if opt['rank'] == 0:
        run_lock.acquire(opt['path']['experiments_root' if is_train else 'results_root'], _warn_early)
    return opt, args


# ------------------------------------------------------------------------------ 11: BasicSR's launcher scripts
def _installed_package_root(root_path: str) -> bool:
    """Whether ``root_path`` (the parent of the launcher script's folder) is where packages are installed, i.e.
    the script is the installed basicsr's own (``python -m basicsr.train``), not a checkout's."""
    return os.path.basename(os.path.normpath(root_path)) in ('site-packages', 'dist-packages')


def _give_launcher_our_functions(namespace: dict) -> None:
    """The plugin's ``parse_options`` and ``load_resume_state`` in a launcher's namespace (module or script)."""
    for name, function in (('parse_options', parse_options), ('load_resume_state', load_resume_state)):
        if name in namespace:
            namespace[name] = function


def _adopt_launcher_script(namespace: dict, root_path: str) -> str:
    """Give a BasicSR launcher run as a script (``namespace``: its globals) the plugin's ``load_resume_state``
    and, when it runs from an installed package, the current directory as root; returns the root to use."""
    if 'train_pipeline' not in namespace and 'test_pipeline' not in namespace:
        return root_path  # not a launcher (e.g. a test calling parse_options)
    _give_launcher_our_functions(namespace)
    if namespace.get('__name__') == '__main__':  # BasicSR's own script: no run_tool around it
        install_excepthook(run_lock.release_all)
    if not _installed_package_root(root_path):
        return root_path
    cwd = os.getcwd()
    if 'init_tb_loggers' in namespace:  # train.py puts tb_logger/ under opt['root_path'] = its own root
        script_init_tb_loggers, script_mkdir_and_rename = namespace['init_tb_loggers'], namespace['mkdir_and_rename']

        def init_tb_loggers(opt):
            return script_init_tb_loggers(dict(opt, root_path=cwd))

        def mkdir_and_rename(path):
            if os.path.commonpath([path, root_path]) == os.path.normpath(root_path):
                path = os.path.join(cwd, os.path.relpath(path, root_path))
            return script_mkdir_and_rename(path)

        namespace['init_tb_loggers'], namespace['mkdir_and_rename'] = init_tb_loggers, mkdir_and_rename
    print(
        f'note: BasicSR\'s launcher runs from the installed package ({root_path}); its outputs go under the '
        f'current directory {cwd}', file=sys.stderr, flush=True)
    return cwd


# ----------------------------------------------------------------------------------------- 6-9: save / load
def _save_with_retries(obj, path, what):
    """Atomic save, retried like upstream (3 attempts), but a failure in the end is raised, not ignored."""
    for attempt in range(3):
        try:
            return atomic_torch_save(obj, path)
        except OSError as err:
            if attempt == 2:
                raise OSError(f'could not save the {what} {path}: {err}') from err
            get_root_logger().warning(f'Save {what} error: {err}, remaining retry times: {2 - attempt}')
            time.sleep(1)


@master_only
def save_network(self, net, net_label, current_iter, param_key='params'):
    """Upstream's ``save_network`` (strip 'module.', one dict per param key), written atomically."""
    current_iter = 'latest' if current_iter == -1 else current_iter
    save_path = os.path.join(self.opt['path']['models'], f'{net_label}_{current_iter}.pth')
    nets = net if isinstance(net, list) else [net]
    param_keys = param_key if isinstance(param_key, list) else [param_key]
    if len(nets) != len(param_keys):
        raise ValueError('save_network: the lengths of net and param_key differ')
    save_dict = {}
    for net_, key in zip(nets, param_keys):
        state_dict = self.get_bare_model(net_).state_dict()
        save_dict[key] = {(k[7:] if k.startswith('module.') else k): v.cpu() for k, v in state_dict.items()}
    _save_with_retries(save_dict, save_path, 'network')


def save_training_state(self, epoch, current_iter):
    """Upstream's state (epoch, iter, optimizers, schedulers) plus the loop position and RNG streams of every
    rank ('loop'), written atomically by rank 0. Called on every rank (gathering the RNG is a collective)."""
    if current_iter == -1:
        return
    loop = LOOP.record(epoch, distributed.loader_batch_size(self.opt))
    if get_dist_info()[0] != 0:
        return
    state = {
        'epoch': epoch, 'iter': current_iter, 'optimizers': [o.state_dict() for o in self.optimizers],
        'schedulers': [s.state_dict() for s in self.schedulers], 'loop': loop
    }
    _save_with_retries(state, os.path.join(self.opt['path']['training_states'], f'{current_iter}.state'),
                       'training state')


_original_resume_training = BaseModel.resume_training
_original_validation = BaseModel.validation
_original_load_network = BaseModel.load_network


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


def load_network(self, net, load_path, strict=True, param_key='params'):
    """Upstream's ``load_network`` with its ``torch.load`` made weights-only (a pickled-code file is refused)."""
    with weights_only_loads():
        return _original_load_network(self, net, load_path, strict, param_key)


# ------------------------------------------------------------------------------------------- 12: LMDB reader
_original_lmdb_backend_init = LmdbBackend.__init__


def lmdb_backend_init(self, db_paths, *args, **kwargs):
    """Upstream's ``LmdbBackend``, after checking each LMDB (a truncated one would kill the run with SIGBUS at its
    first read)."""
    for path in [db_paths] if isinstance(db_paths, str) else list(db_paths):
        check_lmdb(str(path))
    _original_lmdb_backend_init(self, db_paths, *args, **kwargs)


LmdbBackend.__init__ = lmdb_backend_init
basicsr.utils.options.init_dist = init_dist  # parse_options calls the name imported into options
basicsr.utils.options.ordered_yaml = ordered_yaml  # upstream's parse_options reads the file with it
basicsr.utils.options._postprocess_yml_value = postprocess_yml_value
basicsr.utils.options.parse_options = parse_options  # where launcher scripts import it from (11)
_give_launcher_our_functions(vars(basicsr.train))  # basicsr/__init__ imported both modules before this
_give_launcher_our_functions(vars(basicsr.test))
BaseModel.model_to_device = model_to_device
BaseModel.save_network = save_network
BaseModel.save_training_state = save_training_state
BaseModel.resume_training = resume_training
BaseModel.validation = validation
BaseModel.load_network = load_network
EnlargedSampler.set_epoch = sampler_set_epoch
EnlargedSampler.__iter__ = sampler_iter
_prefetcher_hooks(CPUPrefetcher)
_prefetcher_hooks(CUDAPrefetcher)

# ---------------------------------------------------------------------------------------------------------------
# 10. MessageLogger ETA. Upstream estimates the remaining time as avg x (total - current - 1), so the
#     last logged iteration reads "eta: -1 day, 23:59:59", and it averages over current - start + 1 iterations
#     although its clock is reset after the first one. Fixed: avg over the iterations actually timed, times
#     max(total - current, 0). Everything else of the message is upstream's.
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
