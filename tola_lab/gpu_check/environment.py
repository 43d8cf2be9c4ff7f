"""What the GPU check runs on: the machine (GPUs, driver, torch) and where each imported distribution comes from
(the carried wheels or the image) with its version beside the one the tests ran with where the carry was built,
checked before any step runs."""
import importlib
import importlib.metadata
import os
import platform
import re
import sys
from typing import Dict, List, Mapping, Optional

MIN_TORCH = (2, 4)
# Modules the check takes from the image (checked before any step runs): a stock CUDA PyTorch image has them; the
# carry brings the rest (bundle.WHEELS). opencv: the image's opencv-python-headless (cv2 without GUI); transformers:
# what the image's peft imports.
IMAGE_MODULES = ('torch', 'torchvision', 'numpy', 'cv2', 'scipy', 'skimage', 'PIL', 'yaml', 'safetensors', 'peft',
                 'transformers', 'huggingface_hub', 'fontTools', 'tqdm', 'pytest')
# the import name of each distribution the carry brings or the image must have
BUNDLED_MODULES = {
    'tola-plugin': 'tola_plugin', 'basicsr': 'basicsr', 'diffusers': 'diffusers', 'lpips': 'lpips', 'lmdb': 'lmdb',
    'zhconv': 'zhconv', 'rapidfuzz': 'rapidfuzz', 'mmengine': 'mmengine', 'addict': 'addict', 'yapf': 'yapf',
    'platformdirs': 'platformdirs', 'termcolor': 'termcolor'
}

# Distributions the image had though no image module requires them: basicsr and diffusers (carried without their
# requirements) import requests, and the smoke step ran there (docs/benchmarks/gpu_check_h100/run2.md)
IMAGE_ALSO = ('requests', )


def pep503(name: str) -> str:
    return re.sub(r'[-_.]+', '-', name).lower()


def image_module_names() -> List[str]:
    """The top-level modules of a stock CUDA PyTorch image as this environment installs them: those of the
    distributions of ``IMAGE_MODULES`` and ``IMAGE_ALSO`` and of everything they require (extras aside), the dry
    run's allowlist (``image_stand_in``)."""
    owners = importlib.metadata.packages_distributions()
    todo = {pep503(d) for m in IMAGE_MODULES for d in owners.get(m, [m])} | set(IMAGE_ALSO)
    seen = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo |= {pep503(re.match(r'[\w.-]+', r).group()) for r in requires if not re.search(r'\bextra\s*==', r)}
    return sorted(m for m, dists in owners.items() if any(pep503(d) in seen for d in dists))


def torch_version_tuple(version: str):
    """(major, minor) of a torch version string ('2.11.0+cu130' -> (2, 11))."""
    return tuple(int(part) for part in version.split('+')[0].split('.')[:2])


def machine() -> Dict:
    """Python, torch, CUDA build, driver and every visible GPU (name, compute capability, memory)."""
    import torch

    from tola_plugin.basicsr_glue import distributed
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


def distribution_of(module_name: str) -> str:
    """The distribution that provides the top-level module ``module_name`` ('cv2' -> 'opencv-python-headless' or
    'opencv-python'); the module name itself when none is recorded."""
    dists = importlib.metadata.packages_distributions().get(module_name) or [module_name]
    return dists[0]


def tested_versions() -> Dict[str, str]:
    """{distribution: version} installed here of every module the check imports (what the tests ran with)."""
    found = {}
    for name, module_name in [*BUNDLED_MODULES.items(), *[(None, m) for m in IMAGE_MODULES]]:
        dist = name or distribution_of(module_name)
        try:
            found[module_name] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def image_distributions(site: str, root: str = '') -> Dict[str, str]:
    """{distribution: version} of every distribution this Python sees but the carry's private folder ``site`` and the
    checkout ``root``: on a GPU, the image's whole list (what an allowlist of the dry run's stand-in would start
    from: docs/training_gpus.md, "How it runs")."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata['Name']
        if name and path_origin(str(dist.locate_file('')), site, root) == 'image':
            found.setdefault(pep503(name), dist.version)
    return dict(sorted(found.items()))


def path_origin(path: str, site: str, root: str = '') -> str:
    """'carry' (in the private folder ``site``), 'checkout' (in the checkout ``root``, not in a site-packages) or
    'image'."""
    path = os.path.realpath(path)

    def within(folder):
        return path == folder or path.startswith(folder + os.sep)

    if site and within(os.path.realpath(site)):
        return 'carry'
    if root and within(os.path.realpath(root)) and 'site-packages' not in path.split(os.sep):
        return 'checkout'  # (a virtualenv inside the checkout is the image's stand-in, not the checkout)
    return 'image'


def module_origin(module, site: str, root: str = '') -> str:
    """'carry' (the private folder ``site`` the wheels were installed into), 'checkout' (the checkout ``root``) or
    'image'."""
    path = getattr(module, '__file__', None)
    return path_origin(path, site, root) if path else 'image'  # (no file: a namespace package, built in)


def check_imports(image_modules: List[str], site: str, root: str = '',
                  tested: Optional[Mapping[str, str]] = None) -> Dict[str, Dict]:
    """{module: {'distribution', 'version', 'tested' (the version the tests ran with, from the manifest), 'differs',
    'origin'}} of the carried distributions and the image's modules the check needs. ImportError naming every
    missing one, and RuntimeError for a torch older than 2.4."""
    found, missing = {}, []
    tested = tested or {}
    for name, module_name in [*BUNDLED_MODULES.items(), *[(None, m) for m in image_modules]]:
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            missing.append(f'{module_name} ({err})')
            continue
        dist = name or distribution_of(module_name)
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = getattr(module, '__version__', 'unknown')
        pin = tested.get(module_name)
        found[module_name] = {
            'distribution': dist, 'version': str(version), 'tested': pin, 'differs': bool(pin and pin != str(version)),
            'origin': module_origin(module, site, root)
        }
    if missing:
        raise ImportError(f'the GPU check needs {", ".join(missing)}: not carried, and this Python '
                          f'({sys.executable}) does not have it (docs/training_gpus.md, "The GPU check")')
    import torch
    if torch_version_tuple(torch.__version__) < MIN_TORCH:
        raise RuntimeError(f'torch {torch.__version__}: the GPU check needs torch 2.4 or newer')
    return found
