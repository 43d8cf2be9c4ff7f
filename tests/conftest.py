"""Shared fixtures: a tiny rendered text-line set, and helpers to run the launchers in a temp CWD."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

# pytest-xdist's workers share the machine's cores: one intra-op thread each. Two workers of two threads on the 2-core
# CI machine spent 28 % more CPU time (OpenMP threads spin-waiting for each other; measured on the full-size,
# equivalence and precision tests). Set before torch is first imported; a value the user set is kept.
if os.environ.get('PYTEST_XDIST_WORKER'):
    os.environ.setdefault('OMP_NUM_THREADS', '1')

import pytest  # noqa: E402
import yaml

import tola_plugin  # noqa: F401  (registers everything before any test builds from options)
from tola_plugin.basicsr_glue import distributed
from tola_plugin.commands.data_preparation.rendered_lines import write_rendered_pairs
from tola_plugin.data.text_render import system_cjk_fonts
import numerics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tests never write the user's cache folder (bf16 decision, OpenVINO stages): one folder per user for all test runs
# and workers (entries are keyed by content, so reusing them across runs is what users get too).
os.environ['XDG_CACHE_HOME'] = os.path.join(tempfile.gettempdir(), f'tola-plugin-tests-{os.getuid()}')


def pytest_report_header(config):
    """The CPU kernels in use, so a CI log shows which ISA the numerical tests ran with."""
    import torch
    forced = [
        f'{k}={os.environ[k]}' for k in ('ATEN_CPU_CAPABILITY', 'MKL_ENABLE_INSTRUCTIONS', 'ONEDNN_MAX_CPU_ISA')
        if k in os.environ
    ]
    kernels = torch.backends.cpu.get_cpu_capability()
    return f'torch {torch.__version__}, CPU kernels {kernels} {" ".join(forced)}'.strip()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Lets ``numerics.within`` refuse tolerance checks in tests that the forced-ISA CI runs would skip (set before
    the test's fixtures, so module fixtures built for a marked test may check too); fails a ``cuda`` test that
    ``--require-cuda`` asked for on a machine without a usable GPU."""
    numerics._ACTIVE['marked'] = item.get_closest_marker('numerics') is not None
    if CUDA_FAILURE in item.stash:
        pytest.fail(item.stash[CUDA_FAILURE], pytrace=False)


@pytest.fixture(autouse=True)
def _backend_auto_is_torch_unless_marked(request, monkeypatch):
    """Outside tests marked ``openvino`` the entry points' backend 'auto' resolves to torch: converting each test's
    model for OpenVINO and qualifying it would cost seconds per test (tests/test_runtime_qualification.py and
    tests/test_inference_openvino.py cover that route)."""
    if request.node.get_closest_marker('openvino') is not None:
        return
    from tola_plugin.runtime import serving
    real = serving.resolve_backends
    monkeypatch.setattr(serving, 'resolve_backends',
                        lambda backend, device, notes: real('torch' if backend == 'auto' else backend, device, notes))


def pytest_runtest_teardown(item):
    numerics._ACTIVE['marked'] = False


def pytest_addoption(parser):
    parser.addoption(
        '--require-cuda', action='store_true',
        help='the tests marked cuda fail, naming why, where no CUDA GPU is usable (make test-cuda, the '
        'GPU check), instead of being skipped')


def cuda_unusable() -> str:
    """Why the tests marked ``cuda`` cannot run here ('' when torch can use a CUDA GPU)."""
    import torch
    if torch.cuda.is_available():
        return ''
    return distributed.cuda_unusable_reason(False, torch.version.cuda, distributed.nvidia_driver_version()) or (
        f'torch {torch.__version__} sees no CUDA device (no NVIDIA driver is loaded)')


CUDA_FAILURE = pytest.StashKey[str]()
#: '1': the tests marked ``cuda`` run on the CPU standing in for the GPU (the GPU check's dry run runs their bodies)
CUDA_ON_CPU = 'TOLA_CUDA_TESTS_ON_CPU'


def cuda_test_device() -> str:
    """The device of the tests marked ``cuda``: 'cuda', or 'cpu' under ``TOLA_CUDA_TESTS_ON_CPU=1``."""
    return 'cpu' if os.environ.get(CUDA_ON_CPU) == '1' else 'cuda'


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` are skipped, with the reason, where no CUDA GPU is usable; with ``--require-cuda``
    (make test-cuda: asked to test a GPU) they fail with it instead."""
    reason = cuda_unusable()
    if not reason or cuda_test_device() == 'cpu':
        return
    required = config.getoption('require_cuda')
    skip = pytest.mark.skip(reason=f'needs a CUDA GPU: {reason} (make test-cuda on a GPU machine, docs/testing.md)')
    for item in items:
        if item.get_closest_marker('cuda') is None:
            continue
        if required:
            item.stash[CUDA_FAILURE] = f'--require-cuda (make test-cuda) but no CUDA GPU is usable: {reason}'
        else:
            item.add_marker(skip)


def render_pairs(folder, num, seed, scale=4):
    """Render ``num`` lines into folder/{hr,lr_x<scale>} with folder/labels.tsv; returns the folder."""
    return write_rendered_pairs(folder, num, seed, scale)


#: a folder of the pre-rendered ``rendered_sets`` (train/, val/), used where no CJK font can render them: the GPU
#: check carries one (tola_lab/gpu_check/bundle.py, ``FIXTURE``), since a GPU image has no such font
PRERENDERED = 'TOLA_TEST_RENDERED_SETS'


def rendered_sets_in(root):
    """{'train': folder of 8 lines, 'val': folder of 2 lines} under ``root``, each with hr/, lr_x4/ and labels.tsv:
    rendered here, or where this machine has no CJK font, copied from the pre-rendered folder that
    $TOLA_TEST_RENDERED_SETS names (RuntimeError naming both ways out when neither is at hand)."""
    if not system_cjk_fonts():
        source = os.environ.get(PRERENDERED, '')
        if not source or not all(os.path.isfile(os.path.join(source, p, 'labels.tsv')) for p in ('train', 'val')):
            raise RuntimeError(f'no CJK font to render the test lines (fc-list :lang=zh finds none) and ${PRERENDERED} '
                               f'({source or "unset"}) names no pre-rendered train/ and val/ folders: install a font '
                               '(fonts-wqy-microhei) or point it at a GPU carry\'s fixtures/rendered_sets')
        return {p: shutil.copytree(os.path.join(source, p), os.path.join(root, p)) for p in ('train', 'val')}
    return {
        'train': render_pairs(os.path.join(root, 'train'), 8, seed=0),
        'val': render_pairs(os.path.join(root, 'val'), 2, seed=1)
    }


@pytest.fixture(scope='session')
def rendered_sets(tmp_path_factory):
    return rendered_sets_in(str(tmp_path_factory.mktemp('rendered')))


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def write_options(path, opt):
    with open(path, 'w', encoding='utf-8') as f:
        yaml.safe_dump(opt, f, sort_keys=False, allow_unicode=True)
    return str(path)


def run_launcher(args, cwd, timeout=600, env=None):
    """Run ``python -m ...`` (or torchrun) in ``cwd``; returns CompletedProcess, raising with output on failure."""
    full_env = dict(os.environ, **(env or {}))
    full_env.setdefault('OMP_NUM_THREADS', '1')
    proc = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=full_env)
    if proc.returncode != 0:
        raise AssertionError(f'{args} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}')
    return proc


@pytest.fixture
def stand_in(monkeypatch):
    """tola-infer (``TOLAPipeline.load``) with the identity stand-in restorer (``inference_testing.StandInRestorer``),
    its options --batch-size, --color-fix and --paste as given; returns the net (``calls``: the batch sizes it saw)."""
    from tola_plugin.inference.pipeline import TOLAPipeline
    from inference_testing import StandInRestorer
    net = StandInRestorer()

    def load(cls, *args, **options):
        return TOLAPipeline(net, batch_size=options['batch_size'], color_fix=options['color_fix'],
                            paste=options['paste'])

    monkeypatch.setattr(TOLAPipeline, 'load', classmethod(load))
    return net
