"""The BasicSR glue's option parsing: how a launcher reads its options (BasicSR's ``parse_options``, its YAML loader and
its ``--force_yml`` values; the launchers get ``read_options`` through ``launchers.parse_options``).

-   One reading, one check (``merged_options``): the option file is read by the package's one safe, bounded reader
    (options/reader.py; BasicSR's own ``yaml.load`` gets its loader, and ``--force_yml`` lists are read as YAML, not
    ``eval``-ed), the ``--force_yml`` entries are applied (``reader.apply_force_yml``: a malformed entry names itself),
    then what the command line may change beyond upstream's ``--force_yml`` (which can only set values): an entry of
    ``val.metrics`` set to ``~`` is removed (upstream would call the metric ``None``: ``val:metrics:lpips=~`` drops
    LPIPS and keeps PSNR/SSIM); ``short_run: N`` applies the short-run preset (options/short_run.py). Then every
    check runs once on the result (options/checks.py: required keys, names, strict keys for every model, values),
    with ``num_gpu: auto`` refused when a driver is installed that this torch cannot use: a value is checked the same
    whether the file, an override or a preset set it.
-   Then what upstream's ``parse_options`` adds after its reading (``add_basicsr_settings``: BasicSR 1.4.2's steps,
    here on the checked options; upstream's function itself is not called, as it applies the entries with no check
    after them), every weight file a metric or loss of the run reads checked (metric_weights.require_run_weights: a
    missing one is an error naming it, where it comes from, and the override that runs without it), the process group
    of a distributed run started (``process_group.start_distributed``), the seed (``manual_seed`` + rank, the
    overridden one: upstream seeded before applying the entries), the CUDA math options ``allow_tf32`` and
    ``deterministic`` (utils/cuda_math.py), and one run per experiment (results) folder: a lock file with the PID,
    stale locks replaced (utils/run_lock.py). The paths the run reads are checked later, as BasicSR makes the run's
    folders (``launchers.make_exp_dirs``).
"""
import argparse
import os
import random
from typing import Tuple

import torch

import basicsr.utils.options
from basicsr.utils import set_random_seed
from basicsr.utils.dist_util import get_dist_info

from tola_plugin.basicsr_glue import distributed, failed_start, process_group
from tola_plugin.basicsr_glue.resource_bounds import bound_resources
from tola_plugin.basicsr_glue.training_resume import LOOP, warn_early
from tola_plugin.metric_weights import require_run_weights
from tola_plugin.options.checks import check_options
from tola_plugin.options.reader import (OptionError, OptionLoader, apply_force_yml, force_yml_value,
                                        name_datasets_after_their_data, read_option_file)
from tola_plugin.options.short_run import apply_short_run
from tola_plugin.options.start_checks import command_line, expand_user_paths
from tola_plugin.utils import cuda_math, run_lock
from tola_plugin.utils.devices import cuda_device_count
from tola_plugin.utils.user_paths import shorten
from tola_plugin.utils.user_text import say

_original_ordered_yaml = basicsr.utils.options.ordered_yaml


def ordered_yaml():
    """Upstream's (Loader, Dumper) pair with the package's safe, bounded loader (options/reader.py): upstream's is
    yaml's full Loader, which builds any Python object a file names (``!!python/object/apply:os.system``)."""
    return OptionLoader, _original_ordered_yaml()[1]


def check_cuda_usable(opt) -> None:
    """``num_gpu: auto`` on a machine with no usable GPU but an NVIDIA driver this torch cannot use (too old for the
    wheel's CUDA build, or a CPU build) is an error, not a silent CPU run; ``num_gpu: 0`` is a choice."""
    if opt.get('num_gpu') != 'auto':
        return
    reason = distributed.cuda_unusable_reason(torch.cuda.is_available(), torch.version.cuda,
                                              distributed.nvidia_driver_version())
    if reason:
        raise OptionError(f'num_gpu: auto found no usable GPU: {reason}. Set num_gpu: 0 to run on the CPU on purpose')


def drop_removed_metrics(opt) -> None:
    """Remove the ``val.metrics`` entries set to ``~``; no metric left is ``metrics: ~``, as upstream's own."""
    val = opt.get('val')
    metrics = val.get('metrics') if isinstance(val, dict) else None
    if isinstance(metrics, dict):
        for name in [name for name, metric in metrics.items() if metric is None]:
            del metrics[name]
        if not metrics:
            val['metrics'] = None


def merged_options(args: argparse.Namespace, is_train: bool) -> Tuple[dict, str]:
    """The run's options as finally merged, checked once (the module docstring): the option file, its ``--force_yml``
    entries, the removed metrics and the short-run preset, then every check. -> (options, the preset's note or '')."""
    opt = read_option_file(args.opt)  # errors name the file and line
    apply_force_yml(opt, args.force_yml)  # errors name the entry
    for line in name_datasets_after_their_data(opt, args.force_yml):
        say(f'note: {line}')
    opt['is_train'] = is_train
    try:
        drop_removed_metrics(opt)
        note = apply_short_run(opt)
        check_options(opt)
        check_cuda_usable(opt)
    except OptionError as err:
        raise OptionError(f'{options_named(args)}: {err}') from None
    return opt, note


def options_named(args: argparse.Namespace) -> str:
    """The option file and its ``--force_yml`` entries, as an error names them."""
    return args.opt + (f' with --force_yml {" ".join(shorten(e) for e in args.force_yml)}' if args.force_yml else '')


def add_basicsr_settings(opt: dict, args: argparse.Namespace, root_path: str, is_train: bool) -> None:
    """What BasicSR 1.4.2's ``parse_options`` adds to the options it reads, in its order: distributed or not, the
    flags, ``debug_`` before the name and short intervals with ``--debug``, ``num_gpu: auto`` resolved, each dataset's
    phase and scale, ``~`` expanded in the paths it reads, and the run's folders under ``root_path`` (rank and seed:
    ``read_options``, once the process group is known)."""
    opt['dist'] = args.launcher != 'none'
    opt['auto_resume'] = args.auto_resume
    opt['is_train'] = is_train
    if args.debug and not opt['name'].startswith('debug'):
        opt['name'] = 'debug_' + opt['name']
    if opt['num_gpu'] == 'auto':
        opt['num_gpu'] = cuda_device_count()
    for phase, dataset in opt['datasets'].items():  # val_1, val_2, test_1, ...: the phase before '_'
        dataset['phase'] = phase.split('_')[0]
        if 'scale' in opt:
            dataset['scale'] = opt['scale']
    expand_user_paths(opt)
    root = os.path.join(root_path, 'experiments' if is_train else 'results', opt['name'])
    opt['path'].update(log=root, visualization=os.path.join(root, 'visualization'))
    if not is_train:
        opt['path']['results_root'] = root
        return
    opt['path'].update(experiments_root=root, models=os.path.join(root, 'models'),
                       training_states=os.path.join(root, 'training_states'))
    if 'debug' in opt['name']:
        if opt.get('val') is not None:
            opt['val']['val_freq'] = 8
        opt['logger'].update(print_freq=1, save_checkpoint_freq=8)


def read_options(root_path, is_train=True, bound=False):
    """The launchers' ``parse_options``: the options merged and checked (``merged_options``), upstream's settings
    added (``add_basicsr_settings``), for a run (``bound``; not for a test that only reads options: the estimate takes
    seconds) what it asks of this machine bounded (``resource_bounds``), the weight files checked, the process group
    of a distributed run started, the seed (per rank), the CUDA math options (utils/cuda_math.py) and the experiment
    lock (rank 0). -> (opt, args) as upstream's."""
    args = command_line()
    opt, note = merged_options(args, is_train)
    add_basicsr_settings(opt, args, root_path, is_train)
    LOOP.reset()
    if note:
        say(f'note: {note}')
    try:
        if bound:
            bound_resources(opt)  # memory, workers, epoch length: before any folder is made
    except OptionError as err:
        raise OptionError(f'{options_named(args)}: {err}') from None
    try:
        require_run_weights(opt)
    except FileNotFoundError as err:
        raise FileNotFoundError(f'{args.opt}: {err}') from None

    if opt['dist']:
        process_group.start_distributed(opt, args.launcher)
    opt['rank'], opt['world_size'] = get_dist_info()
    if opt.get('manual_seed') is None:
        opt['manual_seed'] = random.randint(1, 10000)
    set_random_seed(opt['manual_seed'] + opt['rank'])
    cuda_math.apply_options(opt)
    if opt['rank'] == 0:
        failed_start.begin(opt, is_train, root_path)
        run_lock.acquire(opt['path']['experiments_root' if is_train else 'results_root'], warn_early)
    return opt, args


def apply():
    basicsr.utils.options.ordered_yaml = ordered_yaml  # upstream's parse_options reads the file with it
    basicsr.utils.options._postprocess_yml_value = force_yml_value  # lists read as YAML, not eval-ed
