"""The one backbone builder: DiffTSR's IDM, VAE and MoM and TransOCR, built and filled strictly from the weight
files that ``tola_plugin.checkpoints`` reads (which imports no arch), for TOLANet and DiffTSRNet alike.

- ``load_difftsr``: the official ``DiffTSR.ckpt`` or our converted safetensors -> {component: module}; modules
  built on the meta device, so nothing is initialised twice (docs/backbone.md, "Checkpoint layout").
- ``load_transocr``: ``transocr.pth`` (any official layout) or our safetensors -> TransOCR (docs/transocr.md).
- ``build_backbone``: the four modules from ``backbone_init`` ('checkpoint', 'demo', 'random', 'empty').
"""
import inspect
import os
from typing import Dict, Iterable, Mapping, Optional

import torch
from torch import nn

from tola_plugin.archs.idm_unet_arch import DiffTSRIDMUNet
from tola_plugin.archs.mom_arch import DiffTSRMoM
from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.archs.vae_arch import DiffTSRVAE
from tola_plugin.checkpoints import difftsr as difftsr_files
from tola_plugin.checkpoints.demo_backbone import demo_checkpoint_paths
from tola_plugin.checkpoints.strict import load_state_dict_strict
from tola_plugin.checkpoints.transocr import COMPONENT as TRANSOCR_COMPONENT
from tola_plugin.checkpoints.transocr import read_transocr

CLASSES = {'idm': DiffTSRIDMUNet, 'vae': DiffTSRVAE, 'mom': DiffTSRMoM}
BACKBONE_INITS = ('checkpoint', 'random', 'demo', 'empty')


def build_component(name: str, config: Optional[Mapping] = None, device: str = 'meta') -> nn.Module:
    """Build component ``name`` ('idm' | 'vae' | 'mom') with ``config`` overriding the official defaults."""
    if name not in CLASSES:
        raise ValueError(f'unknown DiffTSR component {name!r}; expected one of {difftsr_files.COMPONENTS}')
    try:
        with torch.device(device):
            return CLASSES[name](**dict(config or {}))
    except TypeError as err:
        raise TypeError(f'DiffTSR component {name!r}: bad config {dict(config or {})}: {err}') from err


def load_difftsr(path: str, components: Iterable[str] = difftsr_files.COMPONENTS,
                 configs: Optional[Mapping] = None) -> Dict[str, nn.Module]:
    """Load DiffTSR components strictly from the official ``DiffTSR.ckpt`` or a converted ``.safetensors``.

    Args:
        path: checkpoint file; missing -> FileNotFoundError saying where the official release publishes it.
        components: any of 'idm', 'vae', 'mom' (the TDM is never loaded).
        configs: optional {component: constructor kwargs} for non-default sizes (tests); for converted files
            the configs stored in the file are used unless given here.
    Returns:
        {component: module} in eval mode, float32, on CPU.
    """
    components = difftsr_files.check_components(components)
    configs = dict(configs or {})
    nets = {}
    if difftsr_files.is_converted(path):
        states, stored = difftsr_files.read_converted(path, components)
        for comp in components:
            module = build_component(comp, configs.get(comp, stored.get(comp)))
            nets[comp] = load_state_dict_strict(module, states.pop(comp), f'{os.path.basename(path)}[{comp}]')
        return nets
    raw = difftsr_files.read_official(path)
    for comp in components:
        sd, key = difftsr_files.official_state_dict(raw, path, comp)
        module = build_component(comp, configs.get(comp))
        ours, origin = difftsr_files.TO_OURS[comp](sd, module.config)
        nets[comp] = load_state_dict_strict(module, ours, key, origin)
        del raw[key], sd, ours
    return nets


def save_converted(nets: Mapping[str, nn.Module], path: str) -> None:
    """Write ``{component: module}`` as one safetensors file in our layout (see tools/convert_difftsr.py)."""
    configs = {}
    for comp, module in nets.items():
        own_args = inspect.signature(CLASSES[comp].__init__).parameters
        configs[comp] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in module.config.items() if k in own_args}
    difftsr_files.write_converted({comp: module.state_dict() for comp, module in nets.items()}, configs, path)


def load_transocr(path: str, **arch_opts) -> TransOCR:
    """Build ``TransOCR(**arch_opts)`` and load ``path`` strictly; returns the model in eval mode. A
    ``.safetensors`` file (``save_transocr``) brings its own architecture; ``arch_opts`` override it.

    Raises FileNotFoundError (missing file, says where the release publishes it), ValueError (unreadable,
    truncated, pickle with code, wrong shape, non-tensor entries) or KeyError (missing/unexpected keys).
    """
    state, stored = read_transocr(path)
    model = TransOCR(**{**stored, **arch_opts})
    load_state_dict_strict(model, state, f'{TRANSOCR_COMPONENT} at {path!r}')
    return model.eval()


def transocr_checkpoint_of(network_opt: Mapping) -> str:
    """The TransOCR file a TOLANet option block (``network_g``) loads: the demo backbone's, or its
    ``transocr_checkpoint`` (default ``checkpoints/transocr.pth``)."""
    if network_opt.get('backbone_init') == 'demo':
        return demo_checkpoint_paths()[1]
    return network_opt.get('transocr_checkpoint', 'checkpoints/transocr.pth')


def build_backbone(backbone_init: str, difftsr_checkpoint: Optional[str] = None,
                   transocr_checkpoint: Optional[str] = None, idm_config: Optional[Mapping] = None,
                   vae_config: Optional[Mapping] = None, mom_config: Optional[Mapping] = None,
                   transocr_config: Optional[Mapping] = None, random_seed: int = 0):
    """(idm, vae, mom, transocr) for ``backbone_init``: 'checkpoint' (the two files, strict; a config given here
    overrides the file's, an absent one keeps the official size or the converted file's own), 'demo' (the shipped
    demo backbone's two files), 'random' (modules from the configs, weights drawn from ``random_seed`` on their own
    RNG stream) or 'empty' (modules from the configs, nothing drawn: every weight is loaded next)."""
    if backbone_init not in BACKBONE_INITS:
        raise ValueError(f'backbone_init must be one of {BACKBONE_INITS}, got {backbone_init!r}')
    configs = dict(idm=dict(idm_config or {}), vae=dict(vae_config or {}), mom=dict(mom_config or {}))
    if backbone_init == 'demo':  # the shipped demo backbone: our two files, architectures in their metadata
        difftsr_checkpoint, transocr_checkpoint = demo_checkpoint_paths()
        backbone_init = 'checkpoint'
    if backbone_init == 'checkpoint':
        given = {k: v for k, v in configs.items() if v}
        modules = load_difftsr(difftsr_checkpoint, components=('idm', 'vae', 'mom'), configs=given or None)
        transocr = load_transocr(transocr_checkpoint, **dict(transocr_config or {}))
        return modules['idm'], modules['vae'], modules['mom'], transocr
    with torch.random.fork_rng(devices=[]):  # CPU init; the global RNG stream is left untouched
        if backbone_init == 'random':
            torch.manual_seed(int(random_seed))
        return (DiffTSRIDMUNet(**configs['idm']), DiffTSRVAE(**configs['vae']), DiffTSRMoM(**configs['mom']),
                TransOCR(**dict(transocr_config or {})))
