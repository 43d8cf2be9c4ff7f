"""Every command line answers --help at once, importing nothing of the package (they parse first: tola_cli/command.py);
the user's tools are console scripts that run from any folder; the defaults their parsers repeat are the package's."""
import importlib
import json
import os
import subprocess
import sys
from importlib.metadata import entry_points

from tola_cli.defaults import SOURCES
from tola_testing import REPO

TOOLS = sorted(n for n in os.listdir(os.path.join(REPO, 'tools')) if n.endswith('.py'))
CLI_HELPERS = ('__init__.py', 'arguments.py', 'command.py', 'defaults.py')
CLI_MODULES = sorted(n[:-3] for n in os.listdir(os.path.join(REPO, 'tola_cli'))
                     if n.endswith('.py') and n not in CLI_HELPERS)
HEAVY = ('torch', 'numpy', 'cv2', 'PIL', 'basicsr', 'tola_plugin', 'diffusers', 'lmdb', 'yaml')

PROBE = r'''
import contextlib, io, json, runpy, sys
heavy = {heavy!r}
seen = {{}}
for kind, target in json.loads(sys.argv[1]):
    sys.argv = [target, '--help']
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_path(target, run_name='__main__') if kind == 'path' else runpy.run_module(target,
                                                                                               run_name='__main__')
        except SystemExit as exit:
            code = exit.code
    seen[target] = [code, 'usage:' in out.getvalue(), sorted(m for m in heavy if m in sys.modules)]
print(json.dumps(seen))
'''


def test_every_command_answers_help_without_the_package(tmp_path):
    """``python tools/X.py --help`` and ``python -m tola_cli.X --help`` for every command, in one fresh interpreter
    started outside the repository: the usage is printed, exit 0, and no heavy module (torch, basicsr, the package,
    ...) was imported by any of them (so --help takes milliseconds, not the package's ~7 s import)."""
    targets = [('path', os.path.join(REPO, 'tools', n)) for n in TOOLS] + [('module', f'tola_cli.{m}')
                                                                           for m in CLI_MODULES]
    proc = subprocess.run([sys.executable, '-c', PROBE.format(heavy=HEAVY),
                           json.dumps(targets)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(seen) == len(targets) > 30
    for target, (code, usage, heavy) in seen.items():
        assert code == 0 and usage and heavy == [], (target, code, usage, heavy)


def test_the_users_tools_are_console_scripts_with_aliases_in_tools(tmp_path):
    """Each tola_cli tool is the console script tola-<name> (installed metadata) and tools/<name>.py in a clone; the
    installed script answers from a folder outside the repository."""
    setup = open(os.path.join(REPO, 'setup.py'), encoding='utf-8').read()
    scripts = {e.name: e.value for e in entry_points(group='console_scripts') if e.value.startswith('tola_cli.')}
    for module in CLI_MODULES:
        name = 'tola-' + module.replace('_', '-')
        if module in ('infer', 'web', 'train', 'test'):  # no alias in tools/: python -m tola_plugin.train, ...
            assert scripts[name] == f'tola_cli.{module}:cli' and f"'{name}=tola_cli.{module}:cli'" in setup, module
            continue
        assert scripts[name] == f'tola_cli.{module}:cli' and f"'{module}'" in setup, module
        alias = open(os.path.join(REPO, 'tools', f'{module}.py'), encoding='utf-8').read()
        assert f'from tola_cli.{module} import cli, main' in alias, module
    script = os.path.join(os.path.dirname(sys.executable), 'tola-make-lmdb')
    proc = subprocess.run([script, '--help'], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith('usage: tola-make-lmdb')


def test_the_defaults_the_parsers_repeat_are_the_packages():
    import inspect

    import tola_cli.defaults as defaults
    for name, (module, attribute, *parameter) in SOURCES.items():
        theirs = getattr(importlib.import_module(module), attribute)
        if parameter:  # a default of a function's (or a class's) parameter
            theirs = inspect.signature(theirs).parameters[parameter[0]].default
        ours = getattr(defaults, name)
        assert (tuple(theirs) if isinstance(ours, tuple) else theirs) == ours, name


def test_the_launchers_help_names_the_plugins_overrides(capsys):
    """tola-train --help (no basicsr import: the test above) lists BasicSR's flags and the plugin's --force_yml
    additions: short_run=N, val:metrics:NAME=~ and the demo values."""
    import pytest

    from tola_cli import test as test_cli
    from tola_cli import train as train_cli
    with pytest.raises(SystemExit) as done:
        train_cli.parse_args(['--help'])
    text = capsys.readouterr().out
    assert done.value.code == 0 and text.startswith('usage: tola-train')
    for needle in ('-opt OPT', '--auto_resume', '--launcher', '--force_yml', 'short_run=N', 'val:metrics:NAME=~',
                   'network_g:backbone_init=demo', 'path:pretrain_network_g=demo', 'train:ocr_recognizer=demo'):
        assert needle in text, needle
    with pytest.raises(SystemExit):
        test_cli.parse_args(['--help'])
    text = capsys.readouterr().out
    assert text.startswith('usage: tola-test') and 'val:metrics:NAME=~' in text and '--auto_resume' not in text
    with pytest.raises(SystemExit) as usage:
        train_cli.parse_args([])
    assert usage.value.code == 2 and 'the following arguments are required: -opt' in capsys.readouterr().err


def heavy_imports(stderr: str) -> set:
    """The heavy modules a process imported (torch, yaml, basicsr's modules), from its ``PYTHONPROFILEIMPORTTIME``
    lines on stderr (``basicsr`` itself is listed when its import began: the launcher's check runs there)."""
    names = {line.rsplit('|', 1)[1].strip() for line in stderr.splitlines() if line.startswith('import time:')}
    return {
        name.split('.')[0]
        for name in names if name.split('.')[0] in ('torch', 'yaml') or '.' in name and name.startswith('basicsr.')
    }


LAUNCHERS = ('basicsr.train', 'basicsr.test', 'tola_plugin.train', 'tola_plugin.test')


def test_python_m_launchers_answer_help_with_the_plugins_overrides_at_once(tmp_path):
    """``python -m basicsr.train --help`` (the launcher docs/own_data.md uses) showed BasicSR's bare help after 6-13 s
    of imports, without the plugin's --force_yml additions; ``python -m tola_plugin.train --help`` took as long. Now
    the four answer as tola-train does (the import hook checks their command line first): no torch, no basicsr."""
    for launcher in LAUNCHERS:
        proc = subprocess.run([sys.executable, '-m', launcher, '--help'], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, PYTHONPROFILEIMPORTTIME='1'))
        assert proc.returncode == 0 and proc.stdout.startswith(f'usage: python -m {launcher} '), proc.stdout[:300]
        for needle in ('--force_yml', 'short_run=N', 'val:metrics:NAME=~', 'network_g:backbone_init=demo'):
            assert needle in proc.stdout, (launcher, needle)
        assert ('--auto_resume' in proc.stdout) == launcher.endswith('train'), launcher
        assert not heavy_imports(proc.stderr), launcher
    usage = subprocess.run([sys.executable, '-m', 'basicsr.train', '-opt', 'x.yml', '--auto_rezume'], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and 'unrecognized arguments: --auto_rezume' in usage.stderr


def test_a_wrong_path_is_said_before_torch_is_imported(tmp_path):
    """A start-time error of the launchers came after 54-94 s of imports under load. The option file, its --force_yml
    entries and the paths the run reads are now checked first: own_data.md's command with a mistyped LMDB ends in one
    line naming the option and the path, torch never imported, by each way of starting the run."""
    option = os.path.join(REPO, 'options', 'train', 'train_TOLA.yml')
    overrides = ['--force_yml', 'name=TOLA_own', 'short_run=4', 'datasets:train:dataroot_gt=datasets/own/line.lmdb']
    (tmp_path / 'datasets' / 'own' / 'lines.lmdb').mkdir(parents=True)
    script = os.path.join(os.path.dirname(sys.executable), 'tola-train')
    starts = [[sys.executable, '-m', launcher] for launcher in LAUNCHERS if launcher.endswith('train')] + [[script]]
    for start in starts:
        proc = subprocess.run(start + ['-opt', option] + overrides, cwd=tmp_path, capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, PYTHONPROFILEIMPORTTIME='1'))
        said = [line for line in proc.stderr.splitlines() if not line.startswith('import time:')]
        assert proc.returncode == 2 and len(said) == 1, (start, said)
        assert said[0].startswith(f'error: {option} with --force_yml') and 'datasets.train.dataroot_gt: ' \
            "datasets/own/line.lmdb not found; expected a folder" in said[0] and "has 'lines.lmdb': a typo?" in said[0]
        assert heavy_imports(proc.stderr) == {'yaml'}, start
    test_option = os.path.join(REPO, 'options', 'test', 'test_TOLA.yml')
    proc = subprocess.run([sys.executable, '-m', 'basicsr.test', '-opt', test_option, '--force_yml', 'x'], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=dict(os.environ,
                                                                                PYTHONPROFILEIMPORTTIME='1'))
    assert proc.returncode == 2 and "error: --force_yml 'x': has no \"=\"" in proc.stderr
    assert heavy_imports(proc.stderr) == {'yaml'}
    assert os.listdir(tmp_path) == ['datasets']  # nothing made


def test_a_missing_backbone_file_is_said_at_start(tmp_path, monkeypatch):
    """Issue 49: the backbone's weight files (DiffTSR.ckpt, transocr.pth) were found missing only when the network was
    built, after the imports. ``check_start`` (which runs before them, above) names the option and the file; not for
    a backbone from the package (``backbone_init: demo``), nor once the file is there."""
    import pytest

    from tola_plugin.options.reader import OptionError
    from tola_plugin.options.start_checks import check_start
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'checkpoints').mkdir()
    (tmp_path / 'checkpoints' / 'transocr.pth').write_bytes(b'x')
    (tmp_path / 'run.yml').write_text('name: t\nnetwork_g:\n  type: TOLANet\n'
                                      '  difftsr_checkpoint: checkpoints/DiffTSR.ckpt\n'
                                      '  transocr_checkpoint: checkpoints/transocr.pth\n')
    with pytest.raises(
            OptionError, match=r'run.yml: network_g.difftsr_checkpoint: checkpoints/DiffTSR.ckpt not '
            r'found; expected a file'):
        check_start(['-opt', 'run.yml'])
    check_start(['-opt', 'run.yml', '--force_yml', 'network_g:backbone_init=demo'])
    (tmp_path / 'checkpoints' / 'DiffTSR.ckpt').write_bytes(b'x')
    check_start(['-opt', 'run.yml'])


def test_the_command_lines_call_the_package_with_keywords():
    """tola-infer and tola-web hand every argument of ``restore_folder`` and ``serve`` (ten and fourteen) over by name,
    so a parameter added, removed or moved there cannot silently take another's value."""
    import ast
    for module, function in (('infer', 'restore_folder'), ('web', 'serve')):
        tree = ast.parse(open(os.path.join(REPO, 'tola_cli', f'{module}.py'), encoding='utf-8').read())
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, 'id', None) == function]
        assert len(calls) == 1 and not calls[0].args and len(calls[0].keywords) >= 10, (module, function)
