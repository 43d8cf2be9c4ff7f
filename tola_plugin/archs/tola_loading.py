"""TOLANet from and to files, as a mixin of ``TOLANet`` (the file formats are ``tola_plugin.checkpoints.tola``):

- an option file's ``network_g`` and its adaptation checkpoint (``from_options``, ``load_adaptation_checkpoint``);
- merged files (``save_merged``, ``from_merged``, ``load_for_inference``): every tensor of the LoRA-merged network
  and the options that rebuild it, ``TOLAConfig.recorded_options`` (docs/tola.md, "``TOLANet`` options": Files).

Loaders take inference switches (``TOLANet.set_switches``: timestep, noise, precision, ...) as keyword arguments;
everything else is fixed by the files. The mixin uses the network's public face only (``from_config``, ``config``,
the adaptation state, ``set_switches``, ``prepare_for_inference``, its modules' own configs); nothing in the
network calls it.
"""
import inspect
from typing import Dict, Optional, Sequence

import torch

from basicsr.utils import get_root_logger
from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.mom_arch import DiffTSRMoM
from tola_plugin.archs.tola_config import TOLAConfig
from tola_plugin.checkpoints import tola as tola_files
from tola_plugin.checkpoints.demo_backbone import DEMO
from tola_plugin.options.checks import check_typed_block
from tola_plugin.options.reader import OptionError, apply_force_yml, read_option_file
from tola_plugin.utils.checkpoint_io import require_file


def read_tola_options(opt_path: str, overrides: Sequence[str] = ()) -> Dict:
    """The option file ``opt_path`` (a dict) with the ``--force_yml`` entries ``overrides`` applied as the launchers
    apply them, checked to hold a ``network_g`` of type TOLANet whose keys are all TOLANet options (errors name the
    file)."""
    opt = read_option_file(require_file(opt_path, 'option file', 'Give a TOLA option file.'))
    try:
        apply_force_yml(opt, overrides)
    except OptionError as err:
        raise OptionError(f'{opt_path}: {err}') from None
    if (opt.get('network_g') or {}).get('type') != 'TOLANet':
        raise ValueError(f'{opt_path}: network_g.type must be TOLANet')
    try:
        check_typed_block(opt['network_g'], ARCH_REGISTRY, 'network_g')
    except OptionError as err:
        raise OptionError(f'{opt_path}: {err}') from None
    return opt


class TOLALoadingMixin:
    """Option files, adaptation checkpoints and merged files (see the module docstring)."""

    # ------------------------------------------------------------------------- option file + adaptation checkpoint
    @classmethod
    def from_options(cls, opt_path: str, checkpoint: Optional[str] = None, overrides: Sequence[str] = (), **switches):
        """The TOLANet of an option file's ``network_g`` with the adaptation state (LoRA + LRC) of ``checkpoint``
        (default: the file's ``path.pretrain_network_g``), in eval mode; ``overrides``: ``--force_yml`` entries
        (``network_g:backbone_init=demo``) applied to the file first; ``switches``: inference switches. A network
        with trainable adapters and no checkpoint is an error (running untrained adapters is almost certainly a
        mistake)."""
        TOLAConfig.check_switches(switches)  # before minutes of loading
        opt = read_tola_options(opt_path, overrides)
        path_opt = opt.get('path') or {}
        checkpoint = checkpoint or path_opt.get('pretrain_network_g')
        if checkpoint == DEMO:  # before the backbone is built (a full-size one takes a minute)
            cls.check_demo_adaptation(opt['network_g'].get('backbone_init', 'checkpoint'), 'TOLA adaptation checkpoint '
                                      '(path.pretrain_network_g or --checkpoint)')
        try:
            net = cls(**{k: v for k, v in opt['network_g'].items() if k != 'type'})
        except FileNotFoundError as err:
            if opt['network_g'].get('backbone_init', 'checkpoint') != 'checkpoint':
                raise
            raise FileNotFoundError(f'{opt_path}: {err} A model adapted on the demo backbone (backbone_init: demo in '
                                    'training) needs it here too: network_g.backbone_init: demo (tola-export-merged '
                                    '--force_yml network_g:backbone_init=demo)') from None
        if checkpoint:
            net.load_adaptation_checkpoint(checkpoint, path_opt.get('param_key_g', 'params'),
                                           what='TOLA adaptation checkpoint (path.pretrain_network_g or --checkpoint)')
        elif net.trainable_parameter_counts()['total']:
            raise ValueError(f'{opt_path}: no adaptation checkpoint (path.pretrain_network_g or --checkpoint) for a '
                             'network with LoRA/LRC')
        return net.set_switches(**switches).eval()

    def load_adaptation_checkpoint(self, path: str, param_key: str = 'params',
                                   what: str = 'TOLA adaptation checkpoint') -> None:
        """Load an adaptation checkpoint (``TOLAModel.save_network``'s file): the recorded settings must match this
        network's, every tensor's shape too, and no LoRA/LRC key may be missing or unexpected. ``path`` ``demo``: the
        demo model's shipped adaptation, of the demo backbone only. ``what`` names the file (and its option) in
        errors."""
        if path == DEMO:
            self.check_demo_adaptation(self.config.backbone_init, what)
        state, recorded = tola_files.read_adaptation_checkpoint(path, param_key, what)
        if recorded is None:
            get_root_logger().warning(f'{path} records no adaptation settings (written before tola-plugin recorded '
                                      'them): only its tensor shapes can be checked, not lora_alpha')
        else:
            tola_files.check_adaptation_config(recorded, self.adaptation_config(), path, what)
        tola_files.check_adaptation_shapes(state, self.adaptation_state_dict(), path, what)
        self.load_adaptation_state_dict(state)

    @staticmethod
    def check_demo_adaptation(backbone_init: str, what: str) -> None:
        """The demo adaptation (``demo``) fits the demo backbone only: another is a ValueError naming the override."""
        if backbone_init != DEMO:
            raise ValueError(f'{what} demo: the demo model\'s adaptation adapts the demo backbone; set '
                             f'network_g:backbone_init=demo (this network has backbone_init {backbone_init!r})')

    # ------------------------------------------------------------------------------------------------ merged files
    def merged_options(self) -> Dict:
        """What a merged file records (``TOLAConfig.recorded_options``): the options that rebuild this network's
        architecture with LoRA merged (no adapters, an 'empty' backbone: every weight is in the file), its switches
        as they are now; the backbone sizes are read from the modules themselves."""
        if self.has_lora('idm') or self.has_lora('vae'):
            raise ValueError('TOLANet.merged_options: call merge_lora() first')
        if self.inference_only:
            raise ValueError('TOLANet: a network prepared for inference has no MoM image branch and cannot be '
                             'exported; export the trained network (tools/export_merged.py)')
        sizes = {}
        for name, module in (('idm', self.idm), ('vae', self.vae), ('mom', self.mom)):
            accepted = inspect.signature(type(module).__init__).parameters
            sizes[f'{name}_config'] = {
                k: (list(v) if isinstance(v, tuple) else v)
                for k, v in module.config.items() if k in accepted
            }
        sizes['transocr_config'] = dict(self.transocr.arch_options)  # e.g. the demo file's own architecture
        merged = self.config.replace(backbone_init='empty', idm_lora=False, vae_lora=False, vae_lora_active=True,
                                     **sizes)
        return merged.recorded_options()

    def save_merged(self, path: str) -> None:
        """Merge LoRA (if not yet) and write every tensor of the network to one pickle-free safetensors file,
        with the rebuild options in its metadata (``from_merged`` reads it back)."""
        self.merge_lora()
        tola_files.write_merged(path, self.state_dict(), self.merged_options())

    @classmethod
    def from_merged(cls, path: str, **switches):
        """Rebuild a merged TOLANet from ``save_merged``'s file (strict; every tensor, the MoM image branch
        included), frozen, in eval mode. ``switches``: inference switches. For inference prefer
        ``load_for_inference`` (no MoM image branch, inference mode)."""
        TOLAConfig.check_switches(switches)
        net, state = cls._merged_network(path)
        tola_files.check_merged_tensors(state, net.state_dict(), path)
        net.load_state_dict(state, strict=True, assign=True)  # memory-mapped tensors, no copy
        net.requires_grad_(False)
        return net.set_switches(**switches).eval()

    @classmethod
    def load_for_inference(cls, path: str, **switches):
        """The inference network of ``save_merged``'s file: ``prepare_for_inference`` applied, the weights
        memory-mapped from the file and assigned in place (read once, never copied on the CPU; ``.to(device)``
        copies them to a GPU), the MoM image branch never read. Strict: every tensor it runs must be in the file.
        ``switches``: inference switches (precision, text_decoding, timestep, noise, ...). Where and on which runtime
        it runs is the runtime decision's business (``tola_plugin/runtime/serving.py``)."""
        TOLAConfig.check_switches(switches)
        net, state = cls._merged_network(path, skip=[f'mom.{prefix}' for prefix in DiffTSRMoM.IMAGE_BRANCH])
        net.mom.drop_image_branch()
        tola_files.check_merged_tensors(state, net.state_dict(), path)
        net.load_state_dict(state, strict=True, assign=True)
        return net.set_switches(**switches).prepare_for_inference()

    @classmethod
    def _merged_network(cls, path: str, skip=()):
        """(the network of a merged file's options, on the meta device; its tensors): options that are not
        TOLANet's (a misspelled key, another network's file) or that TOLANet refuses are a ValueError naming the
        file."""
        options, state = tola_files.read_merged(path, skip=skip)
        try:
            config = TOLAConfig.from_options(options, where='options')
            with torch.device('meta'):  # 'empty' backbone: no init of ~1B parameters that are overwritten right away
                return cls.from_config(config), state
        except (TypeError, ValueError) as err:
            raise ValueError(f'{path}: metadata "options" do not build a TOLANet: {err}') from None
