"""Parameters, MACs and batch-1 latency of TOLA and of the 200-step DiffTSR route (paper Table "efficiency";
tools/benchmark_efficiency.py).

MACs are counted with mmengine (one multiply-add = 1 MAC; attention matmuls included), each component is timed on
batch-1 inputs (median after a warm-up). Rows follow the paper's convention ("VAEs and text modules are excluded"):
TOLA params = IDM + IDM LoRA + LRC, MACs = IDM with LoRA + LRC, once; DiffTSR params = IDM, MACs = steps x IDM (the
MoM text encoder, MoM U-Net and TDM excluded); plus the full routes with the VAE and TransOCR. DiffTSR's latency is
composed from measured components: TransOCR + VAE encoder + steps x (MoM + IDM) + VAE decoder (the TDM is not
implemented: the default route never runs it).
"""
import json
import os
from typing import Optional

import torch
from torch import nn

from basicsr.archs.rrdbnet_arch import RRDBNet

from tola_lab.benchmarks.benchmarking import build_benchmark_tola, median_seconds
from tola_lab.benchmarks.complexity import count_macs, count_parameters
from tola_plugin.archs.lora import count_lora_parameters
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.text.alphabets import IDM_MAX_LEN
from tola_plugin.utils.devices import resolve_device


class _Call(nn.Module):
    """Wrap a callable so FlopAnalyzer (which traces ``module.forward``) can count it."""

    def __init__(self, owner: nn.Module, fn):
        super().__init__()
        self.owner, self.fn = owner, fn

    def forward(self, *args):
        return self.fn(*args)


def measure(net: nn.Module, height: int, width: int, steps: int, repeats: int, device: torch.device) -> dict:
    """Counts and timings of every component of ``net`` (a TOLANet) on one (1,3,height,width) input."""
    lq = torch.rand(1, 3, height, width, device=device)
    with torch.no_grad():
        z_lr = net.vae.encode(lq).latent_dist.mode()
    tokens = torch.randint(0, 6735, (1, IDM_MAX_LEN), device=device)
    weights = torch.rand(1, IDM_MAX_LEN, device=device)
    context = net.mom.encode_text(tokens, token_weights=weights)
    t = torch.full((1, ), net.timestep, dtype=torch.long, device=device)
    idm_in = torch.cat([z_lr, z_lr], 1)
    lrc_in = torch.cat([z_lr, z_lr], 1)
    with net.idm.disable_adapter() if hasattr(net.idm, 'disable_adapter') else torch.no_grad():
        idm_macs = count_macs(net.idm, (idm_in, t, context))
        idm_time = median_seconds(lambda: net.idm(idm_in, t, context), repeats)
    idm_lora_macs = count_macs(net.idm, (idm_in, t, context))
    vae_encode = _Call(net.vae, lambda x: net.vae.encode(x).latent_dist.mode())
    vae_decode = _Call(net.vae, lambda z: net.vae.decode(z / LATENT_SCALE).sample)
    text_encoder = _Call(net.mom, lambda tok, w: net.mom.encode_text(tok, token_weights=w))
    mom_step = _Call(net.mom, lambda tok, zl, zt, tt, w: net.mom(tok, zl, zt, tt, token_weights=w))
    ocr_encoder = _Call(net.transocr, lambda x: net.transocr.encode(x))

    lora_idm = count_lora_parameters(net.idm)
    r = {
        'params': {
            'idm': count_parameters(net.idm) - lora_idm, 'idm_lora': lora_idm,
            'vae_lora': count_lora_parameters(net.vae), 'lrc': count_parameters(net.lrc) if net.lrc is not None else 0,
            'vae': count_parameters(net.vae) - count_lora_parameters(net.vae), 'mom': count_parameters(net.mom),
            'transocr': count_parameters(net.transocr)
        },
        'macs': {
            'idm': idm_macs, 'idm_with_lora': idm_lora_macs,
            'lrc': count_macs(net.lrc,
                              (lrc_in, )) if net.lrc is not None else 0, 'vae_encoder': count_macs(vae_encode, (lq, )),
            'vae_decoder': count_macs(vae_decode,
                                      (z_lr, )), 'mom_text_encoder': count_macs(text_encoder, (tokens, weights)),
            'mom_step': count_macs(mom_step, (tokens, z_lr, z_lr, t, weights)),
            'transocr_encoder': count_macs(ocr_encoder, (lq, ))
        },
        'seconds': {
            'idm': idm_time,
            'idm_with_lora': median_seconds(lambda: net.idm(idm_in, t, context), repeats),
            'mom_step': median_seconds(lambda: net.mom(tokens, z_lr, z_lr, t, token_weights=weights), repeats),
            'vae_encoder': median_seconds(lambda: vae_encode(lq), repeats),
            'vae_decoder': median_seconds(lambda: vae_decode(z_lr), repeats),
            # DiffTSR's loop: the whole prefix re-run for 24 steps
            'transocr_greedy': median_seconds(lambda: net.transocr.greedy_decode(lq, incremental=False), repeats),
            'tola_end_to_end': median_seconds(lambda: net(lq, noise_seeds=[0]), repeats)
        },
    }
    p, m, s = r['params'], r['macs'], r['seconds']
    difftsr_seconds = (s['transocr_greedy'] + s['vae_encoder'] + steps * (s['mom_step'] + s['idm']) + s['vae_decoder'])
    r['rows'] = {
        'TOLA (paper convention)': {
            'params': p['idm'] + p['idm_lora'] + p['lrc'], 'macs': m['idm_with_lora'] + m['lrc'],
            'seconds': s['tola_end_to_end']
        },
        f'DiffTSR {steps} steps (paper convention)': {
            'params': p['idm'], 'macs': steps * m['idm'], 'seconds': difftsr_seconds
        },
        'TOLA full route': {
            'params': sum(p.values()), 'seconds': s['tola_end_to_end'], 'macs': m['vae_encoder'] +
            m['mom_text_encoder'] + m['idm_with_lora'] + m['lrc'] + m['vae_decoder'] + m['transocr_encoder']
        },
        f'DiffTSR {steps} steps full route (no TDM)': {
            'params': p['idm'] + p['vae'] + p['mom'] + p['transocr'], 'seconds': difftsr_seconds,
            'macs': m['vae_encoder'] + steps * (m['mom_step'] + m['idm']) + m['vae_decoder'] + m['transocr_encoder']
        },
    }
    r['trainable'] = p['idm_lora'] + p['vae_lora'] + p['lrc']
    return r


def esrgan_row(height: int, width: int, repeats: int, device: torch.device) -> dict:
    """ESRGAN (basicsr RRDBNet, 23 blocks) x4 from the (height/4, width/4) LR."""
    net = RRDBNet(3, 3, scale=4, num_feat=64, num_block=23, num_grow_ch=32).to(device).eval()
    lr = torch.rand(1, 3, height // 4, width // 4, device=device)
    return {
        'params': count_parameters(net), 'macs': count_macs(net, (lr, )),
        'seconds': median_seconds(lambda: net(lr), repeats)
    }


def markdown(rows: dict) -> str:
    """The rows as a markdown table: params (M), MACs (G), seconds."""
    lines = ['| Method | # Params. (M) | MACs (G) | Inference time (s) |', '|---|---:|---:|---:|']
    for name, row in rows.items():
        lines.append(f"| {name} | {row['params'] / 1e6:.2f} | {row['macs'] / 1e9:,.3f} | {row['seconds']:.4f} |")
    return '\n'.join(lines)


def benchmark_efficiency(opt_path: str, random_weights: bool = False, height: int = 128, width: int = 512,
                         steps: int = 200, repeats: int = 3, esrgan: bool = False, device: str = 'auto',
                         out: Optional[str] = None) -> int:
    """Measure the TOLANet of ``opt_path``'s ``network_g`` (random backbone weights with ``random_weights``) on
    ``device`` ('auto': CUDA if present), with the ESRGAN x4 row when ``esrgan``; print the table and the trainable
    parameters, and write the result as JSON to ``out`` (the table as .md next to it). -> 0."""
    device = resolve_device(device)
    net = build_benchmark_tola(opt_path, random_weights).to(device)
    result = measure(net, height, width, steps, repeats, device)
    if esrgan:
        result['rows']['ESRGAN x4'] = esrgan_row(height, width, repeats, device)
    result['device'] = str(device)
    table = markdown(result['rows'])
    print(table)
    print(f"\nTrainable (stored) parameters: {result['trainable']:,}")
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, 'w', encoding='utf-8') as f:
            json.dump(result, f, indent=2)
        with open(os.path.splitext(out)[0] + '.md', 'w', encoding='utf-8') as f:
            f.write(table + '\n')
    return 0
