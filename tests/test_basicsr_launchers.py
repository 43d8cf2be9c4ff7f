"""BasicSR's own launchers run TOLA and the baselines (docs/baselines.md): the import hook installed with the package,
BasicSR's train.py/test.py as scripts of a checkout and as ``python -m``, the side-by-side comparison of the docs run
command by command, and a regular (non-editable) install of the package."""
import glob
import json
import logging
import os
import re
import subprocess
import sys

import cv2
import pytest

import basicsr
from basicsr.archs import build_network
from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.commands.evaluation.records import basicsr_output_names
from tola_plugin.inference.demo_model import is_demo_model
from tola_plugin.options.checks import check_options
from conftest import REPO, render_pairs, run_launcher, write_options
from launcher_testing import doc_commands, make_checkout, run_doc_command, run_tool_in_process, tiny_options
from tola_testing import load_yaml, one_thread, tiny_demo_options  # noqa: F401  (fixture)

HOOK_PROBE = r'''
import json, sys
heavy = sorted(m for m in ('torch', 'torchvision', 'numpy', 'cv2', 'basicsr', 'tola_plugin') if m in sys.modules)
import tola_plugin_hook
waiting = tola_plugin_hook.installed()
import basicsr
import basicsr.utils.options
from basicsr.utils.registry import ARCH_REGISTRY, DATASET_REGISTRY, MODEL_REGISTRY
print(json.dumps({
    'heavy_at_start': heavy, 'waiting': waiting, 'waiting_after': tola_plugin_hook.installed(),
    'registered': ['TOLAModel' in MODEL_REGISTRY, 'TOLANet' in ARCH_REGISTRY,
                   'TextDegradationDataset' in DATASET_REGISTRY],
    'shim': 'torchvision.transforms.functional_tensor' in sys.modules,
    'loader': type(basicsr.__loader__).__name__,
    'parse_options': basicsr.utils.options.parse_options.__module__,
    'launchers': [sys.modules[m].parse_options.__module__ for m in ('basicsr.train', 'basicsr.test')],
}))
'''


def probe_hook(cwd):
    """Run HOOK_PROBE in a fresh interpreter in ``cwd`` (not the repository, whose packages it would import);
    returns its JSON."""
    proc = subprocess.run([sys.executable, '-c', HOOK_PROBE], capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_hook_at_start_and_on_import_basicsr(tmp_path):
    seen = probe_hook(tmp_path)
    assert seen['heavy_at_start'] == [] and seen['waiting'] and not seen['waiting_after']
    assert seen['registered'] == [True, True, True] and seen['shim']
    assert seen['loader'] == 'SourceFileLoader'  # basicsr's own loader once imported
    assert seen['parse_options'] == 'tola_plugin.basicsr_glue.launchers'
    assert seen['launchers'] == ['tola_plugin.basicsr_glue.launchers'] * 2  # basicsr imported them before the plugin

    off = subprocess.run(
        [sys.executable, '-c', 'import tola_plugin_hook; assert not tola_plugin_hook.installed(); import basicsr'],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TOLA_PLUGIN_HOOK='0'), cwd=tmp_path)
    assert off.returncode == 1
    assert "No module named 'torchvision.transforms.functional_tensor'" in off.stderr  # basicsr 1.4.2 as it is


def test_hook_switch_values(capsys):
    from tola_plugin_hook import hook_enabled
    assert hook_enabled({}) and hook_enabled({'TOLA_PLUGIN_HOOK': 'on'}) and hook_enabled({'TOLA_PLUGIN_HOOK': '1'})
    assert not hook_enabled({'TOLA_PLUGIN_HOOK': '0'}) and not hook_enabled({'TOLA_PLUGIN_HOOK': 'Off'})
    assert hook_enabled({'TOLA_PLUGIN_HOOK': 'maybe'})
    assert "ignoring TOLA_PLUGIN_HOOK='maybe'" in capsys.readouterr().err


def test_hook_finder_answers_once_and_a_failing_plugin_is_named(monkeypatch):
    """In process: the finder gives basicsr's own spec with the shimmed loader, once; when the plugin cannot be
    imported, ``import basicsr`` fails with a message naming the plugin and the switch."""
    import importlib.machinery
    import types

    import tola_plugin_hook
    import tola_plugin_shim
    monkeypatch.setattr(sys, 'meta_path', list(sys.meta_path))
    finder = tola_plugin_shim.BasicSRFinder([tola_plugin_hook.register_plugin])
    sys.meta_path.insert(0, finder)
    assert finder.find_spec('numpy') is None and tola_plugin_hook.installed()
    spec = finder.find_spec('basicsr')
    assert spec.origin == basicsr.__spec__.origin and isinstance(spec.loader, tola_plugin_shim._ShimmedLoader)
    assert not tola_plugin_hook.installed()  # one shot: the plugin's own `import basicsr` finds basicsr plainly

    class Loader:
        executed = False

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            Loader.executed = True

    module = types.ModuleType('fake_basicsr')
    module.__spec__ = importlib.machinery.ModuleSpec('fake_basicsr',
                                                     tola_plugin_shim._ShimmedLoader(Loader(), finder.after))
    monkeypatch.setitem(sys.modules, 'tola_plugin', None)  # the plugin cannot be imported
    with pytest.raises(ImportError, match='tola-plugin could not register itself.*TOLA_PLUGIN_HOOK=0'):
        module.__spec__.loader.exec_module(module)
    assert Loader.executed and isinstance(module.__loader__, Loader)  # basicsr's own loader ran, and stays


def test_import_tola_plugin_is_light_and_registers_on_basicsrs_first_import(tmp_path):
    """``import tola_plugin`` imports neither torch nor basicsr (the tools' light parts answer at once); the first
    ``import basicsr`` of the process then finds the plugin registered, with the hook off too."""
    probe = ('import json, sys, tola_plugin\n'
             'light = [m for m in ("torch", "basicsr", "tola_plugin.basicsr_glue") if m in sys.modules]\n'
             'from tola_plugin.utils import cli_errors\n'
             'from tola_plugin.options import reader\n'
             'from tola_plugin.commands.data_preparation import dataset_split\n'
             'still = [m for m in ("torch", "basicsr") if m in sys.modules]\n'
             'from basicsr.utils.registry import ARCH_REGISTRY\n'
             'import basicsr.utils.options as options\n'
             'print(json.dumps([light, still, "TOLANet" in ARCH_REGISTRY, options.parse_options.__module__]))\n')
    for hook in ('1', '0'):
        proc = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env=dict(os.environ, TOLA_PLUGIN_HOOK=hook))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.splitlines()[-1]) == [[], [], True, 'tola_plugin.basicsr_glue.launchers'], hook


def test_python_m_launchers_run_without_runtime_warning(tmp_path):
    """basicsr's __init__ imports basicsr.train and basicsr.test itself; in ``python -m basicsr.train`` the hook
    forgets that copy once the plugin is registered, so runpy runs the launcher without "RuntimeWarning:
    'basicsr.train' found in sys.modules" (the launcher still parses with the plugin's options: -h)."""
    procs = {
        m: subprocess.Popen([sys.executable, '-m', m, '-h'], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
        for m in ('basicsr.train', 'basicsr.test')
    }
    for module, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and '--force_yml' in out, err[-2000:]
        assert 'RuntimeWarning' not in err and 'found in sys.modules' not in err, (module, err[-2000:])


def test_hook_knows_the_module_python_m_runs():
    from tola_plugin_hook import module_run_as_main
    assert module_run_as_main(['-m'], ['python', '-X', 'dev', '-m', 'basicsr.train', '-opt', 'x']) == 'basicsr.train'
    assert module_run_as_main(['-m'], ['python', '-mbasicsr.test']) == 'basicsr.test'
    assert module_run_as_main(['train.py'], ['python', 'train.py', '-m', 'basicsr.train']) is None  # a script
    assert module_run_as_main(['-c'], ['python', '-c', 'import basicsr']) is None


def read_logs(folder, prefix):
    return ''.join(open(p, encoding='utf-8').read() for p in sorted(glob.glob(os.path.join(folder, f'{prefix}_*.log'))))


@pytest.mark.end_to_end
def test_checkout_train_py_then_python_m_resume_then_test_py(rendered_sets, tmp_path):
    """A BasicSR checkout: its train.py trains TOLA, the installed package's ``python -m basicsr.train`` resumes the
    same experiment (run from the checkout, its outputs go there), its test.py tests the result."""
    checkout = tmp_path / 'BasicSR'
    scripts = make_checkout(checkout)
    opt = tiny_demo_options(rendered_sets, 'tola_bsr', total_iter=1, freq=1)
    opt['val']['val_freq'] = 100  # BasicSR validates once more at the end of every run: enough
    opt_file = write_options(tmp_path / 'train.yml', opt)
    env = {'OMP_NUM_THREADS': '1'}
    run_launcher([scripts['train'], '-opt', opt_file], cwd=checkout, env=env)
    exp = checkout / 'experiments' / 'tola_bsr'
    assert (exp / 'models' / 'net_g_1.pth').is_file() and (exp / 'training_states' / '1.state').is_file()
    log = read_logs(exp, 'train')
    assert 'Model [TOLAModel] is created.' in log and 'TransOCR ACC' in log  # validation of TOLAModel ran

    proc = run_launcher(['-m', 'basicsr.train', '-opt', opt_file, '--auto_resume', '--force_yml', 'train:total_iter=2'],
                        cwd=checkout, env=env)
    assert 'its outputs go under the current directory' in proc.stderr
    log = read_logs(exp, 'train')
    assert 'Resuming training from epoch: 0, iter: 1.' in log and 'iter:       2,' in log  # the plugin's resume
    site_packages = os.path.dirname(os.path.dirname(basicsr.__file__))
    assert not os.path.exists(os.path.join(site_packages, 'experiments', 'tola_bsr'))

    test = tiny_demo_options(rendered_sets, 'unused', total_iter=2, freq=2)
    test = {
        'name': 'tola_bsr_test', 'model_type': 'TOLAModel', 'scale': 1, 'num_gpu': 0, 'manual_seed': 0,
        'datasets': {'test_1': dict(test['datasets']['val'],
                                    name='rendered_val')}, 'network_g': test['network_g'], 'path': {
                                        'pretrain_network_g': str(exp / 'models' / 'net_g_latest.pth'),
                                        'param_key_g': 'params', 'strict_load_g': True
                                    }, 'val': dict(test['val'], suffix=None)
    }
    test['val'].pop('val_freq')
    run_launcher([scripts['test'], '-opt', write_options(tmp_path / 'test.yml', test)], cwd=checkout, env=env)
    restored = glob.glob(str(checkout / 'results' / 'tola_bsr_test' / 'visualization' / 'rendered_val' / '*.png'))
    assert len(restored) == 2 and cv2.imread(restored[0]).shape == (128, 512, 3)


# --------------------------------------------------------------------------------------- docs, command by command
def render_ctr_layout(root):
    """The layout the option files expect under ``datasets/`` (docs/data.md), tiny: 6 rendered training lines in a
    FudanVI LMDB with a 4/2 split, and 2 test pairs at x4."""
    lmdb = os.path.join(root, 'datasets', 'CTR', 'scene_train.lmdb')
    assert run_tool_in_process('render_text.py', ['--num', '6', '--seed', '0', '--lmdb', lmdb]) == 0
    assert run_tool_in_process(
        'split_dataset.py',
        ['--lmdb', lmdb, '--val-fraction', '0.34', '--out-dir',
         os.path.join(root, 'datasets', 'CTR', 'split')]) == 0
    render_pairs(os.path.join(root, 'datasets', 'CTR-TSR-Test'), 2, seed=1)


@pytest.mark.end_to_end
def test_side_by_side_doc_commands(tmp_path, monkeypatch, one_thread):  # noqa: F811
    """docs/baselines.md, "One comparison" and "Text-aware baselines": every command in order (TOLA and each baseline
    trained one iteration of a tiny network and tested by BasicSR's launchers), then the evaluation table."""
    render_ctr_layout(str(tmp_path))
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'no_weights'))  # LPIPS, DISTS, FID: skipped, said so
    commands = doc_commands('docs/baselines.md')
    (evaluate, ) = [c for c in commands if c[0] == 'tools/evaluate.py']
    commands.remove(evaluate)
    assert [c[1] for c in commands[:2]] == ['basicsr.train', 'basicsr.test']
    for argv in commands:
        run_doc_command(argv, str(tmp_path), monkeypatch)
    for name in ('TextSwinIR_x4_CTR_test', 'TextESRGAN_x4_CTR_test'):  # the text-aware baselines, tested
        images = glob.glob(str(tmp_path / 'results' / name / 'visualization' / 'CTR_TSR_Test_x4' / '*.png'))
        assert len(images) == 2, name

    methods = dict(a.split('=', 1) for a in evaluate if '=' in a and not a.startswith('--'))
    assert set(methods) == {'TOLA', 'ESRGAN', 'RRDBNet', 'SwinIR', 'EDSR', 'RCAN'}
    for folder in methods.values():
        images = sorted(glob.glob(str(tmp_path / folder / '*.png')))
        assert len(images) == 2 and all(cv2.imread(p).shape == (128, 512, 3) for p in images), folder
    assert (tmp_path / 'experiments' / 'ESRGAN_x4_CTR' / 'models' / 'net_d_latest.pth').is_file()

    # the official transocr.pth cannot be here: T-ACC/T-NED are tested with a tiny TransOCR in test_eval_tools.py
    at = evaluate.index('--transocr-checkpoint')
    del evaluate[at:at + 2]
    run_doc_command(evaluate, str(tmp_path), monkeypatch)
    out = tmp_path / evaluate[evaluate.index('--out') + 1]
    summary = json.loads((out / 'summary.json').read_text(encoding='utf-8'))
    assert set(summary['summary']) == set(methods)
    assert summary['protocol']['name_suffixes'] == {
        'TOLA': 'TOLA_CTR_test', 'ESRGAN': 'ESRGAN_x4_CTR_test', 'RRDBNet': 'RRDBNet_PSNR_x4_CTR_test',
        'SwinIR': 'SwinIR_x4_CTR_test', 'EDSR': 'EDSR_x4_CTR_test', 'RCAN': 'RCAN_x4_CTR_test'
    }
    assert {'lpips', 'dists', 'fid'} <= set(summary['protocol']['skipped'])
    for values in summary['summary'].values():
        assert {'psnr', 'ssim'} <= set(values)
    table = (out / 'summary.md').read_text(encoding='utf-8')
    assert all(f'| {m} |' in table for m in methods)


@pytest.mark.end_to_end
def test_own_data_doc_commands(tmp_path, monkeypatch, capsys, caplog, one_thread):  # noqa: F811
    """docs/own_data.md as written: every command in order, from an empty folder outside the repository, with the
    shipped demo backbone and no ImageNet file (40 rendered lines instead of 200; the option files unchanged); the
    result the page promises (TOLA within 1 dB of bicubic), the export and the restored photo."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'no_weights'))
    monkeypatch.setenv('TOLA_PLUGIN', REPO)
    work = tmp_path / 'my_tsr'
    work.mkdir()
    assert os.path.commonpath([str(work), REPO]) != REPO
    commands = doc_commands('docs/own_data.md')
    assert commands[0][0] == 'tola-render-text' and commands[-1][0] == 'tola-infer'
    commands[0][commands[0].index('--num') + 1] = '40'
    lpips_overrides = ['train:perceptual_opt=~', 'val:metrics:lpips=~']
    logger = logging.getLogger('basicsr')  # BasicSR's logger does not propagate to the root logger
    monkeypatch.setattr(logger, 'handlers', [caplog.handler])  # (its file handler is the first run's of the process)
    caplog.set_level(logging.INFO, logger='basicsr')  # (its level is set by the process's first run, if any)
    for argv in commands:
        if argv[:2] == ['-m', 'basicsr.train'] and lpips_overrides[0] in argv:
            # first as a user with the ImageNet files absent who has not added the overrides yet: a clear choice
            with pytest.raises(FileNotFoundError) as missing:
                run_doc_command([a for a in argv if a not in lpips_overrides], str(work), monkeypatch, shrink=False)
            message = str(missing.value)
            for name in ('vgg16-397923af.pth', 'alexnet-owt-7be5be79.pth'):
                assert f'{name} in {tmp_path / "no_weights" / "hub" / "checkpoints"}' in message
                assert f'https://download.pytorch.org/models/{name}' in message
            assert message.endswith('run without those parts: --force_yml ' + ' '.join(lpips_overrides))
            assert not (work / 'experiments').exists()  # stopped before anything was made
        run_doc_command(argv, str(work), monkeypatch, shrink=False)

    assert 'note: short_run: 4 iterations' in capsys.readouterr().err
    for prefix in ('TOLA_', 'RRDBN'):  # the short run: 4 iterations, a loss line each, then the validation
        assert all(
            re.search(rf'\[{prefix}..\]\[epoch:\s+0, iter:\s+{i}, lr.*l_pix: ', caplog.text)
            for i in (1, 2, 3, 4)), prefix
        assert not re.search(rf'\[{prefix}..\]\[epoch:\s+\d+, iter:\s+5,', caplog.text)
    # once per run, after its last iteration, under the user's data's name (not the option file's CTR_TSR_val), its
    # best numbered with the last iteration trained
    assert len(re.findall(r'Validation lines_val\n', caplog.text)) == 2
    best = re.findall(r'Best: .* @ (\d+) iter', caplog.text)
    assert best and set(best) == {'4'}
    test_set = work / 'datasets' / 'own' / 'test'
    names = [line.split('\t')[0] for line in (test_set / 'labels.tsv').read_text(encoding='utf-8').splitlines()]
    held_out = [int(v) for v in (work / 'datasets/own/holdout/val_index.txt').read_text().split()]
    assert names == [f'image-{i + 1:09d}.png' for i in held_out]  # the held-out lines, by LMDB key
    assert cv2.imread(str(test_set / 'lr_x4' / names[0])).shape == (32, 128, 3)
    assert cv2.imread(str(test_set / 'hr' / names[0])).shape == (128, 512, 3)
    parts = [
        set(int(v) for v in (work / 'datasets/own' / f).read_text().split())
        for f in ('holdout/val_index.txt', 'split/train_index.txt', 'split/val_index.txt')
    ]
    assert sum(map(len, parts)) == 40 and len(set.union(*parts)) == 40  # disjoint, all lines
    sources = (test_set / 'sources.tsv').read_text(encoding='utf-8').splitlines()[1:]  # back to the user's files
    assert sorted(line.split('\t')[0] for line in sources) == sorted(names)
    assert all(line.split('\t')[2].endswith('.png') for line in sources)

    # BasicSR's `python -m` launchers run from site-packages: the plugin keeps every output in the current folder
    assert (work / 'tb_logger' / 'TOLA_own').is_dir() and (work / 'experiments' / 'RRDBNet_own').is_dir()
    site_packages = os.path.dirname(os.path.dirname(basicsr.__file__))
    assert not any(os.path.exists(os.path.join(site_packages, d)) for d in ('experiments', 'tb_logger', 'results'))
    assert not any(
        os.path.exists(os.path.join(REPO, d, n)) for d in ('experiments', 'results')
        for n in ('TOLA_own', 'RRDBNet_own_test'))

    summary = json.loads((work / 'results' / 'eval_own' / 'summary.json').read_text(encoding='utf-8'))
    assert set(summary['summary']) == {'TOLA', 'RRDBNet', 'Bicubic'}
    assert summary['protocol']['name_suffixes'] == {'TOLA': 'TOLA_own_test', 'RRDBNet': 'RRDBNet_own_test'}
    assert summary['protocol']['upscaled'] == {'Bicubic': 4} and summary['protocol']['n_images'] == len(names)
    assert {'lpips', 'dists', 'fid'} <= set(summary['protocol']['skipped'])
    upscaled = cv2.imread(str(work / 'results' / 'eval_own' / 'upscaled' / 'Bicubic' / names[0]))
    assert upscaled.shape == (128, 512, 3)
    # what section 4 promises: TOLA from the demo adaptation within 1 dB of bicubic (+1.34 dB on the page's 20 lines
    # with the model shipped since 2026-11-30; -0.48 dB on these 4 with the one before), the RRDBNet not yet a model
    rows = summary['summary']
    assert rows['TOLA']['psnr'] >= rows['Bicubic']['psnr'] - 1.0, rows
    assert rows['RRDBNet']['psnr'] < rows['Bicubic']['psnr'], rows
    # section 5: the merged model of the demo backbone, and the photo restored with it
    assert is_demo_model(str(work / 'TOLA_own_merged.safetensors'))
    record = json.loads((work / 'results' / 'photo' / 'photo.json').read_text(encoding='utf-8'))
    assert record['detected'] and len(record['lines']) >= 3 and record['outscale'] == 1.0  # "at its own size"
    assert all(isinstance(line['pasted'], bool) for line in record['lines'])
    photo = cv2.imread(os.path.join(REPO, 'tola_plugin', 'assets', 'rendered_samples', 'photo.png'))
    assert cv2.imread(str(work / 'results' / 'photo' / 'photo.png')).shape == photo.shape


@pytest.mark.parametrize('launcher', ['tola_plugin.train', 'basicsr.train', 'tola_plugin.test'])
def test_a_failed_start_leaves_no_folders(rendered_sets, tmp_path, launcher):
    """A start that fails after the options are read (here a missing dataroot, found when the datasets are built,
    after BasicSR has made the run's folders) leaves no experiments/<name>/, results/<name>/ or tb_logger/<name>/,
    nor the experiments/, results/ and tb_logger/ folders it made: our launchers and BasicSR's own."""
    train = 'train' in launcher
    name = 'train_RRDBNet_PSNR_x4.yml' if train else 'test_RRDBNet_PSNR_x4.yml'
    opt = tiny_options(load_yaml(os.path.join(REPO, 'options', 'baselines', name)))
    opt['path']['pretrain_network_g'] = None
    for ds in opt['datasets'].values():
        ds.pop('index_list', None)
        ds.update(
            dataroot_gt=str(tmp_path / 'no_such_folder'), io_backend={'type': 'disk'},
            labels=os.path.join(rendered_sets['val'], 'labels.tsv'))
        if 'dataroot_lq' in ds:
            ds['dataroot_lq'] = os.path.join(rendered_sets['val'], 'lr_x4')
    opt['logger'] = dict(opt.get('logger') or {}, use_tb_logger=True)
    work = tmp_path / 'work'
    work.mkdir()
    path = write_options(tmp_path / 'options.yml', opt)
    proc = subprocess.run([sys.executable, '-m', launcher, '-opt', path], cwd=work, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert proc.returncode == 2 and 'no_such_folder' in proc.stderr.splitlines()[-1], proc.stderr[-2000:]
    assert os.listdir(work) == []
    # a folder that was there before is left alone (only what the failed start made goes)
    (work / 'experiments').mkdir()
    (work / 'experiments' / 'other_run').mkdir()
    subprocess.run([sys.executable, '-m', launcher, '-opt', path], cwd=work, capture_output=True, timeout=600,
                   env=dict(os.environ, OMP_NUM_THREADS='1'))
    assert sorted(os.listdir(work)) == ['experiments'] and os.listdir(work / 'experiments') == ['other_run']


def test_basicsr_output_names():
    """BasicSR's test-launcher names (<stem>_<suffix>.png) matched to the references; anything else stays exact."""
    refs = ['a.jpg', 'b_1.png', 'c.png']
    assert basicsr_output_names(['a_X_test.png', 'b_1_X_test.png', 'c_X_test.png'], refs) == ({
        'a.jpg': 'a_X_test.png', 'b_1.png': 'b_1_X_test.png', 'c.png': 'c_X_test.png'
    }, 'X_test')
    assert basicsr_output_names(['a_X.png', 'c_X.png'], refs) == ({'a.jpg': 'a_X.png', 'c.png': 'c_X.png'}, 'X')
    for names in (refs, ['a_X.png', 'b_1_Y.png', 'c_X.png'], ['a_X.png', 'zzz.png'], ['a_X.jpg']):
        assert basicsr_output_names(names, refs) == ({n: n for n in names}, None)  # exact: the matcher names misses


# ------------------------------------------------------------------------------------------- a regular install
def test_install_regular_wheel_registers_hook(tmp_path):
    """``pip install .`` (a wheel, not editable) into a fresh venv that sees this environment's dependencies but not
    its editable install: the hook's .pth lands in site-packages and registers the installed copy of the plugin
    (tools/benchmark_startup.py builds its venvs the same way, with tola_lab/benchmarks/startup_benchmark.py)."""
    from tola_lab.benchmarks import startup_benchmark as bench
    python = bench.make_venv(str(tmp_path / 'venv'))
    bench.pip_install(python, bench.copy_sources(REPO, str(tmp_path / 'src')))
    site = bench.site_packages(python)
    with open(os.path.join(site, 'tola_plugin_hook.pth'), encoding='utf-8') as f:
        assert f.read() == 'import tola_plugin_hook; tola_plugin_hook.install()\n'
    # what `import basicsr` then does is the same code as in this editable environment (tested above): here, only
    # that the hook waits at start and would import the installed copies of the shim and the plugin
    proc = subprocess.run([
        python, '-c', 'import importlib.util as u, sys, tola_plugin_hook; print(tola_plugin_hook.installed(), '
        '"torch" in sys.modules, "torchvision" in sys.modules, tola_plugin_hook.__file__, '
        'sys.modules["tola_plugin_shim"].__file__, u.find_spec("tola_plugin").origin, '
        'u.find_spec("tola_lab.gpu_check.step_child").origin)'
    ], capture_output=True, text=True, timeout=300, cwd=tmp_path, check=True)
    waiting, torch_imported, shim_run, hook_file, shim_file, plugin_file, lab_file = proc.stdout.split()
    assert waiting == 'True' and torch_imported == 'False' and shim_run == 'False'  # nothing but the finder
    assert hook_file.startswith(site) and shim_file.startswith(site) and plugin_file.startswith(site)
    assert lab_file.startswith(site)  # the lab: a package of its own in the same wheel


@pytest.mark.parametrize('name', sorted(os.listdir(os.path.join(REPO, 'options', 'baselines'))))
def test_baseline_files_are_stock_basicsr_with_our_data(name):
    """Nothing of ours in a baseline file beyond the datasets (strictly checked) and, in the text-aware files
    (train_Text*.yml), the text-aware version of the BasicSR model with its ocr_opt; its networks build (tiny)."""
    opt = load_yaml(os.path.join(REPO, 'options', 'baselines', name))
    model = opt['model_type'][4:] if name.startswith('train_Text') else opt['model_type']
    assert model in ('SRModel', 'ESRGANModel', 'SwinIRModel') and opt['scale'] == 4
    for key in ('network_g', 'network_d'):
        if key in opt:
            assert ARCH_REGISTRY.get(opt[key]['type']).__module__.startswith('basicsr.archs.'), opt[key]['type']
            assert build_network(dict(tiny_options(opt)[key])) is not None
    for ds in opt['datasets'].values():
        assert ds['type'] in ('TextDegradationDataset', 'PairedTextDataset') and ds['lq_size'] == 'native'
    datasets = {k: dict(v, phase=k.split('_')[0], scale=4) for k, v in opt['datasets'].items()}
    check_options(dict(opt, num_gpu=0, is_train='train' in opt, datasets=datasets))  # as parse_options would


@pytest.mark.end_to_end
def test_the_demo_s_plain_cnn_row_trains_tests_and_is_scored(rendered_sets, tmp_path):
    """docs/demo_backbone.md's RRDBNet row, on 8 + 2 rendered lines laid out as demo_data/: its training file (two
    iterations), its test file (the held-out lines at native size, restored x4 to the HR's size) and tola-evaluate on
    the test launcher's folder as it is (BasicSR's <stem>_RRDBNet.png names matched to the references)."""
    import shutil
    work = tmp_path / 'work'
    for name, split in (('long_train', 'train'), ('tola_val', 'val')):
        folder = shutil.copytree(os.path.join(rendered_sets[split], 'hr'), work / 'demo_data' / name)
        shutil.copy(os.path.join(rendered_sets[split], 'labels.tsv'), folder / 'labels.tsv')
    env = {'OMP_NUM_THREADS': '1'}
    run_launcher([
        '-m', 'tola_plugin.train', '-opt',
        os.path.join(REPO, 'options', 'demo', 'train_RRDB_demo_same_data.yml'), '--force_yml', 'short_run=2'
    ], cwd=work, env=env)
    assert (work / 'experiments' / 'demo_RRDB_same_data' / 'models' / 'net_g_latest.pth').is_file()
    run_launcher(
        ['-m', 'tola_plugin.test', '-opt',
         os.path.join(REPO, 'options', 'demo', 'test_RRDB_demo_same_data.yml')], cwd=work, env=env)
    restored = work / 'results' / 'demo_RRDB_same_data_test' / 'visualization' / 'rendered_val'
    assert sorted(os.listdir(restored)) == ['000001_RRDBNet.png', '000002_RRDBNet.png']
    assert cv2.imread(str(restored / '000001_RRDBNet.png')).shape == (128, 512, 3)
    run_launcher([
        '-m', 'tola_cli.evaluate', '--reference',
        str(work / 'demo_data' / 'tola_val'), '--labels',
        str(work / 'demo_data' / 'tola_val' / 'labels.tsv'), '--method', f'RRDBNet={restored}', '--metrics',
        'psnr,ssim', '--out',
        str(work / 'eval'), '--no-progress'
    ], cwd=work, env=env)
    summary = json.loads((work / 'eval' / 'summary.json').read_text(encoding='utf-8'))
    assert summary['summary']['RRDBNet']['psnr'] > 5  # scored against the references, not an empty match
