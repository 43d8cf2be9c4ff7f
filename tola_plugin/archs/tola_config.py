"""TOLAConfig: what a ``TOLANet`` is built from, in one place (as peft's ``LoraConfig``, diffusers' ``ConfigMixin``).

Every option of the network is a field here, with its default (the paper's), its check and its kind (``KINDS``):

- ``architecture``: fixes the modules or their weights (the backbone and its sizes, LoRA, the LRC);
- ``switch``: an inference switch: changes what the forward computes but no weight (``SWITCHES``; a built network
  changes them with ``TOLANet.set_switches``);
- ``file``: where the backbone weights are read (a merged file holds every weight and records none);
- ``training``: how the backward pass runs (gradient checkpointing), not what the network computes.

The option file's ``network_g`` (BasicSR builds ``TOLANet(**network_g)``), the merged file's metadata (its
``recorded_options``: architecture and switches) and the loaders all go through ``TOLAConfig.from_options``: unknown
keys name the closest known one, bad values name the option and what it takes. docs/tola.md has the table.
"""
import copy
import dataclasses
import inspect
import numbers
import os
from collections.abc import Mapping
from typing import Dict, Optional, Tuple

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.backbone_builder import BACKBONE_INITS
from tola_plugin.archs.diffusion_schedule import NUM_TRAIN_TIMESTEPS
from tola_plugin.archs.precision import PRECISIONS
from tola_plugin.archs.stages import STAGES
from tola_plugin.archs.vae_arch import LATENT_MODES
from tola_plugin.options.checks import check_keys, check_typed_block

KINDS = ('architecture', 'switch', 'file', 'training')
RECORDED_KINDS = ('architecture', 'switch')  # what a merged file's metadata records (the rest: machine and run)
TEXT_PRIORS = ('predicted', 'gt', 'null', 'none')
CONFIDENCES = ('predicted', 'uniform')
CONTEXT_ROUTES = ('mom', 'direct')
NOISE_MODES = ('gaussian', 'zero')
TEXT_DECODINGS = ('incremental', 'full_prefix')
#: gradient checkpointing's parts: the stages with large activations, the image stages a runtime serves
CHECKPOINTABLE = tuple(s.name for s in STAGES if s.servable and s.planned)
PAPER_LRC = {'type': 'LatentResidualCorrection'}  # (h, g, n) = (32, 16, 1): 180,323 parameters (Table S3)


# ------------------------------------------------------------------------------------- the checks of one value
class OneOf:
    """A value of ``choices`` (strings, or True/False), nothing else (``1`` is not ``True``)."""

    def __init__(self, *choices):
        self.choices = choices

    def __call__(self, name: str, value):
        kind = bool if isinstance(self.choices[0], bool) else str
        if not isinstance(value, kind) or value not in self.choices:
            raise ValueError(f'TOLANet: {name} must be one of {self.choices}, got {value!r}')
        return value


def timestep_value(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value < NUM_TRAIN_TIMESTEPS:
        raise ValueError(f'TOLANet: {name} must be an integer in [0, {NUM_TRAIN_TIMESTEPS - 1}], got {value!r}')
    return int(value)


def whole_number(name: str, value, least: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or (least is not None and value < least):
        kind = 'a positive integer' if least == 1 else 'an integer'
        raise ValueError(f'TOLANet: {name} must be {kind}, got {value!r}')
    return int(value)


def positive_integer(name: str, value) -> int:
    return whole_number(name, value, least=1)


def alpha_value(name: str, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real) or value <= 0):
        raise ValueError(f'TOLANet: {name} must be a positive number or null (= lora_rank), got {value!r}')
    return value


def file_path(name: str, value) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise ValueError(f'TOLANet: {name} must be a file path, got {value!r}')
    return os.fspath(value)


def module_options(name: str, value) -> Optional[dict]:
    """A module's constructor overrides ({option: value}; the module checks them when it is built) or None."""
    if value is not None and not isinstance(value, Mapping):
        raise ValueError(f'TOLANet: {name} must be a mapping of constructor options or null, got {value!r}')
    return None if value is None else copy.deepcopy(dict(value))


def network_block(name: str, value) -> Optional[dict]:
    """A BasicSR network block ({type: a registered network, its options}) or None; its keys checked."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or 'type' not in value:
        raise ValueError(f'TOLANet: {name} must be a network block ({{type: LatentResidualCorrection, ...}}) or null, '
                         f'got {value!r}')
    check_typed_block(value, ARCH_REGISTRY, name)
    return copy.deepcopy(dict(value))


def checkpointed_parts(name: str, value) -> Tuple[str, ...]:
    """Distinct parts of ``CHECKPOINTABLE`` (None: none) -> a tuple in ``CHECKPOINTABLE``'s order."""
    parts = () if value is None else value
    if (not isinstance(parts, (list, tuple)) or any(p not in CHECKPOINTABLE for p in parts)
            or len(set(parts)) != len(parts)):
        raise ValueError(f'TOLANet: {name} must be a list of distinct parts of {CHECKPOINTABLE}, got {value!r}')
    return tuple(p for p in CHECKPOINTABLE if p in parts)


def option(default, kind: str, check):
    """A field of ``TOLAConfig``: its default (a mapping is copied for each config), kind and check."""
    assert kind in KINDS, kind
    metadata = {'kind': kind, 'check': check}
    if isinstance(default, Mapping):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(dict(default)), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


# ------------------------------------------------------------------------------------------------ the config
@dataclasses.dataclass(frozen=True)
class TOLAConfig:
    """The options of a ``TOLANet``; each checked (and normalised: a path to ``str``, a list of parts to a tuple)
    when the config is made, so a config that exists holds only values TOLANet takes (the module sizes are checked
    by the modules when they are built, the files when they are read).

    Backbone (architecture unless said):
        backbone_init: 'checkpoint' (the official ``DiffTSR.ckpt`` / ``transocr.pth``, strict), 'demo' (the small
            backbone trained here and shipped in ``tola_plugin/assets/demo/backbone``, strict; the checkpoint paths are
            not used), 'random' (modules built from ``*_config``, weights drawn from ``random_seed``: tests and
            benchmarks) or 'empty' (modules built from ``*_config``, no weight drawn: every weight is loaded next,
            as when a merged file is rebuilt).
        difftsr_checkpoint, transocr_checkpoint (file): the backbone files (official layout or converted).
        idm_config, vae_config, mom_config, transocr_config: constructor overrides of the backbone modules (None:
            the official sizes, or the converted file's own); with 'checkpoint' they must match the file.
        random_seed: seed of the 'random' backbone, drawn from its own RNG stream so that training and testing
            rebuild the very same random backbone whatever the global RNG state.
    Adaptation (what is trained; architecture):
        lora_rank, lora_alpha: peft LoRA rank r (4) and alpha (None = r; the paper's (4, 4)).
        idm_lora, vae_lora: LoRA in the IDM transformer blocks / the VAE encoder + quant_conv.
        vae_lora_active: False disables the VAE-encoder LoRA at inference (the "VAE LoRA off" control).
        lrc: BasicSR network block of the correction branch (the paper's LRC by default; PlainResidualCorrection)
            or None (no correction: ẑ0corr = ẑ0).
    Inference switches (``SWITCHES``; the paper's first):
        timestep: fixed zero-indexed q-sample / IDM timestep t (999; 899 and 949 in Tables S8, S9 and S11).
        latent: 'mode' (posterior mean of the VAE encoder) or 'sample' (the official DiffTSR inference).
        noise: 'gaussian' (one ε ~ N(0, I) per input) or 'zero' (the ε = 0 control, Table S11).
        text_prior: 'predicted' (TransOCR on the LR input), 'gt' (oracle: ground-truth tokens), 'null' (empty
            text: all pads, MoM retained) or 'none' (No MoM: the IDM gets an all-zero context).
        confidence: 'predicted' (token embeddings × aligned TransOCR confidences) or 'uniform' (DiffTSR's).
        context_route: 'mom' (the MoM text encoder) or 'direct' (confidence-scaled token embeddings as context).
        clamp_output: clamp the decoded image to [0, 1].
        precision: 'fp32', 'bf16', 'fp16' or 'auto': the compute dtype of the VAE, MoM, IDM and LRC
            (``archs/precision.py``; 'auto': the runtime decision of the inference entry points).
        text_decoding: 'incremental' (cached keys/values, stops at END) or 'full_prefix' (DiffTSR's loop; the
            same function, docs/inference.md).
    Training:
        gradient_checkpointing: parts of ``CHECKPOINTABLE`` whose activations are recomputed in the backward pass
            (none: the paper); same gradients, less memory (docs/training_gpus.md).
    """
    backbone_init: str = option('checkpoint', 'architecture', OneOf(*BACKBONE_INITS))
    difftsr_checkpoint: str = option('checkpoints/DiffTSR.ckpt', 'file', file_path)
    transocr_checkpoint: str = option('checkpoints/transocr.pth', 'file', file_path)
    idm_config: Optional[dict] = option(None, 'architecture', module_options)
    vae_config: Optional[dict] = option(None, 'architecture', module_options)
    mom_config: Optional[dict] = option(None, 'architecture', module_options)
    transocr_config: Optional[dict] = option(None, 'architecture', module_options)
    random_seed: int = option(0, 'architecture', whole_number)
    lora_rank: int = option(4, 'architecture', positive_integer)
    lora_alpha: Optional[float] = option(None, 'architecture', alpha_value)
    idm_lora: bool = option(True, 'architecture', OneOf(True, False))
    vae_lora: bool = option(True, 'architecture', OneOf(True, False))
    vae_lora_active: bool = option(True, 'architecture', OneOf(True, False))
    lrc: Optional[dict] = option(PAPER_LRC, 'architecture', network_block)
    timestep: int = option(999, 'switch', timestep_value)
    latent: str = option('mode', 'switch', OneOf(*LATENT_MODES))
    noise: str = option('gaussian', 'switch', OneOf(*NOISE_MODES))
    text_prior: str = option('predicted', 'switch', OneOf(*TEXT_PRIORS))
    confidence: str = option('predicted', 'switch', OneOf(*CONFIDENCES))
    context_route: str = option('mom', 'switch', OneOf(*CONTEXT_ROUTES))
    clamp_output: bool = option(True, 'switch', OneOf(True, False))
    precision: str = option('fp32', 'switch', OneOf(*PRECISIONS))
    text_decoding: str = option('incremental', 'switch', OneOf(*TEXT_DECODINGS))
    gradient_checkpointing: Tuple[str, ...] = option((), 'training', checkpointed_parts)

    def __post_init__(self):
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, field.metadata['check'](field.name, getattr(self, field.name)))
        if not self.vae_lora_active and not self.vae_lora:
            raise ValueError('TOLANet: vae_lora_active: false switches off a VAE LoRA, but vae_lora is false (there is '
                             'none); remove vae_lora_active or set vae_lora: true')
        if self.context_route == 'direct' and self.text_prior == 'none':
            raise ValueError("TOLANet: context_route 'direct' needs a text prior (text_prior 'none' removes it)")

    @classmethod
    def from_options(cls, options: Mapping, where: str = '') -> 'TOLAConfig':
        """The config of a mapping of options (``network_g`` without its ``type``, a merged file's metadata, a
        constructor's keywords). An unknown key is an OptionError naming the closest known one (``where``: the
        mapping's path in its file, '' for none); a bad value a ValueError naming the option."""
        check_keys(options, cls.names(), where, 'TOLANet')
        return cls(**options)

    @classmethod
    def names(cls, *kinds: str) -> Tuple[str, ...]:
        """The options of ``kinds`` (all without), in the constructor's order."""
        return tuple(f.name for f in dataclasses.fields(cls) if not kinds or f.metadata['kind'] in kinds)

    @classmethod
    def signature(cls) -> inspect.Signature:
        """The options as keyword-only parameters with their defaults: the signature of ``TOLANet(**options)``,
        which BasicSR's strict option check reads (``options/checks.py``)."""
        return inspect.Signature([
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=f.type,
                              default=f.default_factory() if f.default is dataclasses.MISSING else f.default)
            for f in dataclasses.fields(cls)
        ])

    @classmethod
    def kind(cls, name: str) -> str:
        """'architecture', 'switch', 'file' or 'training'."""
        return next(f.metadata['kind'] for f in dataclasses.fields(cls) if f.name == name)

    @classmethod
    def check_switches(cls, switches: Mapping) -> Dict:
        """``switches`` checked one by one (values normalised); any option that is not a switch fixes the
        architecture or the weights, and naming one is an error. Combinations are checked by the config they
        make (``replace``)."""
        unknown = sorted(set(switches) - set(SWITCHES))
        if unknown:
            raise ValueError(f'TOLANet: {unknown} cannot be switched on a built network (they fix its architecture '
                             f'or weights); the inference switches are {sorted(SWITCHES)}')
        checks = {f.name: f.metadata['check'] for f in dataclasses.fields(cls)}
        return {name: checks[name](name, value) for name, value in switches.items()}

    def replace(self, **changes) -> 'TOLAConfig':
        """A new config with ``changes``, checked as a whole."""
        return dataclasses.replace(self, **changes)

    def options(self, *kinds: str) -> Dict:
        """{option: value} of ``kinds`` (all without): copies, a tuple as a list (what JSON and YAML write)."""
        return {
            name: list(value) if isinstance(value, tuple) else copy.deepcopy(value)
            for name, value in ((n, getattr(self, n)) for n in self.names(*kinds))
        }

    def switches(self) -> Dict:
        """The inference switches {name: value}."""
        return self.options('switch')

    def recorded_options(self) -> Dict:
        """What a merged file's metadata records: the architecture and the switches (``RECORDED_KINDS``); the
        backbone files and the training settings belong to a machine and a run, not to the network."""
        return self.options(*RECORDED_KINDS)


#: The inference switches with their choices (None: checked by a function): options that change what the forward
#: computes but no weight. Set at construction, by the loaders (``from_merged(path, noise='zero')``), TOLAPipeline and
#: the command lines, all through ``TOLANet.set_switches``.
SWITCHES = {
    f.name: getattr(f.metadata['check'], 'choices', None)
    for f in dataclasses.fields(TOLAConfig) if f.metadata['kind'] == 'switch'
}
