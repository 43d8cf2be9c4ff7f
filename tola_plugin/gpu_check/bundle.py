"""``make gpu-bundle``: one folder, under 60 MiB, that runs the GPU check on a machine that has a stock CUDA PyTorch
image and nothing else (no package index, no internet): docs/training_gpus.md, "The GPU check".

Layout of the folder (``build_bundle``)::

    gpu_check.sh            the entry point: installs wheels/ into a private folder, then runs tools/gpu_check.py
    wheels/                 this package (with the demo model) and every dependency the image lacks (``WHEELS``)
    tools/gpu_check.py      the check's command line;  setup.cfg: pytest's markers;  options/, tests/: the repo's
    data/train, data/val    rendered text lines (HR PNGs + labels.tsv): the image has no CJK font to render them
    MANIFEST.json           every wheel (version, origin, sha256), the commit, the size

The wheels are those of the versions installed here (the environment ``make test`` ran), for CPython 3.12 on
manylinux x86-64, fetched with pip (``pip download --only-binary``; sources built here into pure-Python wheels) into
a cache folder, so a second build needs no network.
"""
import datetime
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

from packaging.utils import canonicalize_name, parse_wheel_filename

from tola_plugin.data_preparation.image_checks import sha256_file
from tola_plugin.data_preparation.rendered_lines import write_rendered_lines
from tola_plugin.gpu_check.environment import IMAGE_MODULES
from tola_plugin.utils.atomic_files import write_json
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.user_cache import cache_path

LIMIT_BYTES = 60 * 2**20  # what a short GPU lease carries (64 MiB), less room for the report's way back
PYTHON_VERSION = '3.12'  # the stock CUDA PyTorch image's (torch 2.11 images: Python 3.12)
PLATFORMS = ('manylinux2014_x86_64', 'manylinux_2_17_x86_64', 'manylinux_2_27_x86_64', 'manylinux_2_28_x86_64')
# What the bundle carries besides this package: the distributions the check imports that a stock CUDA PyTorch image
# lacks ('binary': pip downloads the CPython 3.12 manylinux wheel, or the pure-Python one; 'sdist': PyPI has only
# the source, built here into a pure-Python wheel). The image's own torch, torchvision, numpy, opencv-python-headless,
# scipy, Pillow, PyYAML, safetensors, peft, huggingface_hub, fonttools, tqdm and pytest are used
# (environment.IMAGE_MODULES).
WHEELS = {
    'basicsr': 'sdist',  # the host toolbox; 1.4.2 is a source release only
    'diffusers': 'binary',  # the IDM U-Net and VAE blocks
    'lpips': 'binary',  # the LPIPS-VGG training loss
    'lmdb': 'binary',  # the LMDB datasets (imported by the dataset module)
    'zhconv': 'sdist',  # text normalisation; 1.4.3 is a source release only
    'rapidfuzz': 'binary',  # the text metrics of validation
    'mmengine': 'binary',  # MACs (an install requirement of the package); with what it imports:
    'addict': 'binary',
    'yapf': 'binary',
    'platformdirs': 'binary',
    'termcolor': 'binary',
}
BUNDLE_FILES = ('setup.cfg', 'tools/gpu_check.py')  # besides options/ and tests/
IGNORED = shutil.ignore_patterns('__pycache__', '*.pyc', '.pytest_cache')
TRAIN_LINES, VAL_LINES = 32, 8


def repository_root() -> str:
    """The checkout this package runs from (the bundle is built from a source tree, not from an installed copy)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isfile(os.path.join(root, 'setup.py')):
        raise UsageError(f'{root} is not a checkout of tola-plugin (no setup.py): build the GPU bundle from one')
    return root


def wheel_fits(filename: str) -> bool:
    """Whether a wheel installs on CPython 3.12, linux x86-64 (pure Python, abi3 or cp312; any or manylinux)."""
    _, _, _, tags = parse_wheel_filename(filename)
    for tag in tags:
        python = tag.interpreter in ('py3', 'py312', 'cp312') or (tag.abi == 'abi3'
                                                                  and tag.interpreter.startswith('cp3')
                                                                  and int(tag.interpreter[3:]) <= 12)
        abi = tag.abi in ('none', 'abi3', 'cp312')
        platform = tag.platform == 'any' or re.fullmatch(r'manylinux(1|2010|2014|_2_\d+)_x86_64', tag.platform)
        if python and abi and platform:
            return True
    return False


def _pip(args: List[str], what: str) -> None:
    proc = subprocess.run([sys.executable, '-m', 'pip', *args], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = '\n'.join(line for line in proc.stderr.splitlines() if not line.startswith('WARNING: Location'))[-2000:]
        raise OSError(f'{what} failed (pip {" ".join(args)}): {tail}')


def _find_wheel(folder: str, name: str, version: str) -> Optional[str]:
    for filename in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if filename.endswith('.whl'):
            wheel_name, wheel_version, _, _ = parse_wheel_filename(filename)
            if wheel_name == canonicalize_name(name) and str(wheel_version) == version and wheel_fits(filename):
                return os.path.join(folder, filename)
    return None


def dependency_wheel(name: str, how: str, cache: str) -> str:
    """The cached wheel of ``name`` at the version installed here, fetched or built on first use."""
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        raise UsageError(f'{name} is not installed here: make setup installs it (the bundle carries the version '
                         'the tests ran with)') from None
    found = _find_wheel(cache, name, version)
    if found:
        return found
    if how == 'binary':
        _pip([
            'download', '-q', '--no-deps', '--only-binary=:all:', '--python-version', PYTHON_VERSION,
            '--implementation', 'cp', *[f'--platform={p}' for p in PLATFORMS], '-d', cache, f'{name}=={version}'
        ], f'downloading the CPython {PYTHON_VERSION} wheel of {name}=={version}')
    else:  # a source release: built without isolation (basicsr's setup.py imports torch), pure Python
        _pip(['wheel', '-q', '--no-deps', '--no-build-isolation', '-w', cache, f'{name}=={version}'],
             f'building a wheel of {name}=={version} from its source release')
    found = _find_wheel(cache, name, version)
    if found is None:
        raise OSError(f'no wheel of {name}=={version} for CPython {PYTHON_VERSION} manylinux x86-64 in {cache} after '
                      f'fetching it (files: {sorted(os.listdir(cache))})')
    return found


def package_wheel(root: str, out: str) -> str:
    """A wheel of this package (with the demo model) built from a clean copy of the checkout's sources."""
    with tempfile.TemporaryDirectory(prefix='tola_wheel_') as tmp:
        src = os.path.join(tmp, 'src')
        os.makedirs(src)
        for name in ('setup.py', 'README.md', 'tola_plugin_hook.py', 'tola_plugin_shim.py'):
            shutil.copy2(os.path.join(root, name), src)
        for name in ('tola_plugin', 'tola_cli'):
            shutil.copytree(os.path.join(root, name), os.path.join(src, name), ignore=IGNORED)
        _pip(['wheel', '-q', '--no-deps', '--no-build-isolation', '-w', out, src], 'building the wheel of tola-plugin')
    return _find_wheel(out, 'tola-plugin', importlib.metadata.version('tola-plugin'))


def wheel_entry(path: str, name: str, origin: str) -> Dict:
    """The manifest's record of one wheel."""
    return {
        'distribution': name, 'version': importlib.metadata.version(name), 'file': os.path.basename(path),
        'origin': origin, 'bytes': os.path.getsize(path), 'sha256': sha256_file(path)
    }


def folder_bytes(folder: str) -> Dict[str, int]:
    """{relative path: bytes} of every file under ``folder``."""
    sizes = {}
    for base, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(base, name)
            sizes[os.path.relpath(path, folder)] = os.path.getsize(path)
    return sizes


def git_commit(root: str) -> str:
    proc = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root, capture_output=True, text=True)
    dirty = subprocess.run(['git', 'status', '--porcelain'], cwd=root, capture_output=True, text=True).stdout.strip()
    return (proc.stdout.strip() or 'unknown') + (' (with uncommitted changes)' if dirty else '')


def build_bundle(out: str, wheel_cache: Optional[str] = None, log=print) -> Dict:
    """Write the GPU bundle into the folder ``out`` (replaced if it exists). -> the manifest (also MANIFEST.json).
    OSError when pip cannot fetch or build a wheel; ValueError when the folder exceeds ``LIMIT_BYTES``."""
    root = repository_root()
    cache = wheel_cache or os.path.dirname(cache_path('gpu-wheels', 'x'))
    os.makedirs(cache, exist_ok=True)
    if os.path.exists(out):
        shutil.rmtree(out)
    wheels = os.path.join(out, 'wheels')
    os.makedirs(wheels)
    entries = []
    for name, how in WHEELS.items():
        path = dependency_wheel(name, how, cache)
        shutil.copy2(path, wheels)
        entries.append(wheel_entry(path, name, 'PyPI wheel' if how == 'binary' else 'built from its source release'))
        log(f'wheel {entries[-1]["file"]} ({entries[-1]["origin"]})')
    entries.append(wheel_entry(package_wheel(root, wheels), 'tola-plugin', 'built from this checkout'))
    log(f'wheel {entries[-1]["file"]} ({entries[-1]["origin"]})')
    shutil.copy2(os.path.join(root, 'tools', 'gpu_check.sh'), os.path.join(out, 'gpu_check.sh'))
    for name in BUNDLE_FILES:
        os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
        shutil.copy2(os.path.join(root, name), os.path.join(out, name))
    for name in ('options', 'tests'):
        shutil.copytree(os.path.join(root, name), os.path.join(out, name), ignore=IGNORED)
    for phase, num, seed in (('train', TRAIN_LINES, 0), ('val', VAL_LINES, 1)):
        write_rendered_lines(num, seed=seed, out=os.path.join(out, 'data', phase), chinese_chars='demo')
    sizes = folder_bytes(out)
    manifest = {
        'built': datetime.datetime.now().astimezone().isoformat(timespec='seconds'), 'commit': git_commit(root),
        'python': PYTHON_VERSION, 'platforms': list(PLATFORMS), 'wheels': entries, 'image_modules': list(IMAGE_MODULES),
        'files': len(sizes), 'bytes': sum(sizes.values()), 'limit_bytes': LIMIT_BYTES
    }  # files and bytes: besides this manifest
    write_json(os.path.join(out, 'MANIFEST.json'), manifest)
    total = sum(folder_bytes(out).values())
    if total > LIMIT_BYTES:
        largest = ', '.join(f'{p} {b / 2**20:.1f} MiB' for p, b in sorted(sizes.items(), key=lambda kv: -kv[1])[:5])
        raise ValueError(f'the GPU bundle {out} has {total / 2**20:.1f} MiB, over its limit of '
                         f'{LIMIT_BYTES / 2**20:.0f} MiB (largest: {largest})')
    log(f'GPU bundle {out}: {len(sizes) + 1} files, {total / 2**20:.1f} MiB (limit {LIMIT_BYTES / 2**20:.0f} MiB)')
    return manifest
