"""What the GPU check runs on: the machine (GPUs, driver, torch) and where each imported distribution comes from
(the bundle's private folder or the image), checked before any step runs."""
import importlib
import importlib.metadata
import os
import platform
import sys
from typing import Dict, List

import torch

from tola_plugin.basicsr_glue import distributed

MIN_TORCH = (2, 4)
# Modules the check takes from the image (checked before any step runs): a stock CUDA PyTorch image has them; the
# bundle carries the rest (bundle.WHEELS). opencv: the image's opencv-python-headless (cv2 without GUI).
IMAGE_MODULES = ('torch', 'torchvision', 'numpy', 'cv2', 'scipy', 'skimage', 'PIL', 'yaml', 'safetensors', 'peft',
                 'huggingface_hub', 'fontTools', 'tqdm', 'pytest')
# the import name of each distribution the bundle carries or the image must have
BUNDLED_MODULES = {
    'tola-plugin': 'tola_plugin', 'basicsr': 'basicsr', 'diffusers': 'diffusers', 'lpips': 'lpips', 'lmdb': 'lmdb',
    'zhconv': 'zhconv', 'rapidfuzz': 'rapidfuzz', 'mmengine': 'mmengine', 'addict': 'addict', 'yapf': 'yapf',
    'platformdirs': 'platformdirs', 'termcolor': 'termcolor'
}


def torch_version_tuple(version: str):
    """(major, minor) of a torch version string ('2.11.0+cu130' -> (2, 11))."""
    return tuple(int(part) for part in version.split('+')[0].split('.')[:2])


def machine() -> Dict:
    """Python, torch, CUDA build, driver and every visible GPU (name, compute capability, memory)."""
    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            gpus.append({
                'index': index, 'name': props.name, 'capability': f'{props.major}.{props.minor}',
                'memory_gib': round(props.total_memory / 2**30, 1)
            })
    driver = distributed.nvidia_driver_version()
    return {
        'python': platform.python_version(), 'torch': torch.__version__, 'torch_cuda': torch.version.cuda,
        'cuda_available': torch.cuda.is_available(), 'driver': driver, 'gpus': gpus, 'cpu_count': os.cpu_count(),
        'cuda_unusable_reason': distributed.cuda_unusable_reason(torch.cuda.is_available(), torch.version.cuda, driver)
    }


def module_origin(module, site: str) -> str:
    path = os.path.realpath(getattr(module, '__file__', '') or '')
    return 'bundle' if site and path.startswith(os.path.realpath(site) + os.sep) else 'image'


def check_imports(image_modules: List[str], site: str) -> Dict[str, Dict]:
    """{distribution or module: {'version', 'origin' ('bundle': the private folder ``site``; 'image')}} of the
    bundled distributions and the image's modules the check needs. ImportError naming every missing one, and
    RuntimeError for a torch older than 2.4."""
    found, missing = {}, []
    for name, module_name in [*BUNDLED_MODULES.items(), *[(m, m) for m in image_modules]]:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            missing.append(f'{module_name} ({err})')
            continue
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = getattr(module, '__version__', 'unknown')
        found[name] = {'version': str(version), 'origin': module_origin(module, site)}
    if missing:
        raise ImportError(f'the GPU check needs {", ".join(missing)}: not in the bundle, and this Python '
                          f'({sys.executable}) does not have it (docs/training_gpus.md, "The GPU check")')
    if torch_version_tuple(torch.__version__) < MIN_TORCH:
        raise RuntimeError(f'torch {torch.__version__}: the GPU check needs torch 2.4 or newer')
    return found
