"""The option files of the TOLA paper's ablations (tools/make_tola_ablations.py writes them to
options/ablations/).

Every file is options/train/train_TOLA.yml or options/test/test_TOLA.yml with the variant's switches changed, and a
header naming the paper table/row and any choice made where the paper is ambiguous. Trained variants get a
train_<v>.yml and a test_<v>.yml (evaluating that variant's checkpoint); fixed-checkpoint controls get a
test_<v>.yml that evaluates the Full checkpoint.
"""
import copy
import os
import sys
from typing import Dict

import yaml

from tola_plugin.options.reader import read_option_file
from tola_plugin.utils.user_text import say

FULL_CHECKPOINT = 'experiments/TOLA_CTR/models/net_g_latest.pth'
SELECTION = ('Select the checkpoint by validation {metric} as the paper does (Table S9 caption); evaluate with '
             'the matching test_ file.')

REMOVE = object()  # override value that deletes the key (e.g. a loss block)

# name: (paper table / row, network_g overrides, train overrides, comment)
TRAINED = {
    'full': ('Table 4 "Full"; reference row of Tables S8/S9', {}, {}, 'Identical to options/train/train_TOLA.yml.'),
    'lrc_only': ('Table 4 "LRC only"', {'idm_lora': False, 'vae_lora': False}, {},
                 'Default LRC trained; IDM and VAE stay frozen (no LoRA).'),
    'lora_only': ('Table 4 "LoRA only"', {'lrc': None}, {},
                  'Rank-4 IDM + VAE-encoder LoRA, no correction branch: z0corr = z0.'),
    'plain_residual': ('Table 4 "Plain residual correction"',
                       {'lrc': {'type': 'PlainResidualCorrection', 'num_feat': 30, 'num_block': 11}
                        }, {}, 'Parameter-matched plain branch (180,093 parameters) instead of the RRDB LRC.'),
    'no_mom': ('Table 4 "No MoM"', {'text_prior': 'none'}, {},
               'Choice: with the TransOCR-MoM branch removed (training and inference), the IDM cross-attention '
               'gets an all-zero (B, 24, 160) context.'),
    'direct_tokens': ('Table 4 "Direct token condition"', {'context_route': 'direct'}, {},
                      'Choice: the context is the MoM text encoder\'s own 160-d token embeddings of the predicted '
                      'tokens, scaled by the confidences, without its position embedding and layers.'),
    'idm_lora_only': ('Table 4 "IDM LoRA only"', {'vae_lora': False}, {},
                      'VAE-encoder LoRA omitted; IDM LoRA and the default LRC remain.'),
    'vae_lora_only': ('Table 4 "VAE LoRA only"', {'idm_lora': False}, {},
                      'IDM LoRA omitted; VAE-encoder LoRA and the default LRC remain.'),
    'rank2': ('Tables S8/S9 "Rank 2"; Table S5 LoRA (r, alpha) = (2, 2)', {'lora_rank': 2, 'lora_alpha': 2}, {}, ''),
    'rank4': ('Tables S8/S9 "Full" (rank 4); Table S5 (4, 4)', {'lora_rank': 4, 'lora_alpha': 4}, {},
              'Identical to Full (kept so that every examined value has a file).'),
    'rank8': ('Tables S8/S9 "Rank 8"; Table S5 (8, 8)', {'lora_rank': 8, 'lora_alpha': 8}, {}, ''),
    'lrc_small': ('Tables S8/S9 "LRC Small"; LRC (h, g, n) = (16, 8, 1), 45,235 parameters',
                  {'lrc': {'type': 'LatentResidualCorrection', 'num_feat': 16, 'num_grow_ch': 8,
                           'num_block': 1}}, {}, ''),
    'lrc_default': ('Tables S8/S9 "Full"; LRC (32, 16, 1), 180,323 parameters',
                    {'lrc': {'type': 'LatentResidualCorrection', 'num_feat': 32, 'num_grow_ch': 16,
                             'num_block': 1}}, {}, 'Identical to Full.'),
    'lrc_large': ('Tables S8/S9 "LRC Large"; LRC (32, 16, 2), 360,323 parameters',
                  {'lrc': {'type': 'LatentResidualCorrection', 'num_feat': 32, 'num_grow_ch': 16,
                           'num_block': 2}}, {}, ''),
    'no_l1': ('Tables S8/S9 "No l1"', {}, {'pixel_opt': REMOVE}, 'Objective LPIPS-VGG + 0.02 OCR CE.'),
    'no_lpips': ('Tables S8/S9 "No LPIPS"', {}, {'perceptual_opt': REMOVE}, 'Objective L1 + 0.02 OCR CE.'),
    'ocr_w0': ('Tables S8/S9 "OCR wt. 0"', {}, {'ocr_opt': {'type': 'OCRCELoss', 'loss_weight': 0.0}},
               'OCR weight 0: the OCR loss is not computed.'),
    'ocr_w002': ('Tables S8/S9 "Full" (OCR weight 0.02)', {}, {'ocr_opt': {'type': 'OCRCELoss',
                                                                           'loss_weight': 0.02}}, 'Identical to Full.'),
    'ocr_w005': ('Tables S8/S9 "OCR wt. .05"', {}, {'ocr_opt': {'type': 'OCRCELoss', 'loss_weight': 0.05}}, ''),
    'train_t899': ('Tables S8/S9 "Train t=899"', {'timestep': 899}, {},
                   'Choice: the checkpoint trained at t=899 is also evaluated at t=899 (the paper does not say).'),
    'train_t949': ('Tables S8/S9 "Train t=949"', {'timestep': 949}, {},
                   'Choice: the checkpoint trained at t=949 is also evaluated at t=949 (the paper does not say).'),
    'train_t999': ('Tables S8/S9 "Full" (train t=999)', {'timestep': 999}, {}, 'Identical to Full.'),
}

# name: (paper table / row, network_g overrides, checkpoint (None = none), comment)
CONTROLS = {
    'frozen_one_step': ('Table 4 "Frozen one-step"', {'idm_lora': False, 'vae_lora': False, 'lrc': None}, None,
                        'The frozen DiffTSR pathway run once through Algorithm 1: no LoRA, no LRC, nothing trained.'),
    'null_context': ('Table 4 "Null context" (fixed-checkpoint control)', {'text_prior': 'null'}, FULL_CHECKPOINT,
                     'Choice: the null text is the empty prediction, i.e. all 24 tokens are the pad 6735 with zero '
                     'confidence, passed through the MoM text encoder.'),
    'uniform_confidence': ('Table 4 "Uniform confidence" (fixed-checkpoint control)', {'confidence': 'uniform'},
                           FULL_CHECKPOINT, 'Choice: unit confidence everywhere, pads included, i.e. DiffTSR\'s '
                           'unweighted token embeddings.'),
    'gt_prior': ('Table 4 "GT prior (oracle)" (fixed-checkpoint control)', {'text_prior': 'gt'}, FULL_CHECKPOINT,
                 'Choice: ground-truth IDM tokens (the dataset\'s idm_tokens) with confidence 1 on characters and 0 '
                 'on pads (the alignment rule of predicted priors applied to a certain prior).'),
    'vae_lora_off': ('Table S11 "VAE LoRA off" (fixed-checkpoint control)', {'vae_lora_active': False}, FULL_CHECKPOINT,
                     'All VAE-encoder LoRA (quant_conv included) disabled at inference; IDM LoRA '
                     'and LRC retained.'),
    'infer_t899': ('Table S11 "Inference t=899" (fixed-checkpoint control)', {'timestep': 899}, FULL_CHECKPOINT, ''),
    'infer_t949': ('Table S11 "Inference t=949" (fixed-checkpoint control)', {'timestep': 949}, FULL_CHECKPOINT, ''),
    'infer_t999': ('Table S11 "Inference t=999" (fixed-checkpoint control)', {'timestep': 999}, FULL_CHECKPOINT,
                   'Identical to options/test/test_TOLA.yml.'),
    'eps_zero': ('Table S11 "eps = 0" (fixed-checkpoint control)', {'noise': 'zero'}, FULL_CHECKPOINT,
                 'z_t = sqrt(abar) z_LR: no noise is drawn.'),
}


def _load(path):
    return read_option_file(path)


def _apply(section, overrides):
    for key, value in overrides.items():
        if value is REMOVE:
            section.pop(key, None)
        else:
            section[key] = copy.deepcopy(value)


def _header(kind, name, row, comment, extra=''):
    lines = [
        f'# TOLA ablation "{name}" ({kind}). Paper: {row}.',
        '# Generated by tools/make_tola_ablations.py from options/train/train_TOLA.yml and '
        'options/test/test_TOLA.yml;', '# edit those or the generator, not this file.'
    ]
    for text in (comment, extra):
        if text:
            lines.append(f'# {text}')
    return '\n'.join(lines) + '\n'


def _dump(header, opt):
    return header + yaml.safe_dump(opt, sort_keys=False, allow_unicode=True, default_flow_style=False, width=110)


def build_files(options_dir: str) -> Dict[str, str]:
    """{file name: text} of every ablation option file, from the base files of ``options_dir`` (the repository's
    options/: train/train_TOLA.yml, test/test_TOLA.yml)."""
    train_base = _load(os.path.join(options_dir, 'train', 'train_TOLA.yml'))
    test_base = _load(os.path.join(options_dir, 'test', 'test_TOLA.yml'))
    files = {}
    for name, (row, net, train, comment) in TRAINED.items():
        opt = copy.deepcopy(train_base)
        opt['name'] = f'TOLA_abl_{name}'
        _apply(opt['network_g'], net)
        _apply(opt['train'], train)
        selection = SELECTION.format(metric='PSNR' if train.get('perceptual_opt') is REMOVE else 'LPIPS')
        files[f'train_{name}.yml'] = _dump(_header('trained variant', name, row, comment, selection), opt)
        test = copy.deepcopy(test_base)
        test['name'] = f'TOLA_abl_{name}_test'
        test['network_g'] = copy.deepcopy(opt['network_g'])
        test['path']['pretrain_network_g'] = f'experiments/TOLA_abl_{name}/models/net_g_latest.pth'
        files[f'test_{name}.yml'] = _dump(
            _header('evaluation of the trained variant', name, row, comment, f'Train it first with train_{name}.yml.'),
            test)
    for name, (row, net, checkpoint, comment) in CONTROLS.items():
        test = copy.deepcopy(test_base)
        test['name'] = f'TOLA_ctl_{name}'
        _apply(test['network_g'], net)
        test['path']['pretrain_network_g'] = checkpoint
        extra = ('Evaluates the Full checkpoint (options/train/train_TOLA.yml) with this switch changed.'
                 if checkpoint else 'Needs no trained checkpoint.')
        files[f'test_{name}.yml'] = _dump(_header('fixed-checkpoint control', name, row, comment, extra), test)
    return files


def update_ablation_files(options_dir: str, check: bool = False) -> int:
    """(Re)write ``options_dir``/ablations/*.yml where they differ from ``build_files``, and print what was done;
    with ``check`` write nothing: print ``error: ...`` on stderr and return 1 when a file is missing, out of date or
    not generated here, else 0."""
    out_dir = os.path.join(options_dir, 'ablations')
    files = build_files(options_dir)
    stale = []
    for name, text in files.items():
        path = os.path.join(out_dir, name)
        current = open(path, encoding='utf-8').read() if os.path.isfile(path) else None
        if current != text:
            stale.append(name)
            if not check:
                os.makedirs(out_dir, exist_ok=True)
                with open(path, 'w', encoding='utf-8') as f:
                    f.write(text)
    extra = sorted(set(n for n in os.listdir(out_dir) if n.endswith('.yml')) - set(files)) \
        if os.path.isdir(out_dir) else []
    if check:
        if stale or extra:
            say(f'error: out of date: {stale}; not generated by this tool: {extra}')
            return 1
        say(f'{len(files)} ablation option files up to date', sys.stdout)
        return 0
    left = f'; unknown files left: {extra}' if extra else ''
    say(f'wrote {len(stale)} of {len(files)} files to {out_dir}{left}', sys.stdout)
    return 0
