"""What the GPU check takes to a GPU machine that has a stock CUDA PyTorch image and nothing else (no package index,
no internet): docs/training_gpus.md, "The GPU check". Two forms, each under 60 MiB with what travels beside it:

- **The carry** (``make gpu-carry``, ``build_carry``): for a lease that sends this checkout (the device tool sends the
  working tree, 31 MiB, plus what it carries): only what the checkout lacks, in ``build/gpu_carry/``. The checkout's
  own package runs from ``PYTHONPATH``; ``bash tools/gpu_check.sh REPORT_DIR`` there::

      wheels/        every dependency the image lacks (``WHEELS``; the ABI-tied ones for CPython 3.10-3.12, or
                     those of ``--pythons``)
      data/          rendered lines for training and validation;  fixtures/rendered_sets: the tests' fixture
      MANIFEST.json  every wheel (version, origin, sha256), the versions the tests ran with here, the commit

- **The bundle** (``make gpu-bundle``, ``build_bundle``): one folder to copy anywhere: the same, plus a wheel of this
  package (with the demo model), ``options/``, ``tests/``, ``requirements.txt`` and ``gpu_check.sh`` at its top.

The wheels are those of the versions installed here (the environment ``make test`` ran), for manylinux x86-64,
fetched with pip (``pip download --only-binary``; sources built here into pure-Python wheels) into a cache folder,
so a second build needs no network. The image has no CJK font, so the rendered lines travel as files.
"""
import datetime
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from packaging.utils import canonicalize_name, parse_wheel_filename

from tola_lab.gpu_check.environment import IMAGE_MODULES, tested_versions
from tola_plugin.commands.data_preparation.image_checks import sha256_file
from tola_plugin.commands.data_preparation.rendered_lines import write_rendered_lines, write_rendered_pairs
from tola_plugin.utils.atomic_files import write_json
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.user_cache import cache_path

LIMIT_BYTES = 60 * 2**20  # what a short GPU lease carries (64 MiB), less room for the report's way back
# of CUDA PyTorch images (torch 2.11 images: 3.12); the default of ``--pythons`` (tools/gpu_bundle.py)
PYTHON_VERSIONS = ('3.10', '3.11', '3.12')
PLATFORMS = ('manylinux2014_x86_64', 'manylinux_2_17_x86_64', 'manylinux_2_27_x86_64', 'manylinux_2_28_x86_64')
# What travels besides this package: the distributions the check imports that a stock CUDA PyTorch image lacks
# ('binary': pip downloads the manylinux wheel, or the pure-Python one; 'sdist': PyPI has only the source, built here
# into a pure-Python wheel). The image's own torch, torchvision, numpy, opencv-python-headless, scipy, Pillow,
# PyYAML, safetensors, peft, huggingface_hub, fonttools, tqdm and pytest are used (environment.IMAGE_MODULES).
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
BUNDLE_FILES = ('setup.cfg', 'requirements.txt', 'tools/gpu_check.py')  # the bundle's, besides options/ and tests/
IGNORED = shutil.ignore_patterns('__pycache__', '*.pyc', '.pytest_cache')
TRAIN_LINES, VAL_LINES = 32, 8
FIXTURE = os.path.join('fixtures', 'rendered_sets')  # tests/conftest.py's rendered_sets, pre-rendered
FIXTURE_LINES = {'train': (8, 0), 'val': (2, 1)}  # phase: (lines, seed), as the fixture renders them


def repository_root() -> str:
    """The checkout this package runs from (the bundle is built from a source tree, not from an installed copy)."""
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir))  # tola_lab/gpu_check/
    if not os.path.isfile(os.path.join(root, 'setup.py')):
        raise UsageError(f'{root} is not a checkout of tola-plugin (no setup.py): build the GPU bundle from one')
    return root


def python_tag(version: str) -> str:
    """'3.12' -> 'cp312'."""
    return 'cp' + version.replace('.', '')


def wheel_fits(filename: str, version: str = '3.12') -> bool:
    """Whether a wheel installs on CPython ``version``, linux x86-64 (pure Python, abi3 or that CPython's; any or
    manylinux)."""
    _, _, _, tags = parse_wheel_filename(filename)
    tag_of = python_tag(version)
    for tag in tags:
        python = tag.interpreter in ('py3', 'py' + tag_of[2:],
                                     tag_of) or (tag.abi == 'abi3' and tag.interpreter.startswith('cp3')
                                                 and int(tag.interpreter[3:]) <= int(tag_of[3:]))
        abi = tag.abi in ('none', 'abi3', tag_of)
        platform = tag.platform == 'any' or re.fullmatch(r'manylinux(1|2010|2014|_2_\d+)_x86_64', tag.platform)
        if python and abi and platform:
            return True
    return False


def is_pure(filename: str) -> bool:
    return filename.endswith('-none-any.whl')


def _pip(args: List[str], what: str) -> None:
    proc = subprocess.run([sys.executable, '-m', 'pip', *args], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = '\n'.join(line for line in proc.stderr.splitlines() if not line.startswith('WARNING: Location'))[-2000:]
        raise OSError(f'{what} failed (pip {" ".join(args)}): {tail}')


def _find_wheel(folder: str, name: str, version: Optional[str], python: str) -> Optional[str]:
    """The newest wheel of ``name`` in ``folder`` for CPython ``python`` (of ``version`` exactly, or any version
    not newer than the tested one when ``version`` starts with '<=')."""
    found = []
    for filename in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if filename.endswith('.whl'):
            wheel_name, wheel_version, _, _ = parse_wheel_filename(filename)
            if wheel_name != canonicalize_name(name) or not wheel_fits(filename, python):
                continue
            if version is None or str(wheel_version) == version or (version.startswith('<=') and wheel_version
                                                                    <= type(wheel_version)(version[2:])):
                found.append((wheel_version, os.path.join(folder, filename)))
    return max(found)[1] if found else None


def installed_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        raise UsageError(f'{name} is not installed here: make setup installs it (the GPU check carries the version '
                         'the tests ran with)') from None


def _download(name: str, spec: str, python: str, cache: str) -> None:
    _pip([
        'download', '-q', '--no-deps', '--only-binary=:all:', '--python-version', python, '--implementation', 'cp',
        *[f'--platform={p}' for p in PLATFORMS], '-d', cache, f'{name}{spec}'
    ], f'downloading the CPython {python} wheel of {name}{spec}')


def ordered_pythons(pythons: Sequence[str]) -> Tuple[str, ...]:
    """CPython versions ('3.12', '3.10') without repeats, oldest first."""
    return tuple(sorted(set(pythons), key=lambda v: tuple(int(part) for part in v.split('.'))))


def dependency_wheels(name: str, how: str, cache: str,
                      pythons: Sequence[str] = PYTHON_VERSIONS) -> List[Tuple[str, str]]:
    """[(path, origin)] of the cached wheels of ``name``, fetched or built on first use: the version installed here;
    for a binary wheel tied to CPython's ABI, one per version of ``pythons`` (oldest first; the tested version, or
    where PyPI has no wheel of it for that Python, the newest older one that has: the origin says so)."""
    version = installed_version(name)
    if how == 'sdist':  # a source release: built without isolation (basicsr's setup.py imports torch), pure Python
        found = _find_wheel(cache, name, version, pythons[-1])
        if found is None:
            _pip(['wheel', '-q', '--no-deps', '--no-build-isolation', '-w', cache, f'{name}=={version}'],
                 f'building a wheel of {name}=={version} from its source release')
        return [(_require(cache, name, version, pythons[-1]), 'built from its source release')]
    wheels = []
    for python in reversed(pythons):  # newest first: a pure wheel found for it serves them all
        found = _find_wheel(cache, name, version, python)
        if found is None:
            try:
                _download(name, f'=={version}', python, cache)
            except OSError:  # no wheel of the tested version for this Python: the newest older one
                _download(name, f'<={version}', python, cache)
            found = _find_wheel(cache, name, f'<={version}', python)
        if found is None:
            raise OSError(f'no wheel of {name}<={version} for CPython {python} manylinux x86-64 in {cache} after '
                          f'fetching it')
        got = str(parse_wheel_filename(os.path.basename(found))[1])
        origin = 'PyPI wheel' + ('' if got == version else f' ({got}: PyPI has no {version} for CPython {python})')
        if (found, origin) not in wheels:
            wheels.append((found, origin))
        if is_pure(os.path.basename(found)):
            break
    return wheels


def _require(cache: str, name: str, version: str, python: str) -> str:
    found = _find_wheel(cache, name, version, python)
    if found is None:
        raise OSError(f'no wheel of {name}=={version} for CPython {python} manylinux x86-64 in {cache} after '
                      f'building it (files: {sorted(os.listdir(cache))})')
    return found


def package_wheel(root: str, out: str) -> str:
    """A wheel of this package (with the demo model) built from a clean copy of the checkout's sources."""
    with tempfile.TemporaryDirectory(prefix='tola_wheel_') as tmp:
        src = os.path.join(tmp, 'src')
        os.makedirs(src)
        for name in ('setup.py', 'README.md', 'tola_plugin_hook.py', 'tola_plugin_shim.py'):
            shutil.copy2(os.path.join(root, name), src)
        for name in ('tola_plugin', 'tola_lab', 'tola_cli'):
            shutil.copytree(os.path.join(root, name), os.path.join(src, name), ignore=IGNORED)
        _pip(['wheel', '-q', '--no-deps', '--no-build-isolation', '-w', out, src], 'building the wheel of tola-plugin')
    return _require(out, 'tola-plugin', installed_version('tola-plugin'), PYTHON_VERSIONS[-1])


def wheel_entry(path: str, name: str, origin: str) -> Dict:
    """The manifest's record of one wheel."""
    _, version, _, tags = parse_wheel_filename(os.path.basename(path))
    return {
        'distribution': name, 'version': str(version), 'file': os.path.basename(path), 'origin': origin,
        'python': sorted({t.interpreter
                          for t in tags}), 'bytes': os.path.getsize(path), 'sha256': sha256_file(path)
    }


def folder_bytes(folder: str) -> Dict[str, int]:
    """{relative path: bytes} of every file under ``folder``."""
    sizes = {}
    for base, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(base, name)
            sizes[os.path.relpath(path, folder)] = os.path.getsize(path)
    return sizes


def checkout_bytes(root: str) -> int:
    """Bytes of what a lease sends of the checkout ``root``: its tracked files and the untracked ones git does not
    ignore (``git ls-files --cached --others --exclude-standard``)."""
    proc = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'], cwd=root,
                          capture_output=True, check=True)
    paths = [p for p in proc.stdout.decode('utf-8', 'surrogateescape').split('\0') if p]
    return sum(os.path.getsize(os.path.join(root, p)) for p in paths if os.path.isfile(os.path.join(root, p)))


def git_commit(root: str) -> str:
    proc = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root, capture_output=True, text=True)
    dirty = subprocess.run(['git', 'status', '--porcelain'], cwd=root, capture_output=True, text=True).stdout.strip()
    return (proc.stdout.strip() or 'unknown') + (' (with uncommitted changes)' if dirty else '')


def write_wheels(folder: str, cache: str, log, pythons: Sequence[str] = PYTHON_VERSIONS) -> List[Dict]:
    """Copy every dependency wheel (``WHEELS``; those tied to CPython's ABI for ``pythons``) into ``folder``; -> their
    manifest entries."""
    os.makedirs(folder, exist_ok=True)
    entries = []
    for name, how in WHEELS.items():
        for path, origin in dependency_wheels(name, how, cache, pythons):
            shutil.copy2(path, folder)
            entries.append(wheel_entry(path, name, origin))
            log(f'wheel {entries[-1]["file"]} ({origin})')
    return entries


def write_data(out: str) -> None:
    """The rendered lines of the training runs (``data/train``, ``data/val``: HR + labels.tsv), the tests'
    ``rendered_sets`` fixture (``fixtures/rendered_sets/{train,val}``: hr/, lr_x4/, labels.tsv), the font subsets the
    demo_model step renders with (``fonts/``) and, when ``build/demo_model_state`` holds an earlier lease's files, that
    state (``demo_model_state/``: the step resumes from it)."""
    from tola_lab.demo.fonts import write_font_subsets
    from tola_lab.gpu_check.demo_model_step import FONTS, STATE
    write_font_subsets(os.path.join(out, FONTS))
    state = os.path.join(repository_root(), 'build', STATE)
    if os.path.isfile(os.path.join(state, 'stages.json')):
        shutil.copytree(state, os.path.join(out, STATE))
    for phase, num, seed in (('train', TRAIN_LINES, 0), ('val', VAL_LINES, 1)):
        write_rendered_lines(num, seed=seed, out=os.path.join(out, 'data', phase), chinese_chars='demo')
    for phase, (num, seed) in FIXTURE_LINES.items():
        write_rendered_pairs(os.path.join(out, FIXTURE, phase), num, seed=seed)


def finish(out: str, manifest: Dict, limit: int, what: str, log) -> Dict:
    """Write MANIFEST.json; ValueError when ``out`` holds more than ``limit`` bytes."""
    sizes = folder_bytes(out)
    manifest.update(files=len(sizes), bytes=sum(sizes.values()), limit_bytes=limit)  # besides this manifest
    write_json(os.path.join(out, 'MANIFEST.json'), manifest)
    total = sum(folder_bytes(out).values()) + manifest.get('checkout_bytes', 0)
    if total > limit:
        largest = ', '.join(f'{p} {b / 2**20:.1f} MiB' for p, b in sorted(sizes.items(), key=lambda kv: -kv[1])[:5])
        raise ValueError(f'{what} {out} comes to {total / 2**20:.1f} MiB, over its limit of {limit / 2**20:.0f} MiB '
                         f'(largest: {largest})')
    log(f'{what} {out}: {len(sizes) + 1} files, {total / 2**20:.1f} MiB in all (limit {limit / 2**20:.0f} MiB)')
    return manifest


def _start(out: str, wheel_cache: Optional[str]) -> Tuple[str, str]:
    cache = wheel_cache or os.path.dirname(cache_path('gpu-wheels', 'x'))
    os.makedirs(cache, exist_ok=True)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    return repository_root(), cache


def _manifest(root: str, mode: str, entries: List[Dict], pythons: Sequence[str]) -> Dict:
    return {
        'built': datetime.datetime.now().astimezone().isoformat(timespec='seconds'), 'commit': git_commit(root),
        'mode': mode, 'pythons': list(pythons), 'platforms': list(PLATFORMS), 'wheels': entries,
        'image_modules': list(IMAGE_MODULES), 'tested_versions': tested_versions()
    }


def build_carry(out: str, wheel_cache: Optional[str] = None, log=print,
                pythons: Sequence[str] = PYTHON_VERSIONS) -> Dict:
    """Write what a lease carries beside this checkout into ``out`` (replaced), with the wheels tied to CPython's ABI
    for the versions ``pythons``. -> the manifest. ValueError when the checkout and ``out`` together exceed
    ``LIMIT_BYTES``; OSError when pip cannot fetch or build a wheel."""
    root, cache = _start(out, wheel_cache)
    pythons = ordered_pythons(pythons)
    entries = write_wheels(os.path.join(out, 'wheels'), cache, log, pythons)
    write_data(out)
    manifest = dict(_manifest(root, 'checkout', entries, pythons), checkout_bytes=checkout_bytes(root))
    return finish(out, manifest, LIMIT_BYTES, 'the checkout with its GPU carry', log)


def build_bundle(out: str, wheel_cache: Optional[str] = None, log=print,
                 pythons: Sequence[str] = PYTHON_VERSIONS) -> Dict:
    """Write the GPU bundle into the folder ``out`` (replaced), with the wheels tied to CPython's ABI for the versions
    ``pythons``. -> the manifest (also MANIFEST.json). OSError when pip cannot fetch or build a wheel; ValueError
    when the folder exceeds ``LIMIT_BYTES``."""
    root, cache = _start(out, wheel_cache)
    pythons = ordered_pythons(pythons)
    entries = write_wheels(os.path.join(out, 'wheels'), cache, log, pythons)
    entries.append(
        wheel_entry(package_wheel(root, os.path.join(out, 'wheels')), 'tola-plugin', 'built from this checkout'))
    log(f'wheel {entries[-1]["file"]} ({entries[-1]["origin"]})')
    shutil.copy2(os.path.join(root, 'tools', 'gpu_check.sh'), os.path.join(out, 'gpu_check.sh'))
    for name in BUNDLE_FILES:
        os.makedirs(os.path.dirname(os.path.join(out, name)), exist_ok=True)
        shutil.copy2(os.path.join(root, name), os.path.join(out, name))
    for name in ('options', 'tests'):
        shutil.copytree(os.path.join(root, name), os.path.join(out, name), ignore=IGNORED)
    write_data(out)
    return finish(out, _manifest(root, 'bundle', entries, pythons), LIMIT_BYTES, 'the GPU bundle', log)
