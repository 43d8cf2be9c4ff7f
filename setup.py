"""tola-plugin: TOLA (one-step DiffTSR) as a BasicSR plugin."""
import os
import re
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

# The import hook (tola_plugin_hook.py): its .pth file beside the installed packages makes every process of the
# environment register the plugin into BasicSR on basicsr's first import (nothing is imported before that).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tola_plugin_hook import HOOK_LINE, HOOK_PTH, write_pth  # noqa: E402  (the source tree's; standard library only)


class BuildPyWithHook(build_py):
    """Regular installs (wheel, ``pip install .``): the .pth file goes to the root of the wheel, i.e. site-packages."""

    def run(self):
        super().run()
        os.makedirs(self.build_lib, exist_ok=True)
        write_pth(self.build_lib)

    def get_outputs(self, include_bytecode=True):
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, HOOK_PTH)]


class _StrategyWithHook:
    """Wraps setuptools' editable strategy: writes its files into the editable wheel, then the hook's .pth."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __call__(self, wheel, files, mapping):
        self.strategy(wheel, files, mapping)
        wheel.writestr(HOOK_PTH, HOOK_LINE.encode('utf-8'))

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self.strategy.__exit__(*exc)


CMDCLASS = {'build_py': BuildPyWithHook}
try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # setuptools < 64 installs -e through its legacy `develop`, which would leave the hook out
    from setuptools.command.develop import develop

    class DevelopRefused(develop):

        def run(self):
            raise RuntimeError(f'editable installs need setuptools >= 64 (PEP 660) to install {HOOK_PTH}: upgrade '
                               f'setuptools, or install without -e (pip install .)')

    CMDCLASS['develop'] = DevelopRefused
else:

    class EditableWheelWithHook(editable_wheel):
        """Editable installs (PEP 660, ``pip install -e .``): setuptools puts only its own path finder into the
        editable wheel and ignores files that build steps write (its default, lenient mode), so the .pth file is
        added to the wheel through setuptools' strategy of the editable wheel (a private method, hence checked)."""

        def run(self):
            if not callable(getattr(editable_wheel, '_select_strategy', None)):
                raise RuntimeError(f'this setuptools has no editable_wheel._select_strategy, so an editable install '
                                   f'would miss {HOOK_PTH}: install without -e (pip install .)')
            super().run()

        def _select_strategy(self, *args, **kwargs):
            return _StrategyWithHook(super()._select_strategy(*args, **kwargs))

    CMDCLASS['editable_wheel'] = EditableWheelWithHook

# The tools a user runs from any folder (tola_cli/<name>.py: parsed before the package is imported; tools/<name>.py is
# an alias in a clone): console scripts tola-<name with dashes>, or python -m tola_cli.<name>.
CLI_TOOLS = ('render_text', 'make_lmdb', 'split_dataset', 'make_test_set', 'evaluate', 'diagnose', 'plot_results',
             'convert_difftsr', 'export_merged', 'build_realce200', 'screen_rt50', 'estimate_memory')


def read_version():
    with open('tola_plugin/version.py', encoding='utf-8') as f:
        return re.search(r"__version__ = '([^']+)'", f.read()).group(1)


setup(
    name='tola-plugin',
    version=read_version(),
    description='TOLA: Text-aware One-step Latent Adaptation of DiffTSR, as a BasicSR plugin',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    # what a user imports (tola_plugin), the command lines (tola_cli) and the maintainers' lab (tola_lab: benchmarks,
    # the GPU check, the demo model's training; docs/architecture.md, "The lab ships in the wheel")
    packages=find_packages(include=['tola_plugin', 'tola_plugin.*', 'tola_lab', 'tola_lab.*', 'tola_cli']),
    py_modules=['tola_plugin_hook', 'tola_plugin_shim'],
    cmdclass=CMDCLASS,
    package_data={
        'tola_plugin.assets.vocab': ['*.txt'],
        'tola_plugin.assets.demo': ['backbone/*.safetensors', 'backbone/*.json',
                                    'backbone/*.pth'],  # the demo model trained here
        'tola_plugin.assets.samples': ['*.png', '*.tsv', '*.md'],  # DiffTSR test LR images (Apache-2.0)
        'tola_plugin.assets.rendered_samples': ['*.png', '*.tsv', '*.md'],  # examples of tola-web
        'tola_lab.gpu_check': ['image_stand_in/*.py']  # the dry run's stand-in for a GPU image (not a package)
    },
    include_package_data=True,
    python_requires='>=3.10',
    # Ranges, not pins: pins for a reproducible environment live in requirements.txt.
    install_requires=[
        'basicsr>=1.4.2',
        'torch>=2.1',
        'torchvision>=0.16',
        'diffusers>=0.30',
        'peft>=0.13',
        'lpips>=0.1.4',
        'safetensors',
        'lmdb',
        'opencv-python',
        'numpy',
        'Pillow',
        'PyYAML',
        'zhconv',
        'rapidfuzz',
        'mmengine',
    ],
    extras_require={
        'eval': ['pyiqa==0.1.16', 'rapidocr-onnxruntime==1.4.4', 'rapidfuzz', 'scipy', 'matplotlib', 'huggingface_hub'],
        'openvino': ['openvino==2025.4.1'],  # the CPU backend of the inference entry points (docs/inference.md)
        'web': ['gradio==6.31.0'],
        'test': ['pytest', 'pytest-xdist==3.8.0', 'selenium==4.51.0'],
        'lint': ['flake8==7.5.0', 'isort==9.0.2', 'yapf==0.43.0'],
    },
    entry_points={
        'console_scripts': [
            'tola-train=tola_cli.train:cli',
            'tola-test=tola_cli.test:cli',
            'tola-infer=tola_cli.infer:cli',
            'tola-web=tola_cli.web:cli',
        ] + [f'tola-{name.replace("_", "-")}=tola_cli.{name}:cli' for name in CLI_TOOLS],
    },
)
