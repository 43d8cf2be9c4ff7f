"""The GPU check on the CPU (docs/training_gpus.md, "The GPU check"): ``make gpu-bundle`` writes one folder under
60 MiB with a wheel of every distribution the image lacks, for CPython 3.12 manylinux x86-64; its wheels install
into an empty folder with ``pip install --no-index --no-deps --target`` and import (this Python is 3.11: the
pure-Python ones; the binary ones are checked for their 3.12 tags and extension modules); ``gpu_check.sh --dry-run``
runs every step on the CPU and writes the report; without a GPU the real check stops at once, naming why."""
import fcntl
import glob
import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest
from packaging.utils import parse_wheel_filename

from tola_plugin.gpu_check import bundle as B
from tola_plugin.gpu_check.cuda_tests_step import summary_counts
from tola_plugin.gpu_check.environment import BUNDLED_MODULES
from tola_testing import REPO

sys.path.insert(0, os.path.join(REPO, 'tools'))
import gpu_check  # noqa: E402  (tools/gpu_check.py)


@pytest.fixture(scope='module')
def bundle(tmp_path_factory, worker_id):
    """``make gpu-bundle`` into a folder shared by the test workers of this session, built once under a lock
    (wheels fetched once into the tests' user cache)."""
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == 'master' else base.parent  # the parent: the same for every xdist worker
    out = shared / 'gpu_bundle'
    with open(shared / 'gpu_bundle.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / 'MANIFEST.json').exists():
            env = {k: v for k, v in os.environ.items() if not k.startswith(('PYTEST_', 'MAKE'))}
            proc = subprocess.run(['make', '-s', 'gpu-bundle', f'GPU_BUNDLE={out}'], cwd=REPO, capture_output=True,
                                  text=True, timeout=900, env=env)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def wheels_of(folder):
    return {parse_wheel_filename(os.path.basename(p))[0]: p for p in glob.glob(os.path.join(folder, 'wheels', '*.whl'))}


def test_the_bundle_is_under_its_limit_with_a_wheel_of_each_missing_distribution(bundle):
    manifest = json.loads((bundle / 'MANIFEST.json').read_text(encoding='utf-8'))
    total = sum(B.folder_bytes(str(bundle)).values())
    assert manifest['bytes'] < total <= B.LIMIT_BYTES == 60 * 2**20, total  # the manifest counts too
    wheels = wheels_of(str(bundle))
    assert set(wheels) == {B.canonicalize_name(n)
                           for n in BUNDLED_MODULES
                           } == {B.canonicalize_name(n)
                                 for n in list(B.WHEELS) + ['tola-plugin']}
    assert not {'torch', 'torchvision', 'numpy', 'opencv-python', 'opencv-python-headless'} & set(wheels)
    for entry in manifest['wheels']:
        path = bundle / 'wheels' / entry['file']
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry['sha256'] and B.wheel_fits(entry['file'])
    for name in ('gpu_check.sh', 'tools/gpu_check.py', 'setup.cfg', 'options/train/train_TOLA.yml',
                 'tests/test_cuda.py', 'tests/data/tola/tiny_backbone.yml'):
        assert (bundle / name).is_file(), name
    for phase, lines in (('train', B.TRAIN_LINES), ('val', B.VAL_LINES)):
        assert len((bundle / 'data' / phase / 'labels.tsv').read_text(encoding='utf-8').splitlines()) == lines
    with zipfile.ZipFile(wheels['tola-plugin']) as whl:  # the package with its demo model and the import hook
        names = whl.namelist()
    assert 'tola_plugin/demo/backbone/difftsr_demo.safetensors' in names and 'tola_plugin_hook.pth' in names


def test_its_wheels_install_into_an_empty_target_without_an_index_and_import(bundle, tmp_path):
    wheels = wheels_of(str(bundle))
    pure = {n: p for n, p in wheels.items() if p.endswith('-none-any.whl')}
    binary = {n: p for n, p in wheels.items() if n not in pure}
    assert set(binary) == {'lmdb', 'rapidfuzz'}
    for name, path in binary.items():  # CPython 3.12 extension modules for linux x86-64
        tags = parse_wheel_filename(os.path.basename(path))[3]
        assert {t.interpreter for t in tags} == {'cp312'} and all('manylinux' in t.platform for t in tags)
        with zipfile.ZipFile(path) as whl:
            assert any(n.endswith('.cpython-312-x86_64-linux-gnu.so') for n in whl.namelist()), name
    target = tmp_path / 'site'
    install = [sys.executable, '-m', 'pip', 'install', '-q', '--no-index', '--no-deps', '--target', str(target)]
    proc = subprocess.run(install + sorted(pure.values()), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    refused = subprocess.run(install + [binary['lmdb']], capture_output=True, text=True)
    assert refused.returncode != 0 and 'is not a supported wheel on this platform' in refused.stderr  # 3.12 only
    modules = {BUNDLED_MODULES[n] for n in BUNDLED_MODULES if B.canonicalize_name(n) in pure}
    code = ('import importlib, json, sys\n'
            'print(json.dumps({m: importlib.import_module(m).__file__ for m in sys.argv[1:]}))')
    order = ['tola_plugin'] + sorted(modules - {'tola_plugin'})  # the package first: its torchvision shim (no hook)
    proc = subprocess.run([sys.executable, '-c', code, *order], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(target), TOLA_PLUGIN_HOOK='0'))
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(path.startswith(str(target)) for path in files.values()), files


def test_gpu_check_dry_run_writes_the_report(bundle, tmp_path):
    report = tmp_path / 'report'
    env = dict(os.environ, PYTHON=sys.executable, TOLA_GPU_CHECK_SITE=str(tmp_path / 'site'))
    proc = subprocess.run(
        ['bash', str(bundle / 'gpu_check.sh'),
         str(report), '--dry-run', '--work',
         str(tmp_path / 'work')], capture_output=True, text=True, timeout=900, env=env)
    result = json.loads((report / 'gpu_check.json').read_text(encoding='utf-8'))
    failed = {k: v.get('error') or v for k, v in result['steps'].items() if not v.get('passed')}
    assert proc.returncode == 0 and not failed, (failed, proc.stderr[-3000:])
    assert result['dry_run'] and list(result['steps']) == ['cuda_tests', 'resume', 'memory', 'inference']
    steps = result['steps']
    assert steps['cuda_tests']['counts']['collected'] == 10
    assert steps['resume']['resumed_from_iteration'] == ['2'] and steps['resume']['weights']['differ'] == 0
    assert [(r['precision'], len(r['gradient_checkpointing'])) for r in steps['memory']['rows']] == [('fp32', 0),
                                                                                                     ('fp32', 3),
                                                                                                     ('bf16', 0),
                                                                                                     ('bf16', 3)]
    assert all(r['predicted_gib'] > 0 for r in steps['memory']['rows'] if r['precision'] == 'fp32')
    rows = {r['precision']: r for r in steps['inference']['rows']}
    assert list(rows) == ['fp32', 'auto', 'bf16', 'fp16'] and all(r['finite'] for r in rows.values())
    # on the demo backbone's inputs bf16 in the IDM moves ẑ0 past its bound: refused, with the reason
    assert 'moves ẑ0 by' in rows['bf16']['refused'] and 'the IDM in bf16 alone' in rows['bf16']['refused']
    assert rows['auto']['plan'].startswith('torch ') and rows['auto']['within_bound']
    origins = result['distributions']
    assert origins['tola-plugin']['origin'] == origins['diffusers']['origin'] == 'bundle'  # not this checkout
    assert origins['torch']['origin'] == 'image'
    markdown = (report / 'gpu_check.md').read_text(encoding='utf-8')
    assert markdown.startswith(
        '# TOLA GPU check (dry run') and '| 4. Inference in each precision | passed |' in markdown


def test_without_a_gpu_the_check_stops_naming_why(tmp_path):
    assert gpu_check.main([str(tmp_path / 'report'), '--bundle', REPO, '--work', str(tmp_path / 'work')]) == 1
    result = json.loads((tmp_path / 'report' / 'gpu_check.json').read_text(encoding='utf-8'))
    assert result['steps']['cuda_tests']['error'].startswith('no usable GPU: ')
    assert 'no usable GPU' in (tmp_path / 'report' / 'gpu_check.md').read_text(encoding='utf-8')


def test_pytest_summaries_are_read():
    assert summary_counts('10/578 tests collected (568 deselected) in 4.40s') == {'collected': 10, 'deselected': 568}
    assert summary_counts('566 deselected, 10 errors in 4.40s') == {'deselected': 566, 'error': 10}
    assert summary_counts('8 passed, 1 skipped, 1 failed in 9.10s') == {'passed': 8, 'skipped': 1, 'failed': 1}
