"""What TOLA trains and keeps, as a mixin of ``TOLANet``: the adaptation state (peft LoRA of the IDM and the VAE
encoder, the LRC), the settings it depends on, folding LoRA into the weights, and gradient checkpointing of the
adapted parts (training memory).

The mixin uses four attributes of its network and none of its methods: ``idm`` and ``vae`` (diffusers models,
peft-wrapped where they carry LoRA), ``lrc`` (a module or None) and ``config`` (a ``TOLAConfig``: it reads ``lrc`` and
``vae_lora_active`` and keeps ``gradient_checkpointing`` current). Building them is ``tola_arch.TOLANet``'s, as is
Algorithm 1.
"""
from typing import Dict, Sequence

import torch
from peft import PeftModel

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.lora import (count_lora_parameters, load_lora_state_dict, lora_settings, lora_state_dict,
                                    merge_lora)
from tola_plugin.archs.tola_config import CHECKPOINTABLE, checkpointed_parts  # noqa: F401 (the parts, named here too)
from tola_plugin.options.checks import resolved_options


class TOLAAdaptationMixin:
    """LoRA + LRC state, settings and merge, and gradient checkpointing (see the module docstring)."""

    def trainable_parameter_counts(self) -> Dict[str, int]:
        """Parameters TOLA optimises and saves: {'idm_lora', 'vae_lora', 'lrc', 'total'} (Table S3)."""
        counts = dict(
            idm_lora=count_lora_parameters(self.idm), vae_lora=count_lora_parameters(self.vae),
            lrc=sum(p.numel() for p in self.lrc.parameters()) if self.lrc is not None else 0)
        counts['total'] = sum(counts.values())
        return counts

    def adaptation_state_dict(self) -> Dict[str, torch.Tensor]:
        """Exactly the trained state: peft's adapter state of the IDM and VAE ('idm_lora.*', 'vae_lora.*') and
        the correction branch ('lrc.*'). Frozen backbone weights are never saved."""
        state = {}
        if self.has_lora('idm'):
            state.update({f'idm_lora.{k}': v for k, v in lora_state_dict(self.idm).items()})
        if self.has_lora('vae'):
            state.update({f'vae_lora.{k}': v for k, v in lora_state_dict(self.vae).items()})
        if self.lrc is not None:
            state.update({f'lrc.{k}': v.detach().clone() for k, v in self.lrc.state_dict().items()})
        return state

    def adaptation_config(self) -> Dict:
        """The settings the adaptation state depends on, recorded in every checkpoint and checked when one is
        loaded: ``lora_rank``, ``lora_alpha`` (None without LoRA), ``idm_lora`` / ``vae_lora`` (the target
        patterns, None without that LoRA) and ``lrc`` (its options with defaults filled in, None without LRC)."""
        loras = {name: lora_settings(getattr(self, name)) for name in ('idm', 'vae') if self.has_lora(name)}
        first = next(iter(loras.values()), {})
        return {
            'lora_rank': first.get('rank'), 'lora_alpha': first.get('alpha'),
            'idm_lora': loras['idm']['targets'] if 'idm' in loras else None,
            'vae_lora': loras['vae']['targets'] if 'vae' in loras else None,
            'lrc': resolved_options(ARCH_REGISTRY, self.config.lrc) if self.lrc is not None else None
        }

    def load_adaptation_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        """Inverse of ``adaptation_state_dict``; strict: any missing or unexpected key raises KeyError."""
        parts = {'idm_lora': {}, 'vae_lora': {}, 'lrc': {}}
        for key, value in state.items():
            head, _, rest = key.partition('.')
            if head not in parts:
                raise KeyError(f'TOLANet adaptation state: unexpected key {key!r} (expected idm_lora.*, '
                               'vae_lora.*, lrc.*)')
            parts[head][rest] = value
        for name in ('idm', 'vae'):
            if self.has_lora(name):
                load_lora_state_dict(getattr(self, name), parts[f'{name}_lora'], component=f'TOLANet {name}')
            elif parts[f'{name}_lora']:
                raise KeyError(f'TOLANet: the state has {name} LoRA weights but this model has no {name} LoRA '
                               f'({name}_lora is off)')
        if self.lrc is not None:
            self.lrc.load_state_dict(parts['lrc'], strict=True)
        elif parts['lrc']:
            raise KeyError('TOLANet: the state has LRC weights but this model has no correction branch (lrc: ~)')

    def has_lora(self, name: str) -> bool:
        """Whether the 'idm' or 'vae' module currently carries (unmerged) peft LoRA adapters."""
        return isinstance(getattr(self, name), PeftModel)

    def merge_lora(self) -> None:
        """Fold LoRA into the base weights (peft merge_and_unload): same outputs within fp32 rounding, no
        adapter overhead; afterwards the model has no adaptation state apart from the LRC."""
        for name in ('idm', 'vae'):
            if not self.has_lora(name):
                continue
            if name == 'vae' and not self.config.vae_lora_active:
                self.vae = self.vae.unload()  # the "VAE LoRA off" control: the base encoder, unchanged
            else:
                setattr(self, name, merge_lora(getattr(self, name)))

    def set_gradient_checkpointing(self, parts: Sequence[str], checkpoint_fn=None) -> None:
        """Recompute the activations of ``parts`` (a subset of ``CHECKPOINTABLE``) in the backward pass instead of
        keeping them; the others keep theirs. Uses the diffusers blocks' own checkpointing (each ResNet/attention
        block of the IDM, each down/mid/up block of the VAE), switched per part (diffusers switches a whole model).
        ``checkpoint_fn(module, *args)``: the recomputation function (default: non-reentrant
        ``torch.utils.checkpoint``, as diffusers); with autograd off (validation, inference) nothing changes."""
        parts = checkpointed_parts('gradient_checkpointing', parts)
        if checkpoint_fn is None:

            def checkpoint_fn(module, *args):
                return torch.utils.checkpoint.checkpoint(module.__call__, *args, use_reentrant=False)

        vae = self.vae.get_base_model() if isinstance(self.vae, PeftModel) else self.vae
        idm = self.idm.get_base_model() if isinstance(self.idm, PeftModel) else self.idm
        for name, module in (('idm', idm), ('vae_encoder', vae.encoder), ('vae_decoder', vae.decoder)):
            for block in module.modules():
                if hasattr(block, 'gradient_checkpointing'):
                    block.gradient_checkpointing = name in parts
                    block._gradient_checkpointing_func = checkpoint_fn
        self.config = self.config.replace(gradient_checkpointing=parts)  # the config says what the network does
