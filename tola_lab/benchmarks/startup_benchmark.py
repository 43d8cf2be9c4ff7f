"""Interpreter start-up with and without the plugin installed (tools/benchmark_startup.py; the figures: docs/
architecture.md, "A light plugin"): ``python -c pass`` in fresh virtualenvs that share this environment's dependencies,
without the plugin, with a regular install (``pip install .``) and with an editable one (``pip install -e .``), run
interleaved; then ``import basicsr`` in the regular install, with the plugin, without it, and with every class of the
plugin imported (what each such process paid before the plugin registered names only).

The plugin's .pth file runs at every interpreter start (tola_plugin_hook.py: a finder waiting for basicsr, nothing
imported); setuptools' editable install adds its own path finder, measured alone in a fourth venv whose hook .pth is
removed. Byte-code is written and used, as in an installed environment (``PYTHONDONTWRITEBYTECODE`` is cleared for
the timed runs).
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Dict, List, Optional

from tola_plugin.utils.procfs import cpuinfo

# what a build of the package reads, relative to the checkout
SOURCES = ('setup.py', 'setup.cfg', 'README.md', 'tola_plugin_hook.py', 'tola_plugin_shim.py', 'tola_plugin',
           'tola_lab', 'tola_cli')
LABELS = ('without', 'regular', 'editable', 'editable, no hook')
# ``import basicsr`` in the regular install: basicsr 1.4.2 alone (the plugin's hook off; basicsr needs the
# torchvision shim to import at all on torchvision >= 0.17), with the plugin, and with every module the plugin's
# registry index names imported and TOLAPipeline (what `import basicsr` imported before the plugin became light)
_SHIM = 'import tola_plugin_shim; tola_plugin_shim.install_torchvision_shim(); '
_EVERY_CLASS = ('import importlib, tola_plugin; from tola_plugin.registry_index import REGISTRY_INDEX; '
                '[importlib.import_module(m) for names in REGISTRY_INDEX.values() for m in names.values()]; '
                'tola_plugin.TOLAPipeline')
IMPORT_CODE = {
    'basicsr alone (TOLA_PLUGIN_HOOK=0, torchvision shim)': _SHIM + 'import basicsr',
    'basicsr with the plugin': 'import basicsr',
    'basicsr with the plugin, every TOLA class imported': 'import basicsr; ' + _EVERY_CLASS,
}


def make_venv(path: str) -> str:
    """A virtualenv without pip whose ``sys.path`` ends with this environment's site-packages, added as a plain path
    (its .pth files, e.g. this checkout's editable install, are not run). Returns its python."""
    subprocess.run([getattr(sys, '_base_executable', sys.executable), '-m', 'venv', '--without-pip', path], check=True)
    python = os.path.join(path, 'bin', 'python')
    with open(os.path.join(site_packages(python), 'zz_dependencies.pth'), 'w', encoding='utf-8') as f:
        f.write(sysconfig.get_paths()['purelib'] + '\n')
    return python


def site_packages(python: str) -> str:
    """The purelib folder (site-packages) of the interpreter ``python``."""
    return subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'], check=True,
                          capture_output=True, text=True).stdout.strip()


def copy_sources(repo: str, dest: str) -> str:
    """The files a build of the package reads, copied from the checkout ``repo`` to ``dest`` (a regular build writes
    build/ beside them). Returns ``dest``."""
    os.makedirs(dest, exist_ok=True)
    for name in SOURCES:
        src = os.path.join(repo, name)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dest, name), ignore=shutil.ignore_patterns('__pycache__'))
        else:
            shutil.copyfile(src, os.path.join(dest, name))
    return dest


def pip_install(python: str, source: str, editable: bool = False) -> None:
    """Install the package from ``source`` into ``python``'s venv with this environment's pip and setuptools."""
    cmd = [
        sys.executable, '-m', 'pip', '--python', python, 'install', '-q', '--no-deps', '--no-build-isolation',
        '--no-index'
    ] + (['-e'] if editable else []) + [source]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise OSError(f'{" ".join(cmd)} failed: {proc.stderr[-2000:]}')


def time_starts(pythons: Dict[str, str], runs: int, warmup: int = 10) -> Dict[str, List[float]]:
    """{label: [seconds of each ``python -c pass``]}, the labels' runs interleaved."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}
    times = {label: [] for label in pythons}
    for i in range(warmup + runs):
        for label, python in pythons.items():
            start = time.perf_counter()
            subprocess.run([python, '-c', 'pass'], check=True, env=env)
            if i >= warmup:
                times[label].append(time.perf_counter() - start)
    return times


def time_imports(python: str, runs: int, warmup: int = 2) -> Dict[str, List[float]]:
    """{label of IMPORT_CODE: [seconds of each ``python -c CODE``]} in the venv of ``python``, interleaved, each in
    a temporary folder (not a checkout, whose packages it would import)."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}
    envs = {label: dict(env, TOLA_PLUGIN_HOOK='0' if 'HOOK=0' in label else '1') for label in IMPORT_CODE}
    times = {label: [] for label in IMPORT_CODE}
    with tempfile.TemporaryDirectory(prefix='tola_import_') as cwd:
        for i in range(warmup + runs):
            for label, code in IMPORT_CODE.items():
                start = time.perf_counter()
                subprocess.run([python, '-c', code], check=True, env=envs[label], cwd=cwd)
                if i >= warmup:
                    times[label].append(time.perf_counter() - start)
    return times


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), and the cores this process may use."""
    model = (cpuinfo() or {}).get('model name', '')
    return f'{model or "unknown CPU"}, {len(os.sched_getaffinity(0))} cores'


def hook_import_us(python: str) -> int:
    """Microseconds ``-X importtime`` gives the import of tola_plugin_hook at start (with byte-code)."""
    env = {k: v for k, v in os.environ.items() if k != 'PYTHONDONTWRITEBYTECODE'}
    err = subprocess.run([python, '-X', 'importtime', '-c', 'pass'], capture_output=True, text=True, env=env).stderr
    lines = [line for line in err.splitlines() if line.rstrip().endswith('tola_plugin_hook')]
    return int(lines[-1].split('|')[1]) if lines else 0


def benchmark_startup(repo: str, runs: int = 200, out: Optional[str] = None, import_runs: int = 10) -> int:
    """Build the four venvs in a temporary folder (the plugin installed from the checkout ``repo``), time ``runs``
    interleaved starts of each and ``import_runs`` interleaved ``import basicsr`` of each IMPORT_CODE (none when 0),
    print the markdown tables and write every timing to ``out`` (JSON). -> 0. OSError when an install fails."""
    with tempfile.TemporaryDirectory(prefix='tola_startup_') as tmp:
        pythons = {label: make_venv(os.path.join(tmp, str(i))) for i, label in enumerate(LABELS)}
        sources = copy_sources(repo, os.path.join(tmp, 'src'))
        pip_install(pythons['regular'], sources)
        pip_install(pythons['editable'], repo, editable=True)
        pip_install(pythons['editable, no hook'], repo, editable=True)  # what setuptools' editable install costs
        os.remove(os.path.join(site_packages(pythons['editable, no hook']), 'tola_plugin_hook.pth'))
        times = time_starts(pythons, runs)
        imports = {label: hook_import_us(python) for label, python in pythons.items()}
        basicsr_times = time_imports(pythons['regular'], import_runs) if import_runs > 0 else {}
    rows = {
        label: {
            'mean_ms': 1e3 * statistics.mean(t), 'median_ms': 1e3 * statistics.median(t), 'min_ms': 1e3 * min(t),
            'hook_import_us': imports[label]
        }
        for label, t in times.items()
    }
    print(f'python -c pass, {runs} interleaved starts each ({sys.version.split()[0]}):')
    print('| install | mean ms | median ms | min ms | median - without | tola_plugin_hook import (-X importtime) |')
    print('|---|---:|---:|---:|---:|---:|')
    for label, row in rows.items():
        delta = row['median_ms'] - rows['without']['median_ms']
        print(f'| {label} | {row["mean_ms"]:.2f} | {row["median_ms"]:.2f} | {row["min_ms"]:.2f} | {delta:+.2f} | '
              f'{row["hook_import_us"]} us |')
    import_rows = {
        label: {'median_s': statistics.median(t), 'min_s': min(t), 'max_s': max(t)}
        for label, t in basicsr_times.items()
    }
    if import_rows:
        print(f'\nimport basicsr (pip install .), {import_runs} interleaved runs each ({cpu_name()}):')
        print('| process | median s | min s | max s |')
        print('|---|---:|---:|---:|')
        for label, row in import_rows.items():
            print(f'| {label} | {row["median_s"]:.2f} | {row["min_s"]:.2f} | {row["max_s"]:.2f} |')
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, 'w', encoding='utf-8') as f:
            json.dump(
                {
                    'runs': runs, 'python': sys.version, 'cpu': cpu_name(), 'summary': rows, 'seconds': times,
                    'import_runs': import_runs, 'import_summary': import_rows, 'import_seconds': basicsr_times
                }, f, indent=1)
    return 0
