"""Shared helpers of the backbone tests: manifests, official-layout fakes, the official-code fixtures."""
import ast
import importlib.util
import json
import os
from typing import Dict, List, Tuple

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every key and shape of the official checkpoint, read from the official code (docs/backbone.md, "Checkpoint layout").
MANIFESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'backbone', 'manifests')
DATA = os.path.join(REPO, 'tests', 'data', 'backbone')
OFFICIAL_KEYS = {'idm': 'IDM_Unet', 'vae': 'VAE_model', 'mom': 'MoM_module', 'tdm': 'TDM_Decoder'}


def manifest(name: str) -> List[Tuple[str, Tuple[int, ...]]]:
    """[(official key, shape)] of manifests/<name>.tsv."""
    with open(os.path.join(MANIFESTS, f'{name}.tsv'), encoding='utf-8') as f:
        rows = [line.rstrip('\n').split('\t') for line in f if line.strip()]
    return [(key, tuple(ast.literal_eval(shape))) for key, shape in rows]


def cheap_official(layout) -> Dict[str, torch.Tensor]:
    """Official-layout tensors for ``layout`` that all view ONE zero buffer (at distinct offsets), so a
    full-size checkpoint costs only its largest tensor in memory and on disk."""
    numels = [torch.Size(shape).numel() for _, shape in layout]
    buf = torch.zeros(max(numels) + len(layout))
    return {key: buf[i:i + n].view(shape) for i, ((key, shape), n) in enumerate(zip(layout, numels))}


def _fixture_module():
    spec = importlib.util.spec_from_file_location('make_backbone_fixtures',
                                                  os.path.join(DATA, 'make_backbone_fixtures.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def official_fixture():
    """(meta, arrays) produced by the official code (tests/data/backbone/make_backbone_fixtures.py)."""
    from safetensors.torch import load_file

    with open(os.path.join(DATA, 'official_tiny.json'), encoding='utf-8') as f:
        meta = json.load(f)
    return meta, load_file(os.path.join(DATA, 'official_tiny.safetensors'))


def tiny_official_state(meta) -> Dict[str, Dict[str, torch.Tensor]]:
    """{official top-level key: state dict} of the tiny random weights the fixtures were computed with."""
    fx = _fixture_module()
    out = {}
    for i, comp in enumerate(('idm', 'vae', 'mom')):
        sd = fx.random_official_weights(meta['layout'][comp], fx.SEED + i)
        got, want = fx.checksum(sd), meta['checksums'][comp]
        # torch.randn's generic and vectorised kernels round Box-Muller differently: 6.6e-9 measured with the
        # 'default' kernels, 0 with AVX2/AVX-512 (allowed 1e-6, 150x); another RNG stream moves the sum by ~1e-3
        assert abs(got - want) <= 1e-6 * want, f'{comp}: regenerated weights drifted ({got} vs {want})'
        out[OFFICIAL_KEYS[comp]] = sd
    return out


def write_tiny_official_ckpt(path, meta) -> str:
    torch.save(tiny_official_state(meta), str(path))
    return str(path)


def single_thread():
    """Generator for a module-scoped fixture: the tiny nets run several times faster on one thread on this
    shared 2-core machine (no oversubscription); the previous setting is restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
