"""Test fakes: metric weights for offline tests: a TORCH_HOME whose files have the real names and
state-dict layouts but random values, so pyiqa/torchvision run their real loading code with no network.

Each tensor is a strided view of a tiny random storage (``as_strided`` with unit strides), which torch.save
keeps as a view: the fake VGG16 is a few kB instead of 553 MB. The scores such weights give are meaningless.
"""
import os
from typing import Dict, Iterable

import torch

from tola_plugin import metric_weights as W


def _fake_tensor(key: str, shape: torch.Size, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype == torch.long:  # BatchNorm num_batches_tracked
        return torch.zeros(shape, dtype=dtype)
    if len(shape) == 0:
        return torch.rand((), generator=gen) * 0.1
    storage_len = sum(int(s) for s in shape) - len(shape) + 1
    base = torch.randn(storage_len, generator=gen)
    if len(shape) >= 2:  # conv / linear: He-style scale keeps activations alive through deep stacks
        base = base * (2.0 / max(1, int(torch.tensor(shape[1:]).prod())))**0.5
    elif 'running_var' in key or key.endswith('weight'):  # BatchNorm variance and scale near 1
        base = 1.0 + 0.1 * base.abs()
    else:  # biases, running means
        base = 0.05 * base
    return base.as_strided(tuple(shape), (1, ) * len(shape))


def fake_state_dict(shapes: Dict[str, torch.Tensor], seed: int = 0) -> Dict[str, torch.Tensor]:
    """Random tiny-storage tensors with the keys, shapes and dtypes of ``shapes`` (e.g. a meta state dict)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: _fake_tensor(k, v.shape, v.dtype, gen) for k, v in shapes.items()}


def _meta_state_dict(build) -> Dict[str, torch.Tensor]:
    with torch.device('meta'):
        return build().state_dict()


def _fid_inception_shapes() -> Dict[str, torch.Tensor]:
    from pyiqa.archs import inception as inception_mod
    original = inception_mod.load_pretrained_network
    inception_mod.load_pretrained_network = lambda *args, **kwargs: None  # structure only
    try:
        return _meta_state_dict(inception_mod.fid_inception_v3)
    finally:
        inception_mod.load_pretrained_network = original


def write_fake_metric_weights(torch_home: str, metrics: Iterable[str] = ('lpips', 'dists', 'fid'),
                              seed: int = 0) -> Dict[str, str]:
    """Write fake weights for ``metrics`` under ``torch_home/hub/{checkpoints,pyiqa}``; return {name: path}.

    The LPIPS linear layers are not written: they ship inside the lpips wheel. Set ``TORCH_HOME=torch_home``
    before building the metrics.
    """
    import torchvision.models as tvm
    written = {}
    for metric in metrics:
        for weight in W.METRIC_WEIGHTS.get(metric, ()):
            if weight.store == W.LPIPS_WHEEL:
                continue
            if weight is W.ALEXNET:
                shapes = _meta_state_dict(tvm.alexnet)
            elif weight is W.VGG16:
                shapes = _meta_state_dict(tvm.vgg16)
            elif weight is W.DISTS_WEIGHTS:
                n_channels = 3 + 64 + 128 + 256 + 512 + 512  # pyiqa DISTS: image + five VGG16 stages
                shapes = {k: torch.empty(1, n_channels, 1, 1, device='meta') for k in ('alpha', 'beta')}
            elif weight is W.FID_INCEPTION:
                shapes = _fid_inception_shapes()
            else:
                raise ValueError(f'no fake recipe for {weight.name}')
            folder = os.path.join(torch_home, 'hub', 'checkpoints' if weight.store == W.TORCHVISION else 'pyiqa')
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, weight.name)
            state = fake_state_dict(shapes, seed)
            if weight is W.DISTS_WEIGHTS:  # DISTS normalises alpha+beta; keep them positive like the real file
                state = {k: v.abs() + 0.01 for k, v in state.items()}
            torch.save(state, path)
            written[weight.name] = path
    return written
