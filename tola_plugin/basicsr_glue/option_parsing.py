"""The BasicSR glue's option parsing: how a launcher reads its options (BasicSR's ``parse_options``, its YAML loader and
its ``--force_yml`` values; the launchers get ``read_options`` through ``launchers.parse_options``).

-   Start-up checks: the option file is read by the package's one safe, bounded reader (options/reader.py;
    BasicSR's own ``yaml.load`` gets its loader, and ``--force_yml`` lists are read as YAML, not ``eval``-ed), the
    keys every run needs are checked on the file as written before BasicSR's parser indexes them, then strict option
    keys for every model, ``total_iter > 0``, ``num_gpu`` no more than the devices present (options/checks.py),
    ``num_gpu: auto`` refused when a driver is installed that this torch cannot use; the CUDA math options
    ``allow_tf32`` and ``deterministic`` (utils/cuda_math.py); and one run per experiment (results) folder: a lock
    file with the PID, stale locks replaced (utils/run_lock.py). The paths the run reads are checked later, as BasicSR
    makes the run's folders (``launchers.make_exp_dirs``).
-   What the command line may change beyond upstream's ``--force_yml`` (which can only set values): an entry of
    ``val.metrics`` set to ``~`` is removed (upstream would call the metric ``None``: ``val:metrics:lpips=~`` drops
    LPIPS and keeps PSNR/SSIM); ``short_run: N`` applies the short-run preset (options/short_run.py). Then every weight
    file a metric or loss of the run reads is checked at start: a missing one is an error naming it, where it comes
    from, and the override that runs without it (metric_weights.require_run_weights).
"""
import argparse
import sys

import torch

import basicsr.utils.options
from basicsr.utils import set_random_seed
from basicsr.utils.dist_util import get_dist_info

from tola_plugin.basicsr_glue import distributed, failed_start, process_group
from tola_plugin.basicsr_glue.training_resume import LOOP, warn_early
from tola_plugin.metric_weights import require_run_weights
from tola_plugin.options.checks import check_options, check_required
from tola_plugin.options.reader import OptionError, OptionLoader, force_yml_value, read_option_file
from tola_plugin.options.short_run import apply_short_run
from tola_plugin.utils import cuda_math, run_lock
from tola_plugin.utils.user_text import say

_original_parse_options = basicsr.utils.options.parse_options
_original_ordered_yaml = basicsr.utils.options.ordered_yaml


def ordered_yaml():
    """Upstream's (Loader, Dumper) pair with the package's safe, bounded loader (options/reader.py): upstream's is
    yaml's full Loader, which builds any Python object a file names (``!!python/object/apply:os.system``)."""
    return OptionLoader, _original_ordered_yaml()[1]


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
    """Remove the ``val.metrics`` entries set to ``~``; no metric left is ``metrics: ~``, as upstream's own."""
    val = opt.get('val')
    metrics = val.get('metrics') if isinstance(val, dict) else None
    if isinstance(metrics, dict):
        for name in [name for name, metric in metrics.items() if metric is None]:
            del metrics[name]
        if not metrics:
            val['metrics'] = None


def read_options(root_path, is_train=True):
    """Upstream's parser, then the command line's removals and presets, the start-up checks (options, weight
    files), the process group of a distributed run (started here, once the options are known:
    ``process_group.start_distributed``), the CUDA math options (utils/cuda_math.py) and the experiment lock
    (rank 0). -> (opt, args) as upstream's."""
    path = _option_file_argument()
    if path is not None:
        written = read_option_file(path)  # errors name the file and line
        try:
            check_required(written, is_train)
        except OptionError as err:
            raise OptionError(f'{path}: {err}') from None
    with process_group.launch_deferred() as launch:
        opt, args = _original_parse_options(root_path, is_train)
    LOOP.reset()
    drop_removed_metrics(opt)
    try:
        note = apply_short_run(opt)
        check_options(opt)
        check_cuda_usable(opt, args)
    except OptionError as err:
        raise OptionError(f'{args.opt}: {err}') from None
    if note:
        say(f'note: {note}')
    try:
        require_run_weights(opt)
    except FileNotFoundError as err:
        raise FileNotFoundError(f'{args.opt}: {err}') from None

    if 'launcher' in launch:
        process_group.start_distributed(opt, launch['launcher'])
        opt['rank'], opt['world_size'] = get_dist_info()
        set_random_seed(opt['manual_seed'] + opt['rank'])  # upstream seeded before the group existed: as rank 0
    cuda_math.apply_options(opt)
    if opt['rank'] == 0:
        failed_start.begin(opt, is_train, root_path)
        run_lock.acquire(opt['path']['experiments_root' if is_train else 'results_root'], warn_early)
    return opt, args


def apply():
    basicsr.utils.options.ordered_yaml = ordered_yaml  # upstream's parse_options reads the file with it
    basicsr.utils.options._postprocess_yml_value = force_yml_value  # lists read as YAML, not eval-ed
