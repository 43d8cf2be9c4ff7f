"""TOLANet from an official-layout DiffTSR.ckpt (tiny configs of the backbone fixtures): with LoRA and LRC at
init, eps = 0 and the posterior mode it equals the strictly loaded official modules run through Algorithm 1."""
import pytest
import torch
import yaml

import tola_plugin  # noqa: F401
from tola_plugin.archs.backbone_builder import load_difftsr, load_transocr
from tola_plugin.archs.diffusion_schedule import schedule_constants
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.text.text_prior import transocr_to_idm
from backbone_testing import DATA, official_fixture, write_tiny_official_ckpt
from numerics import equivalent
from tola_testing import one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp('tola_ckpt')
    with open(f'{DATA}/test_DiffTSR_tiny.yml', encoding='utf-8') as f:
        configs = {k: v for k, v in yaml.safe_load(f)['network_g'].items() if k.endswith('_config')}
    meta, _ = official_fixture()
    ckpt = write_tiny_official_ckpt(root / 'DiffTSR.ckpt', meta)
    torch.manual_seed(0)
    ocr = TransOCR(**configs['transocr_config'])
    torch.save({'state_dict': ocr.state_dict()}, root / 'transocr.pth')
    return dict(ckpt=ckpt, transocr=str(root / 'transocr.pth'), configs=configs)


@pytest.mark.numerics
def test_checkpoint_route_equals_official_modules_through_algorithm1(files):
    cfg = files['configs']
    net = TOLANet(backbone_init='checkpoint', difftsr_checkpoint=files['ckpt'], transocr_checkpoint=files['transocr'],
                  noise='zero', lrc=dict(type='LatentResidualCorrection'), **cfg).double().eval()
    ref = load_difftsr(files['ckpt'],
                       configs={k[:-len('_config')]: v
                                for k, v in cfg.items() if k != 'transocr_config'})
    ref = {name: module.double() for name, module in ref.items()}
    ocr = load_transocr(files['transocr'], **cfg['transocr_config']).double().eval()
    torch.manual_seed(1)
    lq = torch.rand(2, 3, 32, 128, dtype=torch.float64)  # float64: the two sides are equal in exact arithmetic
    with torch.no_grad():
        out = net(lq, return_intermediates=True)
        tokens, conf = transocr_to_idm(*ocr.greedy_decode(lq, max_steps=24))
        z_lr = ref['vae'].encode(lq).latent_dist.mode()
        sa, s1m = schedule_constants(999)
        z_t = sa * z_lr
        eps = ref['idm'](torch.cat([z_t, z_lr], 1), torch.full((2, ), 999), ref['mom'].encode_text(tokens, conf))
        z0 = (z_t - s1m * eps) / sa
        image = ref['vae'].decode((1.0 / LATENT_SCALE) * z0).sample.clamp(0, 1)
    assert torch.equal(out['tokens'], tokens)
    # the same frozen modules, once behind peft LoRA at init (B = 0) and LRC at init (Δr = 0, z_LR - (r + 0))
    equivalent(out['z0'], z0, 'z0 vs the official modules')
    equivalent(out['z0_corr'], z0, 'z0_corr vs the official modules')
    equivalent(out['image'], image, 'image vs the official modules')
    assert net.trainable_parameter_counts()['total'] > 0 and not next(net.mom.parameters()).requires_grad


def test_checkpoint_errors_name_the_file(files, tmp_path):
    with pytest.raises(FileNotFoundError, match='nope.ckpt'):
        TOLANet(backbone_init='checkpoint', difftsr_checkpoint=str(tmp_path / 'nope.ckpt'),
                transocr_checkpoint=files['transocr'], **files['configs'])
    cfg = dict(files['configs'], idm_config=dict(files['configs']['idm_config'], cross_attention_dim=48))
    with pytest.raises((KeyError, ValueError)):
        TOLANet(backbone_init='checkpoint', difftsr_checkpoint=files['ckpt'], transocr_checkpoint=files['transocr'],
                **cfg)
