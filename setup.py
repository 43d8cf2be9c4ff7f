"""tola-plugin: TOLA (one-step DiffTSR) as a BasicSR plugin."""
import re

from setuptools import find_packages, setup


def read_version():
    with open('tola_plugin/version.py', encoding='utf-8') as f:
        return re.search(r"__version__ = '([^']+)'", f.read()).group(1)


setup(
    name='tola-plugin',
    version=read_version(),
    description='TOLA: Text-aware One-step Latent Adaptation of DiffTSR, as a BasicSR plugin',
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['tola_plugin', 'tola_plugin.*', 'tola_cli']),
    package_data={
        'tola_plugin.vocab': ['*.txt'],
        'tola_plugin.demo_backbone': ['*.safetensors', '*.json'],  # the demo model trained here
        'tola_plugin.samples': ['*.png', '*.tsv', '*.md'],  # DiffTSR test LR images (Apache-2.0)
        'tola_plugin.rendered_samples': ['*.png', '*.tsv', '*.md']
    },  # examples of tola-web
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
        'onnx': ['onnx==1.23.2', 'onnxruntime==1.23.2'],
        'web': ['gradio==6.31.0'],
        'test': ['pytest', 'pytest-xdist==3.8.0', 'selenium==4.51.0'],
        'lint': ['flake8==7.5.0', 'isort==9.0.2', 'yapf==0.43.0'],
    },
    entry_points={
        'console_scripts': [
            'tola-train=tola_plugin.train:main',
            'tola-test=tola_plugin.test:main',
            'tola-infer=tola_cli.infer:cli',
            'tola-web=tola_cli.web:cli',
        ],
    },
)
