"""LoRA placement for TOLA through ``peft`` (no hand-written LoRA layers, merging or state-dict filtering).

Placement (paper supplementary "LoRA Placement and Frozen Components"; docs/tola.md, "LoRA placement", shows these
are the only natural rules that reproduce the paper's counts):
- IDM: every Linear/Conv inside the 16 transformer blocks (proj_in, proj_out, attn1/attn2 q/k/v/out,
  GEGLU in, FF out) -> 2,027,520 parameters at r = 4. ResNet blocks, time embedding, conv_in/conv_out
  stay unadapted.
- VAE: every encoder convolution except the mid-block self-attention, plus the encoder-side 1×1
  ``quant_conv`` -> 250,548 parameters at r = 4. Decoder and ``post_quant_conv`` stay unadapted.
Patterns are diffusers module names (regexes, matched by peft with ``re.fullmatch``).
"""
from typing import Dict, Optional

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from torch import nn

IDM_LORA_TARGETS = (r'.*attentions\.\d+\.(proj_in|proj_out'
                    r'|transformer_blocks\.\d+\.(attn1|attn2)\.(to_q|to_k|to_v|to_out\.0)'
                    r'|transformer_blocks\.\d+\.ff\.net\.(0\.proj|2))')
VAE_ENCODER_LORA_TARGETS = (r'(encoder\.(conv_in|conv_out'
                            r'|down_blocks\.\d+\.(resnets\.\d+\.(conv1|conv2|conv_shortcut)|downsamplers\.0\.conv)'
                            r'|mid_block\.resnets\.\d+\.(conv1|conv2))'
                            r'|quant_conv)')


def lora_config(target_modules: str, rank: int = 4, alpha: Optional[float] = None) -> LoraConfig:
    """peft LoraConfig with TOLA's settings: rank r, alpha = r unless given (paper: (r, α) = (4, 4)), dropout 0."""
    if int(rank) < 1:
        raise ValueError(f'LoRA rank must be a positive integer, got {rank!r}')
    return LoraConfig(
        r=int(rank), lora_alpha=rank if alpha is None else alpha, lora_dropout=0.0, target_modules=target_modules,
        bias='none')


def lora_settings(peft_model: PeftModel) -> Dict:
    """{'rank', 'alpha', 'targets'} of the adapter a model carries (what its LoRA weights mean)."""
    config = peft_model.peft_config['default']
    targets = config.target_modules
    return {
        'rank': int(config.r), 'alpha': config.lora_alpha,
        'targets': targets if isinstance(targets, str) else sorted(targets)
    }


def add_lora(module: nn.Module, target_modules: str, rank: int = 4, alpha: Optional[float] = None) -> PeftModel:
    """Wrap ``module`` with peft LoRA adapters; freezes every base parameter. Raises if nothing matched."""
    config = lora_config(target_modules, rank, alpha)  # outside the try: a bad rank is not "nothing matched"
    try:
        return get_peft_model(module, config)
    except ValueError as err:  # peft: "Target modules ... not found in the base model"
        raise ValueError(f'LoRA: no module of {type(module).__name__} matches {target_modules!r}: {err}') from err


def count_lora_parameters(module: nn.Module) -> int:
    """Number of LoRA parameters (the ``lora_A``/``lora_B`` weights) inside ``module``."""
    return sum(p.numel() for n, p in module.named_parameters() if '.lora_A.' in n or '.lora_B.' in n)


def lora_state_dict(peft_model: PeftModel) -> Dict[str, torch.Tensor]:
    """The adapter weights only (peft's own selection), detached on CPU-compatible tensors."""
    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}


def load_lora_state_dict(peft_model: PeftModel, state_dict: Dict[str, torch.Tensor], component: str) -> None:
    """Load adapter weights; any adapter key missing or unexpected is a KeyError naming ``component``."""
    expected = set(get_peft_model_state_dict(peft_model))
    given = set(state_dict)
    if expected != given:
        missing, unexpected = sorted(expected - given), sorted(given - expected)
        raise KeyError(f'{component} LoRA: {len(missing)} missing key(s) {missing[:3]}, '
                       f'{len(unexpected)} unexpected key(s) {unexpected[:3]}')
    result = set_peft_model_state_dict(peft_model, state_dict)
    if result.unexpected_keys:
        raise KeyError(f'{component} LoRA: peft did not place key(s) {result.unexpected_keys[:3]}')


def merge_lora(peft_model: PeftModel) -> nn.Module:
    """Fold LoRA into the base weights (peft ``merge_and_unload``) and return the plain base module."""
    return peft_model.merge_and_unload()
