"""What the launchers' option parser adds to BasicSR's (tola_plugin/basicsr_glue/option_parsing.py): the short-run
preset on every training option file of the repository, an entry of val.metrics removed with ~ (the override the
weight check names), and the weight files of a run checked at start, BasicSR's own perceptual loss included."""
import glob
import os
import sys

import pytest

import basicsr.utils.options

from tola_plugin import metric_weights as W
from tola_plugin.options.checks import OptionError, check_options
from tola_plugin.options.short_run import apply_short_run
from tola_plugin.utils import run_lock
from tola_testing import REPO, load_yaml

TRAIN_FILES = sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, 'options', '*', 'train_*.yml'))
    if 'model_type' in load_yaml(p))  # (train_demo_backbone.yml is tools/train_demo_backbone.py's, not BasicSR's)


def as_parsed(opt, is_train=True):
    """What upstream's parse_options adds that the checks read (no file is opened)."""
    opt = dict(opt, num_gpu=0, is_train=is_train)
    opt['datasets'] = {k: dict(v, phase=k.split('_')[0], scale=opt.get('scale', 1)) for k, v in opt['datasets'].items()}
    return opt


def parse(path, tmp_path, monkeypatch, *force_yml, is_train=True):
    """The launchers' parser on ``path`` with ``--force_yml force_yml...``, from ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    argv = ['basicsr.train', '-opt', str(path)] + (['--force_yml', *force_yml] if force_yml else [])
    monkeypatch.setattr(sys, 'argv', argv)
    try:
        return basicsr.utils.options.parse_options(str(tmp_path), is_train=is_train)[0]
    finally:
        run_lock.release_all()


def test_every_training_file_has_the_short_run():
    """One override, ``short_run=N``, fits every training option file: N iterations, batch at most 2, no loader
    workers, a loss line every iteration, the file's own schedule shrunk to N (the strict checks still pass)."""
    assert len(TRAIN_FILES) > 30 and 'options/train/train_TOLA.yml' in TRAIN_FILES
    for relative in TRAIN_FILES:
        original = as_parsed(load_yaml(os.path.join(REPO, relative)))
        opt = as_parsed(dict(original, short_run=3))
        note = apply_short_run(opt)
        assert note.startswith('short_run: 3 iterations') and 'short_run' not in opt, relative
        check_options(opt)
        train = opt['train']
        assert train['total_iter'] == 3 and opt['logger']['print_freq'] == 1, relative
        assert all(ds['batch_size_per_gpu'] <= 2 and ds['num_worker_per_gpu'] == 0
                   for phase, ds in opt['datasets'].items() if phase == 'train'), relative
        scheduler = train['scheduler']
        if scheduler['type'] == 'CosineAnnealingRestartLR':
            assert scheduler['periods'] == [3] and scheduler['restart_weights'] == [1], relative
        else:
            assert all(0 < m <= 3 for m in scheduler.get('milestones', [])), relative
        assert train.get('warmup_iter', -1) in (-1, 1, 2, 3), relative
        assert train.get('accumulate_grad_batches', 1) == 1
        assert opt.get('val') == original.get('val') and opt['network_g'] == original['network_g'], relative


def test_short_run_shrinks_the_schedule_in_proportion():
    opt = {'is_train': True, 'logger': {}, 'datasets': {'train': {'batch_size_per_gpu': 16, 'num_worker_per_gpu': 6}}}
    opt['train'] = {
        'total_iter': 400000, 'warmup_iter': 10000,
        'scheduler': {'type': 'MultiStepLR', 'milestones': [50000, 100000, 200000, 300000], 'gamma': 0.5}
    }
    opt['short_run'] = 40
    apply_short_run(opt)
    assert opt['train']['scheduler']['milestones'] == [5, 10, 20, 30] and opt['train']['warmup_iter'] == 1
    assert opt['datasets']['train'] == {'batch_size_per_gpu': 2, 'num_worker_per_gpu': 0}
    opt['train']['scheduler'] = {
        'type': 'MultiStepRestartLR', 'milestones': [2], 'restarts': [0, 20, 39], 'restart_weights': [1, 0.5, 0.25]
    }
    opt['train']['total_iter'] = 40
    opt['short_run'] = 4
    apply_short_run(opt)
    assert opt['train']['scheduler'] == {  # restarts at or before 0 or after 4 are dropped, with their weights
        'type': 'MultiStepRestartLR', 'milestones': [], 'restarts': [2, 4], 'restart_weights': [0.5, 0.25]
    }
    assert apply_short_run({'short_run': None}) == ''
    for bad in (0, -2, 2.5, True, 'ten'):
        with pytest.raises(OptionError, match='short_run: must be a positive integer'):
            apply_short_run({'short_run': bad, 'is_train': True, 'train': {}})
    with pytest.raises(OptionError, match='short_run: is for training option files'):
        apply_short_run({'short_run': 3, 'is_train': False})


def test_short_run_and_metric_removal_from_the_command_line(tmp_path, monkeypatch):
    """``--force_yml short_run=N`` (a new top-level key: BasicSR's override creates it) and ``val:metrics:NAME=~``
    through the launchers' parser: the metric is gone, the others stay; with all of them gone, ``metrics: ~``."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'no_weights'))
    path = os.path.join(REPO, 'options', 'train', 'train_TOLA.yml')
    opt = parse(path, tmp_path, monkeypatch, 'short_run=5', 'train:perceptual_opt=~', 'val:metrics:lpips=~')
    assert opt['train']['total_iter'] == 5 and opt['datasets']['train']['batch_size_per_gpu'] == 2
    assert list(opt['val']['metrics']) == ['psnr', 'ssim'] and opt['train']['perceptual_opt'] is None
    opt = parse(path, tmp_path, monkeypatch, 'train:perceptual_opt=~', 'val:metrics:lpips=~', 'val:metrics:psnr=~',
                'val:metrics:ssim=~')
    assert opt['val']['metrics'] is None and opt['train']['total_iter'] == 100000
    test = os.path.join(REPO, 'options', 'test', 'test_TOLA.yml')
    with pytest.raises(OptionError, match='short_run: is for training option files'):
        parse(test, tmp_path, monkeypatch, 'short_run=5', is_train=False)


TOLA_OPTION = '$TOLA_PLUGIN/options/train/train_TOLA.yml'


def test_own_data_is_named_after_its_data_not_the_option_files(tmp_path, monkeypatch, capsys):
    """docs/own_data.md's training command logged the user's lines as CTR_TSR_train / CTR_TSR_val, the names of the
    option file it starts from. A dataset whose data --force_yml replaced, and not its name, is named after its data
    (and the launcher says so); a name given stays."""
    from launcher_testing import doc_commands
    (command, ) = [c for c in doc_commands('docs/own_data.md') if c[1:4:2] == ['basicsr.train', TOLA_OPTION]]
    force_yml = command[command.index('--force_yml') + 1:]
    path = os.path.join(REPO, 'options', 'train', 'train_TOLA.yml')
    opt = parse(path, tmp_path, monkeypatch, *force_yml)
    assert [opt['datasets'][phase]['name'] for phase in ('train', 'val')] == ['lines_train', 'lines_val']
    assert ("note: datasets.train.name: lines_train (after its data, datasets/own/lines.lmdb; the option file's was "
            'CTR_TSR_train; --force_yml datasets:train:name=... chooses another)') in capsys.readouterr().err
    opt = parse(path, tmp_path, monkeypatch, *force_yml, 'datasets:val:name=mine')
    assert [opt['datasets'][phase]['name'] for phase in ('train', 'val')] == ['lines_train', 'mine']


def test_weight_files_of_a_run_are_checked_at_start(tmp_path, monkeypatch):
    """Every part of a run that reads a weight file, ours and BasicSR's PerceptualLoss (ESRGAN's VGG19), is checked
    before anything is built; the error names each file, its folder, where it comes from, and the override."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'th'))
    monkeypatch.chdir(tmp_path)
    esrgan = as_parsed(load_yaml(os.path.join(REPO, 'options', 'baselines', 'train_ESRGAN_x4.yml')))
    esrgan['val']['metrics']['d'] = {'type': 'calculate_tola_dists', 'better': 'lower'}
    with pytest.raises(FileNotFoundError) as err:
        W.require_run_weights(esrgan)
    lines = str(err.value).splitlines()
    folder = str(tmp_path / 'th' / 'hub' / 'checkpoints')
    assert lines[1] == (f'- train.perceptual_opt (PerceptualLoss): vgg19-dcbb9e9d.pth in {folder} (from '
                        'https://download.pytorch.org/models/vgg19-dcbb9e9d.pth)')
    assert lines[2].startswith(f'- val.metrics.d (calculate_tola_dists): vgg16-397923af.pth in {folder} (from')
    assert lines[3].startswith(f'- val.metrics.d (calculate_tola_dists): DISTS_weights-f5e65c96.pth in '
                               f'{tmp_path / "th" / "hub" / "pyiqa"} (from https://huggingface.co/')
    assert lines[-1].endswith('run without those parts: --force_yml train:perceptual_opt=~ val:metrics:d=~')
    # BasicSR's own place for the VGG19 file (experiments/pretrained_models/ of the current folder) counts
    os.makedirs(W.BASICSR_VGG_DIR)
    open(os.path.join(W.BASICSR_VGG_DIR, 'vgg19-dcbb9e9d.pth'), 'wb').close()
    del esrgan['val']['metrics']['d']
    W.require_run_weights(esrgan)
    # a test run reads no loss; LPIPS-VGG with a random trunk needs only the linear layers of the lpips wheel
    W.require_run_weights(dict(esrgan, is_train=False, train={'perceptual_opt': {'type': 'LPIPSLoss'}}))
    W.require_run_weights(dict(esrgan, train={'perceptual_opt': {'type': 'LPIPSLoss', 'pretrained_backbone': False}}))
    with pytest.raises(FileNotFoundError, match='train.perceptual_opt \\(LPIPSLoss\\): vgg16-397923af.pth'):
        W.require_run_weights(dict(esrgan, train={'perceptual_opt': {'type': 'LPIPSLoss'}}))
    # a loss of weight 0 is off (TOLAModel builds none): make demo's file runs without the VGG16 file
    W.require_run_weights(as_parsed(load_yaml(os.path.join(REPO, 'options', 'demo', 'train_TOLA_demo.yml'))))


def string_values(node, where=''):
    """(option path, value) of every string in a parsed option file."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from string_values(value, f'{where}.{key}')
    elif isinstance(node, list):
        for value in node:
            yield from string_values(value, where)
    elif isinstance(node, str):
        yield where, node


def test_option_files_name_no_file_of_the_repository():
    """docs/own_data.md, "Paths": a relative path in an option file is the user's (data, checkpoints, experiments, the
    demo's folder), never one of the repository or the package, so a file works from any folder and as a copy."""
    user_roots = ('datasets/', 'checkpoints/', 'experiments/', 'demo_data/')
    for path in glob.glob(os.path.join(REPO, 'options', '*', '*.yml')):
        opt = load_yaml(path)
        if 'model_type' in opt:
            for where, value in string_values(opt):
                assert '/' not in value or value.startswith(user_roots), (path, where, value)
