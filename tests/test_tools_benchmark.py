"""The efficiency benchmark counts MACs as the paper's table does (attention included) and composes rows."""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

from tola_lab.benchmarks.complexity import count_macs
from tola_plugin.archs.lrc_arch import LatentResidualCorrection
from conftest import REPO, write_options


class Attention(nn.Module):

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def test_attention_macs_are_counted():
    q, k, v = torch.rand(2, 4, 10, 8), torch.rand(2, 4, 6, 8), torch.rand(2, 4, 6, 5)
    # Q K^T: 2*4 * 10*6*8, then (.)V: 2*4 * 10*6*5
    assert count_macs(Attention(), (q, k, v)) == 2 * 4 * 10 * 6 * 8 + 2 * 4 * 10 * 6 * 5


def test_default_lrc_macs_on_the_paper_latent():
    # 1x1 6->32, one RRDB (3 RDBs of 3x3 convs 32+16i -> 16, last -> 32), 1x1 32->3, on 32x128 positions
    rdb = 9 * (32 * 16 + 48 * 16 + 64 * 16 + 80 * 16 + 96 * 32)
    expected = (6 * 32 + 3 * rdb + 32 * 3) * 32 * 128
    assert count_macs(LatentResidualCorrection(), (torch.rand(1, 6, 32, 128), )) == expected == 737_280_000


def test_benchmark_tool_on_a_tiny_tola(tmp_path):
    import yaml
    with open(os.path.join(REPO, 'tests', 'data', 'tola', 'tiny_backbone.yml'), encoding='utf-8') as f:
        tiny = yaml.safe_load(f)
    opt = {'network_g': {'type': 'TOLANet', **tiny, 'lrc': {'type': 'LatentResidualCorrection'}}}
    out = tmp_path / 'eff.json'
    sys.path.insert(0, os.path.join(REPO, 'tools'))
    try:
        import benchmark_efficiency
    finally:
        sys.path.pop(0)
    assert benchmark_efficiency.main(
        ['-opt', write_options(tmp_path / 'tiny.yml', opt), '--repeats', '1', '--steps', '3', '--out',
         str(out)]) == 0
    result = json.loads(out.read_text())
    p, m, rows = result['params'], result['macs'], result['rows']
    assert m['idm_with_lora'] > m['idm'] > 0 and m['lrc'] > 0
    assert rows['TOLA (paper convention)']['macs'] == m['idm_with_lora'] + m['lrc']
    assert rows['TOLA (paper convention)']['params'] == p['idm'] + p['idm_lora'] + p['lrc']
    assert rows['DiffTSR 3 steps (paper convention)']['macs'] == 3 * m['idm']
    assert result['trainable'] == p['idm_lora'] + p['vae_lora'] + p['lrc'] > 0
    assert (tmp_path / 'eff.md').read_text().startswith('| Method |')
