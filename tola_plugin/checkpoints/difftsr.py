"""DiffTSR's weight files (file formats only; builds no module): the official ``DiffTSR.ckpt`` and our converted
safetensors -> state dicts in our diffusers names and the component configs. ``archs/backbone_builder.py`` builds
the modules and fills them strictly (``load_difftsr``).

Official layout (docs/backbone.md, "Checkpoint layout"): ``torch.load`` gives ``{'IDM_Unet': sd, 'TDM_Decoder': sd,
'MoM_module': sd, 'VAE_model': sd}`` of plain LDM-named state dicts. We read it with ``weights_only=True`` (no pickled
code runs) and ``mmap=True`` so the 211M-parameter ``TDM_Decoder`` entry is dropped before any of its bytes are read.
Each wanted component is renamed to our diffusers layout, checked key by key and shape by shape (any missing,
unexpected or mis-shaped key is an error naming the component and the key, in the builder), and assigned into a
module built on the meta device (no random init, no second copy of the IDM's 3.5 GB).

Converted layout (``tools/convert_difftsr.py``): one safetensors file, keys ``idm.*``, ``vae.*``, ``mom.*`` in
our names, metadata ``format`` and the component configs as JSON.
"""
import json
import re
from typing import Callable, Dict, Iterable, Mapping, Optional, Tuple

import torch

from tola_plugin.utils.atomic_files import atomic_write
from tola_plugin.utils.checkpoint_io import open_safetensors, require_file
from tola_plugin.utils.user_text import say

#: Where users get the official weights (nothing is ever downloaded).
WHERE_DIFFTSR = ('Download DiffTSR.ckpt from the official release (Google Drive / Baidu links in the README of '
                 'https://github.com/YuzheZhang-1999/DiffTSR, folder ckpt/) and put it at this path, or convert it '
                 'once with tools/convert_difftsr.py.')
COMPONENTS = ('idm', 'vae', 'mom')
#: our component name -> top-level key of the official DiffTSR.ckpt
OFFICIAL_KEYS = {'idm': 'IDM_Unet', 'vae': 'VAE_model', 'mom': 'MoM_module'}
SKIPPED_OFFICIAL_KEYS = ('TDM_Decoder', )  # never run by DiffTSR's default route; dropped unread
CONVERTED_FORMAT = 'tola_plugin.difftsr/1'

StateDict = Dict[str, torch.Tensor]
Origin = Dict[str, str]  # our key -> official key (for error messages)

# ---------------------------------------------------------------------------------------------------------
# key renaming: LDM openaimodel.UNetModel -> diffusers UNet2DConditionModel (docs/backbone.md, "IDM key layout";
# generic in the config)

_RESBLOCK = {
    'in_layers.0': 'norm1', 'in_layers.2': 'conv1', 'emb_layers.1': 'time_emb_proj', 'out_layers.0': 'norm2',
    'out_layers.3': 'conv2', 'skip_connection': 'conv_shortcut'
}
_UNET_TOP = {
    'time_embed.0': 'time_embedding.linear_1', 'time_embed.2': 'time_embedding.linear_2', 'input_blocks.0.0': 'conv_in',
    'out.0': 'conv_norm_out', 'out.2': 'conv_out'
}


def _resblock_key(rest: str) -> Optional[str]:
    for old, new in _RESBLOCK.items():
        if rest.startswith(old + '.'):
            return new + rest[len(old):]
    return None


def ldm_unet_key(key: str, layers_per_block: int, attention_levels: Tuple[bool, ...]) -> Optional[str]:
    """Our (diffusers) name of one LDM UNetModel key, or None if the key has no place in this config."""
    for old, new in _UNET_TOP.items():
        if key.startswith(old + '.'):
            return new + key[len(old):]
    n_levels, per_level = len(attention_levels), layers_per_block + 1
    m = (
        re.match(r'(input_blocks|output_blocks)\.(\d+)\.(\d+)\.(.+)$', key)
        or re.match(r'(middle_block)\.()(\d+)\.(.+)$', key))
    if m is None:
        return None
    part, i, sub, rest = m.group(1), int(m.group(2) or 0), int(m.group(3)), m.group(4)
    if part == 'middle_block':
        target = {0: 'mid_block.resnets.0', 1: 'mid_block.attentions.0', 2: 'mid_block.resnets.1'}.get(sub)
        is_resblock = sub != 1
    elif part == 'input_blocks':
        if i == 0:
            return None
        level, j = divmod(i - 1, per_level)
        if level >= n_levels or (j == layers_per_block and level == n_levels - 1):
            return None
        if j == layers_per_block:  # the level's down-sampling ResBlock
            target, is_resblock = (f'down_blocks.{level}.downsamplers.0' if sub == 0 else None), True
        elif sub == 0:
            target, is_resblock = f'down_blocks.{level}.resnets.{j}', True
        else:
            has_attn = attention_levels[level]
            target = f'down_blocks.{level}.attentions.{j}' if (sub == 1 and has_attn) else None
            is_resblock = False
    else:
        u, j = divmod(i, per_level)
        if u >= n_levels:
            return None
        has_attn, has_up = attention_levels[n_levels - 1 - u], (j == layers_per_block and u < n_levels - 1)
        up_sub = (2 if has_attn else 1) if has_up else None
        if sub == 0:
            target, is_resblock = f'up_blocks.{u}.resnets.{j}', True
        elif sub == 1 and has_attn:
            target, is_resblock = f'up_blocks.{u}.attentions.{j}', False
        elif sub == up_sub:
            target, is_resblock = f'up_blocks.{u}.upsamplers.0', True
        else:
            target = None
    if target is None:
        return None
    if is_resblock:
        rest = _resblock_key(rest)
        if rest is None:
            return None
    return f'{target}.{rest}'  # SpatialTransformer sub-keys are identical in both layouts


def _rename(sd: Mapping[str, torch.Tensor], rename: Callable[[str], Optional[str]],
            component: str) -> Tuple[StateDict, Origin]:
    out, origin = {}, {}
    for key, value in sd.items():
        new = rename(key)
        if new is None:
            raise KeyError(f'{component}: unexpected key {key!r} in the official checkpoint (no place for it in '
                           f'this architecture; wrong file or wrong config?)')
        out[new], origin[new] = value, key
    return out, origin


def official_idm_to_ours(sd: Mapping[str, torch.Tensor], config: Mapping) -> Tuple[StateDict, Origin]:
    levels = tuple(bool(a) for a in config['attention_levels'])
    return _rename(sd, lambda k: ldm_unet_key(k, config['layers_per_block'], levels), 'IDM_Unet')


# LDM BERTEmbedder (x-transformers TransformerWrapper) -> DiffTSRTextEncoder
_BERT_TOP = {
    'token_emb.weight': 'token_emb.weight', 'pos_emb.emb.weight': 'pos_emb.weight', 'norm.weight': 'norm.weight',
    'norm.bias': 'norm.bias', 'to_logits.weight': 'to_logits.weight', 'to_logits.bias': 'to_logits.bias'
}
_BERT_ATTN = {
    '0.weight': 'norm1.weight', '0.bias': 'norm1.bias', '1.to_q.weight': 'attn1.to_q.weight',
    '1.to_k.weight': 'attn1.to_k.weight', '1.to_v.weight': 'attn1.to_v.weight',
    '1.to_out.weight': 'attn1.to_out.0.weight', '1.to_out.bias': 'attn1.to_out.0.bias'
}
_BERT_FF = {
    '0.weight': 'norm3.weight', '0.bias': 'norm3.bias', '1.net.0.0.weight': 'ff.net.0.proj.weight',
    '1.net.0.0.bias': 'ff.net.0.proj.bias', '1.net.2.weight': 'ff.net.2.weight', '1.net.2.bias': 'ff.net.2.bias'
}


def official_mom_to_ours(sd: Mapping[str, torch.Tensor], config: Mapping) -> Tuple[StateDict, Origin]:
    levels = (False, ) * len(config['unet_block_out_channels'])
    bert = 'Transformer.transformer.'

    def rename(key: str) -> Optional[str]:
        if key == 'first_embeder.weight':
            return 'token_embedder.weight'
        if key.startswith('Unet.'):
            new = ldm_unet_key(key[len('Unet.'):], config['unet_layers_per_block'], levels)
            return None if new is None else 'unet.' + new
        if not key.startswith(bert):
            return None
        rest = key[len(bert):]
        if rest in _BERT_TOP:
            return 'text_encoder.' + _BERT_TOP[rest]
        m = re.match(r'attn_layers\.layers\.(\d+)\.(.+)$', rest)
        if m is None:
            return None
        block, is_ff = divmod(int(m.group(1)), 2)  # x-transformers layers alternate ('a', 'f')
        new = (_BERT_FF if is_ff else _BERT_ATTN).get(m.group(2))
        if new is None or block >= config['text_depth']:
            return None
        return f'text_encoder.blocks.{block}.{new}'

    return _rename(sd, rename, 'MoM_module')


def official_vae_to_ours(sd: Mapping[str, torch.Tensor], config: Mapping) -> Tuple[StateDict, Origin]:
    """diffusers' own LDM-VAE converter (exact for kl-f4, docs/backbone.md "VAE"), checked to use every key."""
    from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint

    n = len(config['block_out_channels'])
    out = convert_ldm_vae_checkpoint(dict(sd), {'down_block_types': (None, ) * n, 'up_block_types': (None, ) * n})
    # the converter silently drops keys it does not know: find them by storage (renamed values are the same
    # tensors or [:, :, 0, 0] views of them)
    by_ptr = {v.data_ptr(): k for k, v in sd.items()}
    origin = {new: by_ptr.get(v.data_ptr(), new) for new, v in out.items()}
    unused = sorted(set(sd) - set(origin.values()))
    if unused:
        raise KeyError(f'VAE_model: {len(unused)} unexpected key(s) in the official checkpoint {unused[:5]}')
    return out, origin


TO_OURS = {'idm': official_idm_to_ours, 'vae': official_vae_to_ours, 'mom': official_mom_to_ours}

# ---------------------------------------------------------------------------------------------------------
# official configs (model/DiffTSR_config.yaml) -> our constructor kwargs


def _params(entry: Mapping, name: str) -> Mapping:
    return entry.get('params', entry) if isinstance(entry, Mapping) else _bad(name, 'a mapping', entry)


def _bad(name, expected, got):
    raise ValueError(f'official config {name}: expected {expected}, got {got!r}')


def _ldm_unet_kwargs(p: Mapping, name: str) -> Dict:
    """LDM openaimodel.UNetModel params -> (channels, layers, attention levels, heads, context, depth)."""
    unsupported = {
        'use_scale_shift_norm': False, 'resblock_updown': True, 'use_spatial_transformer': True,
        'num_head_channels': -1, 'num_classes': None, 'use_linear_in_transformer': False
    }
    for key, want in unsupported.items():
        if p.get(key, want if key not in ('resblock_updown', 'use_spatial_transformer') else None) != want:
            _bad(f'{name}.{key}', want, p.get(key))
    mult = list(p.get('channel_mult', (1, 2, 4, 8)))
    res = set(p.get('attention_resolutions', ()))
    return dict(in_channels=p['in_channels'], out_channels=p['out_channels'],
                block_out_channels=[p['model_channels'] * m for m in mult], layers_per_block=p['num_res_blocks'],
                attention_levels=[2**i in res for i in range(len(mult))], heads=p['num_heads'],
                context_dim=p['context_dim'], depth=p.get('transformer_depth', 1))


def configs_from_official(model_params: Mapping) -> Dict[str, Dict]:
    """Our ``configs`` for ``load_difftsr`` from the official ``DiffTSR_config.yaml`` ``model.params`` (its
    ``IDM_Unet_config``, ``VAE_model_config`` and ``MoM_module_config`` entries; others are ignored).
    Settings our modules do not implement (scale-shift norm, conv samplers, linear transformer projections,
    ...) are an error."""
    out = {}
    if 'IDM_Unet_config' in model_params:
        k = _ldm_unet_kwargs(_params(model_params['IDM_Unet_config'], 'IDM_Unet_config'), 'IDM_Unet_config')
        out['idm'] = dict(in_channels=k['in_channels'], out_channels=k['out_channels'],
                          block_out_channels=k['block_out_channels'], layers_per_block=k['layers_per_block'],
                          attention_levels=k['attention_levels'], attention_heads=k['heads'],
                          cross_attention_dim=k['context_dim'], transformer_layers_per_block=k['depth'])
    if 'VAE_model_config' in model_params:
        p = _params(model_params['VAE_model_config'], 'VAE_model_config')
        dd = p['ddconfig']
        if list(dd.get('attn_resolutions', [])) or not dd.get('double_z', True):
            _bad('VAE_model_config.ddconfig', 'attn_resolutions [] and double_z true', dd)
        if p.get('embed_dim', dd['z_channels']) != dd['z_channels']:
            _bad('VAE_model_config.embed_dim', f'= z_channels ({dd["z_channels"]})', p.get('embed_dim'))
        out['vae'] = dict(in_channels=dd['in_channels'], out_channels=dd['out_ch'],
                          block_out_channels=[dd['ch'] * m for m in dd['ch_mult']],
                          layers_per_block=dd['num_res_blocks'], latent_channels=dd['z_channels'])
    if 'MoM_module_config' in model_params:
        p = _params(model_params['MoM_module_config'], 'MoM_module_config')
        u = _ldm_unet_kwargs(_params(p['MoM_Unet'], 'MoM_Unet'), 'MoM_Unet')
        t = _params(p['MoM_Transformer'], 'MoM_Transformer')
        if any(u['attention_levels']):
            _bad('MoM_Unet.attention_resolutions', 'no attention levels (mid block only)', u['attention_levels'])
        num_classes, context_dim = p.get('num_classes', 6736), p.get('context_dim', 128)
        if (t['vocab_size'] != num_classes or u['context_dim'] != context_dim
                or u['in_channels'] != 2 * u['out_channels']):
            _bad('MoM_module_config', 'vocab_size = num_classes, Unet context_dim = context_dim, in = 2 x out', dict(p))
        out['mom'] = dict(num_classes=num_classes, context_dim=context_dim,
                          unet_block_out_channels=u['block_out_channels'], unet_layers_per_block=u['layers_per_block'],
                          unet_heads=u['heads'], latent_channels=u['out_channels'], text_dim=t['n_embed'],
                          text_depth=t['n_layer'], max_seq_len=t['max_seq_len'],
                          scale_factor=p.get('scale_factor', 0.18215))
    return out


# ---------------------------------------------------------------------------------------------------------
# reading files


def read_official(path: str) -> Dict[str, Mapping[str, torch.Tensor]]:
    """The official DiffTSR.ckpt as {top-level key: state dict}, memory-mapped, TDM_Decoder dropped unread."""
    require_file(path, 'DiffTSR checkpoint', WHERE_DIFFTSR)
    try:
        raw = torch.load(path, map_location='cpu', weights_only=True, mmap=True)
    except RuntimeError as err:
        if 'mmap' not in str(err):
            raise _unreadable(path, err) from err
        # pre-1.6 (non-zip) torch.save format cannot be memory-mapped: read it whole, say so
        say(f'warning: {path} is in the legacy torch.save format; reading it whole (TDM_Decoder included) once. '
            'Convert it with tools/convert_difftsr.py to avoid this.')
        try:
            raw = torch.load(path, map_location='cpu', weights_only=True)
        except Exception as err2:  # noqa: BLE001  torch raises many types for bad files
            raise _unreadable(path, err2) from err2
    except Exception as err:  # noqa: BLE001  UnpicklingError, EOFError, zip errors, ...
        raise _unreadable(path, err) from err
    if not isinstance(raw, Mapping):
        raise ValueError(f'DiffTSR checkpoint {path!r}: expected a dict with keys {sorted(OFFICIAL_KEYS.values())}, '
                         f'got {type(raw).__name__}')
    raw = dict(raw)
    for key in SKIPPED_OFFICIAL_KEYS:
        raw.pop(key, None)  # mmap: its storage was never read
    return raw


def _unreadable(path: str, err: Exception) -> ValueError:
    return ValueError(f'DiffTSR checkpoint at {path!r} could not be read as a pickle-free torch checkpoint '
                      f'(truncated, corrupt, or carrying code; loading uses weights_only=True): '
                      f'{type(err).__name__}: {err}')


def is_converted(path: str) -> bool:
    return path.endswith('.safetensors')


def check_components(components: Iterable[str]) -> Tuple[str, ...]:
    components = tuple(components)
    bad = [c for c in components if c not in COMPONENTS]
    if bad:
        raise ValueError(f'load_difftsr: unknown component(s) {bad}; expected a subset of {COMPONENTS} '
                         f'(the TDM is never loaded)')
    return components


def official_state_dict(raw: Mapping, path: str, component: str) -> Tuple[Mapping[str, torch.Tensor], str]:
    """The official state dict of ``component`` in ``read_official``'s output -> (state dict, its top-level key)."""
    key = OFFICIAL_KEYS[component]
    if key not in raw:
        raise KeyError(f'DiffTSR checkpoint {path!r} has no {key!r} entry (found {sorted(raw)})')
    sd = raw[key]
    if not isinstance(sd, Mapping):
        raise ValueError(f'DiffTSR checkpoint {path!r}: {key!r} is a {type(sd).__name__}, expected a state dict')
    return sd, key


def read_converted(path: str, components: Tuple[str, ...]) -> Tuple[Dict[str, StateDict], Dict[str, Dict]]:
    """A converted file -> ({component: state dict in our names}, {component: stored constructor config})."""
    require_file(path, 'converted DiffTSR checkpoint', WHERE_DIFFTSR)
    with open_safetensors(path, 'converted DiffTSR checkpoint', CONVERTED_FORMAT,
                          'tools/convert_difftsr.py') as (f, meta):
        stored = json.loads(meta.get('configs', '{}'))
        keys = list(f.keys())
        states = {}
        for comp in components:
            prefix = comp + '.'
            names = [k for k in keys if k.startswith(prefix)]
            if not names:
                raise KeyError(f'converted DiffTSR checkpoint {path!r} holds no {comp!r} tensors')
            states[comp] = {k[len(prefix):]: f.get_tensor(k) for k in names}
    return states, stored


def write_converted(states: Mapping[str, Mapping[str, torch.Tensor]], configs: Mapping[str, Mapping],
                    path: str) -> None:
    """Write ``{component: state dict}`` and their constructor configs as one safetensors file in our layout
    (tools/convert_difftsr.py), atomically."""
    from safetensors.torch import save_file

    tensors = {f'{comp}.{key}': value.contiguous() for comp, sd in states.items() for key, value in sd.items()}
    atomic_write(
        path,
        lambda tmp: save_file(tensors, tmp, metadata={'format': CONVERTED_FORMAT, 'configs': json.dumps(configs)}))
