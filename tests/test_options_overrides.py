"""Issue 48, item 2 (and the matching parts of item 6): every check of an option runs on the options as finally
merged (the option file, its ``--force_yml`` entries, the plugin's presets such as ``short_run``), in one place
(``options/checks.py``: ``check_options``, called once by ``basicsr_glue/option_parsing.py``), so an override is
refused as the same value written in the file is, before any folder is made.

The launchers run as a user runs them: BasicSR's and ours as processes for the case of the issue, ours in this process
(``main`` with its command line; each refusal costs milliseconds) for every class of value.
"""
import os
import subprocess
import sys

import pytest
import yaml

from tola_testing import REPO, load_yaml, tiny_demo_options


def train_options(rendered):
    """A one-iteration training file on valid data (the demo's, tiny backbone, rendered lines)."""
    return tiny_demo_options(rendered, 'exp', total_iter=1, freq=1)


def demo_test_options(rendered):
    """The demo's test file on the same valid data and network (rendered lines, tiny backbone)."""
    train = train_options(rendered)
    opt = load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))
    opt.update(network_g=train['network_g'], path={'pretrain_network_g': None})
    opt['datasets']['test_1'] = dict(train['datasets']['val'])
    return opt


def write(folder, opt):
    """``opt`` written to ``folder/options.yml``; ``folder/work`` (empty) made to run in. -> (file, work)."""
    folder.mkdir(exist_ok=True)
    path = folder / 'options.yml'
    path.write_text(yaml.safe_dump(opt, sort_keys=False, allow_unicode=True), encoding='utf-8')
    work = folder / 'work'
    work.mkdir()
    return str(path), work


def assert_nothing_made(folder, work):
    """No folder in the run's folder, nor beside it (``name: ../victim`` aims at ``folder``)."""
    assert os.listdir(work) == [] and sorted(os.listdir(folder)) == ['options.yml', 'work']


def refused(folder, monkeypatch, capsys, opt, entries, module='train'):
    """Our launcher (``tola_plugin.train`` / ``.test``) run in this process from ``folder/work`` on ``opt`` with
    ``--force_yml entries`` (none: the file alone): one ``error:`` line, exit status 2, nothing made. -> the line."""
    path, work = write(folder, opt)
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, 'argv', [f'tola-{module}', '-opt', path] + (['--force_yml', *entries] if entries else []))
    launcher = __import__(f'tola_plugin.{module}', fromlist=['main'])
    with pytest.raises(SystemExit) as exit_info:
        launcher.main()
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(err) == 1 and err[0].startswith('error: '), err
    assert_nothing_made(folder, work)
    return err[0]


# ----------------------------------------------------------------------------- the case, as a user runs it
@pytest.mark.parametrize('launcher', ['tola_plugin.train', 'basicsr.train'])
def test_a_name_that_leaves_experiments_is_refused_from_the_command_line(rendered_sets, tmp_path, launcher):
    """``--force_yml name=../victim`` with valid data wrote models/, training_states/, visualization/ and the option
    file into a sibling victim/ (both launchers); now it is refused as ``name: ../victim`` in the file is."""
    path, work = write(tmp_path, train_options(rendered_sets))
    proc = subprocess.run([sys.executable, '-m', launcher, '-opt', path, '--force_yml', 'name=../victim'], cwd=work,
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, OMP_NUM_THREADS='1'))
    last = proc.stderr.splitlines()[-1] if proc.stderr else ''
    assert proc.returncode == 2 and last.startswith('error: '), proc.stderr[-2000:]
    assert "with --force_yml 'name=../victim': name '../victim': holds '/'" in last, last
    assert_nothing_made(tmp_path, work)


# ------------------------------------------------------------------------- names and paths: every way to set them
NAME_CASES = [
    ('train', 'name=a/b', "name 'a/b': holds '/'"),
    ('train', 'name=.', "name '.': names no file or folder"),
    ('train', 'name=..', "name '..': names no file or folder"),
    ('train', 'name=' + 'x' * 300, 'name: 300 bytes'),
    ('train', 'name=run\x1b[2J', "name 'run\\\\x1b[2J': holds control characters"),
    ('train', 'datasets:val:name=../val', "datasets.val.name '../val': holds '/'"),
    ('train', 'path:results_root=../elsewhere', 'path.results_root: the launcher sets it from name'),
    ('test', 'name=../victim', "name '../victim': holds '/'"),
    ('test', 'datasets:test_1:name=..', "datasets.test_1.name '..': names no file or folder"),
    ('test', 'val:suffix=../../x', "val.suffix '../../x': holds '/'"),
    ('test', 'path:models=../elsewhere', 'path.models: the launcher sets it from name'),
]


@pytest.mark.parametrize('module, entry, needle', NAME_CASES)
def test_every_name_is_checked_after_the_overrides(rendered_sets, tmp_path, monkeypatch, capsys, module, entry, needle):
    """Names that become folders and files (the experiment's, a dataset's, the saved images' suffix) and the run's
    folders, set by ``--force_yml``: one line naming the option and the rule, no folder made anywhere."""
    opt = train_options(rendered_sets) if module == 'train' else demo_test_options(rendered_sets)
    line = refused(tmp_path, monkeypatch, capsys, opt, [entry], module)
    assert needle in line and '[Errno' not in line, line
    assert '\x1b' not in line  # shown escaped


@pytest.mark.parametrize('module', ['train', 'test'])
def test_an_override_and_the_file_get_the_same_check(rendered_sets, tmp_path, monkeypatch, capsys, module):
    """The same value is refused with the same message whether the file or the command line says it."""
    opt = train_options(rendered_sets) if module == 'train' else demo_test_options(rendered_sets)
    by_override = refused(tmp_path / 'a', monkeypatch, capsys, opt, ['name=../victim'], module)
    by_file = refused(tmp_path / 'b', monkeypatch, capsys, dict(opt, name='../victim'), [], module)
    assert by_override.split("with --force_yml 'name=../victim': ")[1] == by_file.split('options.yml: ')[1]


# ------------------------------------------------------------------------------------ the entries themselves
@pytest.mark.parametrize('entry, what', [('foo', 'has no "="'), ('=5', 'has an empty key'),
                                         ('train::total_iter=5', 'has an empty key'), ('train:=5', 'has an empty key')])
def test_a_malformed_entry_is_one_line_naming_it_and_the_form(rendered_sets, tmp_path, monkeypatch, capsys, entry,
                                                              what):
    line = refused(tmp_path, monkeypatch, capsys, train_options(rendered_sets), ['train:total_iter=1', entry])
    assert line == f'error: --force_yml {entry!r}: {what}; expected KEY:SUBKEY=VALUE (the option\'s path, keys ' \
        'joined by ":", then "=" and its value), e.g. train:total_iter=1000', line


def test_a_value_holds_everything_after_the_first_equals_sign(rendered_sets, tmp_path, monkeypatch, capsys):
    """``a=b=c`` sets ``a`` to 'b=c', which is then checked as any value (here: no option a; a name with '/')."""
    opt = train_options(rendered_sets)
    line = refused(tmp_path / 'a', monkeypatch, capsys, opt, ['a=b=c'])
    assert "a: unknown option of TOLAModel" in line and 'unpack' not in line, line
    line = refused(tmp_path / 'b', monkeypatch, capsys, opt, ['name=x/y=z'])
    assert "name 'x/y=z': holds '/'" in line, line


def test_a_value_with_an_equals_sign_is_set(rendered_sets, tmp_path, monkeypatch):
    """``name=run=2`` names the experiment 'run=2' (the launchers' parser, as BasicSR's launchers call it); ``-1`` is a
    number."""
    import basicsr.utils.options

    from tola_plugin.utils import run_lock
    path, work = write(tmp_path, train_options(rendered_sets))
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, 'argv',
                        ['basicsr.train', '-opt', path, '--force_yml', 'name=run=2', 'train:warmup_iter=-1'])
    try:
        opt, _ = basicsr.utils.options.parse_options(str(work), is_train=True)
    finally:
        run_lock.release_all()
    assert opt['name'] == 'run=2' and opt['path']['experiments_root'] == str(work / 'experiments' / 'run=2')
    assert opt['train']['warmup_iter'] == -1  # a signed number is a number (upstream: the text '-1')


# ---------------------------------------------------------------------------------- numbers that must be positive
@pytest.mark.parametrize('entries, needle', [
    (['train:total_iter=-5'], 'train.total_iter: must be a positive integer (the number of iterations), got -5'),
    (['train:total_iter=0'], 'train.total_iter: must be a positive integer'),
    (['train:total_iter=2.5'], 'train.total_iter: must be a positive integer'),
    (['logger:print_freq=0'], 'logger.print_freq: must be a positive integer'),
    (['logger:save_checkpoint_freq=-1'], 'logger.save_checkpoint_freq: must be a positive integer'),
    (['val:val_freq=-2'], 'val.val_freq: must be a positive integer'),
    (['datasets:train:batch_size_per_gpu=0'], 'datasets.train.batch_size_per_gpu: must be a positive integer'),
    (['datasets:train:num_worker_per_gpu=-1'], 'datasets.train.num_worker_per_gpu: must be an integer >= 0'),
    (['datasets:train:dataset_enlarge_ratio=-1'], 'datasets.train.dataset_enlarge_ratio: expected a number > 0'),
    (['manual_seed=-3'], 'manual_seed: must be an integer >= 0'),
    (['short_run=0'], 'short_run: must be a positive integer'),
    (['short_run=-2'], 'short_run: must be a positive integer'),
    (['short_run=2', 'datasets:train:batch_size_per_gpu=abc'], "batch_size_per_gpu: must be a positive integer"),
])
def test_numbers_that_must_be_positive_say_so(rendered_sets, tmp_path, monkeypatch, capsys, entries, needle):
    """A count set by an override is checked as the file's: it must be a positive integer (workers, the seed: >= 0),
    never a hint to write ``!!float -5``; the checks see what the short-run preset made."""
    line = refused(tmp_path, monkeypatch, capsys, train_options(rendered_sets), entries)
    assert needle in line and '!!float' not in line, line


def test_a_negative_total_iter_in_the_file_says_it_must_be_a_positive_integer(rendered_sets, tmp_path, monkeypatch,
                                                                              capsys):
    opt = train_options(rendered_sets)
    opt['train']['total_iter'] = -5
    line = refused(tmp_path, monkeypatch, capsys, opt, [])
    assert line.endswith('options.yml: train.total_iter: must be a positive integer (the number of iterations), got '
                         '-5 (int)'), line
