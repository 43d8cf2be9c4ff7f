"""What a launcher checks before it imports torch and BasicSR (tens of seconds on a loaded machine), so that a mistyped
option file, ``--force_yml`` entry or data path is said at once (``check_start``): the option file is read, its
``--force_yml`` entries applied, and every path the run reads checked on disk (``check_data_paths``). Standard library
and yaml only. The launchers check the same paths again as BasicSR makes the run's folders
(``basicsr_glue.launchers.make_exp_dirs``), and every other option once BasicSR's registries are there
(``checks.check_options``).
"""
import argparse
import difflib
import os
from typing import Mapping, MutableMapping, Optional, Sequence

from tola_plugin.options.reader import OptionError, apply_force_yml, read_option_file
from tola_plugin.utils.user_paths import MISSING, NOTHING_THERE, path_kind, shorten

#: dataset options that name a file (the rest named ``dataroot*`` are folders: image folders or LMDBs)
DATASET_FILE_KEYS = ('labels', 'index_list', 'meta_info_file', 'meta_info')
#: network options that name a backbone weight file (read when ``backbone_init`` is 'checkpoint', the default)
BACKBONE_FILE_KEYS = ('difftsr_checkpoint', 'transocr_checkpoint')


def command_line(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The launchers' command line: upstream's ``parse_options`` arguments, as BasicSR 1.4.2 defines them."""
    parser = argparse.ArgumentParser()
    parser.add_argument('-opt', type=str, required=True, help='Path to option YAML file.')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm'], default='none', help='job launcher')
    parser.add_argument('--auto_resume', action='store_true')
    parser.add_argument('--debug', action='store_true')
    parser.add_argument('--local_rank', type=int, default=0)
    parser.add_argument('--force_yml', nargs='+', default=None,
                        help='Force to update yml files. Examples: train:ema_decay=0.999')
    return parser.parse_args(argv)


def expand_user_paths(opt: MutableMapping) -> None:
    """``~`` expanded where BasicSR 1.4.2's ``parse_options`` expands it: each dataset's ``dataroot_gt`` and
    ``dataroot_lq``, and the ``path`` entries naming a resume state or a pretrained network."""
    datasets = opt.get('datasets')
    for dataset in datasets.values() if isinstance(datasets, dict) else ():
        for key in ('dataroot_gt', 'dataroot_lq'):
            if isinstance(dataset, dict) and isinstance(dataset.get(key), str):
                dataset[key] = os.path.expanduser(dataset[key])
    path = opt.get('path')
    for key, value in path.items() if isinstance(path, dict) else ():
        if isinstance(value, str) and ('resume_state' in key or 'pretrain_network' in key):
            path[key] = os.path.expanduser(value)


def check_data_paths(opt: Mapping) -> None:
    """Every path a run reads, checked on disk before anything is made or moved (BasicSR renames an existing
    ``experiments/<name>`` to ``<name>_archived_<time>`` before it builds the datasets, so a mistyped dataroot found
    there has already moved the experiment away): each dataset's ``dataroot*`` (a folder), ``labels``,
    ``index_list`` and ``meta_info_file`` (files); each network's backbone files (``difftsr_checkpoint``,
    ``transocr_checkpoint``, when ``backbone_init`` is 'checkpoint'); for a run that does not resume (no
    ``--auto_resume``) the ``path.pretrain_network_*`` files (but ``demo``). An OptionError names the option, the
    path, what is there and, for a typo, the closest name in its folder. Blocks that are not mappings are left to
    ``checks.check_options``."""
    datasets = opt.get('datasets')
    for phase, dataset in datasets.items() if isinstance(datasets, dict) else ():
        for key, value in dataset.items() if isinstance(dataset, dict) else ():
            if not isinstance(value, str) or not (key.startswith('dataroot') or key in DATASET_FILE_KEYS):
                continue
            _check_path(value, f'datasets.{phase}.{key}', 'a folder' if key.startswith('dataroot') else 'a file')
    for key, network in opt.items():  # the backbone's weight files (TOLANet, DiffTSRNet), unless from the package
        if key.startswith('network_') and isinstance(network, dict) and \
                network.get('backbone_init', 'checkpoint') == 'checkpoint':
            for name in BACKBONE_FILE_KEYS:
                if isinstance(network.get(name), str):
                    _check_path(network[name], f'{key}.{name}', 'a file')
    path = opt.get('path')
    if not opt.get('auto_resume') and isinstance(path, dict):
        for key, value in path.items():
            # 'demo': the shipped demo adaptation, a package file resolved and checked where it is loaded
            # (checkpoints/demo_backbone.adaptation_file)
            if key.startswith('pretrain_network') and isinstance(value, str) and value != 'demo':
                _check_path(value, f'path.{key}', 'a file')


def _check_path(path: str, where: str, expected: str) -> None:
    kind = path_kind(path)
    if kind == expected:
        return
    hint = ''
    if kind in NOTHING_THERE:
        parent = os.path.dirname(os.path.abspath(path))
        try:
            close = difflib.get_close_matches(os.path.basename(path), os.listdir(parent), n=1, cutoff=0.6)
        except OSError:
            close = []
        hint = f"; {parent} has {close[0]!r}: a typo?" if close else ''
        kind = 'not found' + ('' if kind == MISSING else f' ({kind})')
    else:
        kind = f'is {kind}'
    raise OptionError(f'{where}: {path} {kind}; expected {expected}{hint} (checked before anything was made or moved)')


def check_start(argv: Optional[Sequence[str]] = None) -> None:
    """A launcher's checks before its heavy imports, on its command line (``argv``; default ``sys.argv[1:]``): the
    option file read (its errors name the file and line), the ``--force_yml`` entries applied (each error names the
    entry), and the paths the run reads (``check_data_paths``, the file and its overrides named)."""
    args = command_line(argv)
    opt = read_option_file(args.opt)
    apply_force_yml(opt, args.force_yml)
    opt['auto_resume'] = args.auto_resume
    expand_user_paths(opt)
    try:
        check_data_paths(opt)
    except OptionError as err:
        overrides = f' with --force_yml {" ".join(shorten(e) for e in args.force_yml)}' if args.force_yml else ''
        raise OptionError(f'{args.opt}{overrides}: {err}') from None
