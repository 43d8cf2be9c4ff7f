"""DiffTSRNet + DiffTSRModel: the tiny DiffTSR route end to end through BasicSR's test pipeline on CPU, and its
option checks."""
import os
import shutil
import sys

import cv2
import numpy as np
import pytest
import torch
import yaml

from tola_plugin.archs.difftsr_arch import DiffTSRNet, difftsr_sample
from tola_plugin.archs.diffusion_schedule import make_ldm_scheduler
from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.models.difftsr_model import DiffTSRModel
from tola_plugin.options.checks import OptionError, check_options
from tola_plugin.text.alphabets import decode_idm
from tola_plugin.text.text_prior import transocr_to_idm
from backbone_testing import DATA, official_fixture, single_thread, write_tiny_official_ckpt

TINY_OPT = os.path.join(DATA, 'test_DiffTSR_tiny.yml')
_one_thread = pytest.fixture(scope='module', autouse=True)(single_thread)


@pytest.fixture(scope='module')
def workdir(tmp_path_factory):
    """CWD with checkpoints/{DiffTSR.ckpt,transocr.pth} (tiny, random) and lr/ with two 32x128 images."""
    root = tmp_path_factory.mktemp('difftsr_run')
    with open(TINY_OPT, encoding='utf-8') as f:
        opt = yaml.safe_load(f)
    meta, _ = official_fixture()
    os.makedirs(root / 'checkpoints')
    write_tiny_official_ckpt(root / 'checkpoints' / 'DiffTSR.ckpt', meta)
    torch.manual_seed(0)
    ocr = TransOCR(**opt['network_g']['transocr_config'])
    torch.save({'state_dict': ocr.state_dict()}, root / 'checkpoints' / 'transocr.pth')
    os.makedirs(root / 'lr')
    rng = np.random.default_rng(0)
    for name in ('a', 'b'):
        cv2.imwrite(str(root / 'lr' / f'{name}.png'), rng.integers(0, 256, (32, 128, 3), dtype=np.uint8))
    shutil.copy(TINY_OPT, root / 'tiny.yml')
    return root, opt


def base_opt(root, opt, **changes):
    out = dict(yaml.safe_load(yaml.safe_dump(opt)), num_gpu=0, dist=False, is_train=False, rank=0, world_size=1)
    nets = out['network_g']
    for key in ('difftsr_checkpoint', 'transocr_checkpoint'):
        nets[key] = str(root / nets[key])
    nets.update(changes.pop('network_g', {}))
    out.update(changes)
    return out


def test_tiny_route_through_basicsr_test_pipeline(workdir, monkeypatch):
    root, opt = workdir
    from tola_plugin.test import run  # the launcher's body, in this process (test_tola_launchers starts it for real)
    monkeypatch.chdir(root)
    monkeypatch.setattr(sys, 'argv', ['tola-test', '-opt', 'tiny.yml'])
    assert run() == 0
    model = DiffTSRModel(base_opt(root, opt))
    for name in ('a', 'b'):
        saved = cv2.imread(
            str(root / 'results' / 'DiffTSR_tiny' / 'visualization' / 'tiny_lr' / f'{name}_DiffTSR_tiny.png'))
        assert saved is not None and saved.shape == (32, 128, 3)
        # the same route in-process: BGR file -> RGB [0,1] tensor, seed 3, 20 steps
        lq = torch.from_numpy(cv2.imread(str(root / 'lr' / f'{name}.png'))[:, :, ::-1] / 255.).float()
        model.feed_data({'lq': lq.permute(2, 0, 1)[None]})
        model.test()
        assert model.text_prior.shape == (1, 24)
        assert all(0 <= int(i) <= 6735 for i in model.text_prior.flatten())
        decode_idm(model.text_prior[0].tolist())  # decodes to the IDM alphabet
        ours = (model.output[0].permute(1, 2, 0).numpy()[:, :, ::-1] * 255).round()
        # same kernels in both processes, other thread counts: float32 noise may cross one rounding boundary
        assert np.abs(ours - saved).max() <= 1


def test_model_route_equals_difftsr_sample(workdir):
    root, opt = workdir
    model = DiffTSRModel(base_opt(root, opt))
    lq = torch.rand(1, 3, 32, 128, generator=torch.Generator().manual_seed(5))
    model.feed_data({'lq': lq, 'gt': lq})
    model.test()
    ids, probs = model.net_g.transocr.greedy_decode(lq)
    c_t, conf = transocr_to_idm(ids, probs)
    assert torch.equal(c_t, model.text_prior)
    net = model.net_g
    assert isinstance(net, DiffTSRNet)
    ref = difftsr_sample(net.idm, net.vae, net.mom, lq, c_t, make_ldm_scheduler('ddim', 20), 0.2,
                         torch.Generator().manual_seed(3))
    assert torch.equal(model.output, ref)
    visuals = model.get_current_visuals()
    assert set(visuals) == {'lq', 'result', 'gt'}
    assert model.net_g.scheduler.timesteps.tolist() == list(range(951, 0, -50))


def test_official_option_file_mirrors_official_inference():
    with open(os.path.join(os.path.dirname(DATA), '..', '..', 'options', 'test', 'test_DiffTSR.yml')) as f:
        opt = yaml.safe_load(f)
    assert opt['model_type'] == 'DiffTSRModel'
    assert opt['network_g'] == {
        'type': 'DiffTSRNet', 'difftsr_checkpoint': 'checkpoints/DiffTSR.ckpt',
        'transocr_checkpoint': 'checkpoints/transocr.pth', 'steps': 200, 'eta': 0.2, 'latent': 'sample'
    }
    assert opt['sampler'] == {'seed': 0, 'input_size': [128, 512]}


def test_option_and_input_errors(workdir, tmp_path):
    root, opt = workdir
    with pytest.raises(FileNotFoundError, match='DiffTSR.ckpt.*YuzheZhang-1999/DiffTSR'):
        DiffTSRModel(base_opt(root, opt, network_g={'difftsr_checkpoint': str(tmp_path / 'DiffTSR.ckpt')}))
    with pytest.raises(ValueError, match='DiffTSRNet: transocr_checkpoint is required'):
        DiffTSRModel(base_opt(root, opt, network_g={'transocr_checkpoint': None}))
    with pytest.raises(ValueError, match='test/validation only'):
        DiffTSRModel(base_opt(root, opt, is_train=True))
    with pytest.raises(ValueError, match=r"sampler: unknown option\(s\) \['stpes'\]"):
        DiffTSRModel(base_opt(root, opt, sampler={'stpes': 10}))
    with pytest.raises(ValueError, match='DiffTSRNet: latent'):
        DiffTSRModel(base_opt(root, opt, network_g={'latent': 'mean'}))
    with pytest.raises(ValueError, match='DiffTSRNet: eta'):
        DiffTSRModel(base_opt(root, opt, network_g={'eta': 1.5}))
    with pytest.raises(ValueError, match='network_g.type must be DiffTSRNet'):
        DiffTSRModel(base_opt(root, opt, network_g={'type': 'TOLANet'}))
    with pytest.raises(ValueError, match='pretrain_network_g is not used'):
        DiffTSRModel(base_opt(root, opt, path={'pretrain_network_g': 'x.pth'}))
    with pytest.raises(OptionError, match=r"network_g.unet_config: unknown option of DiffTSRNet"):
        check_options(base_opt(root, opt, network_g={'unet_config': {}}))  # what the launchers run first
    with pytest.raises(TypeError, match="component 'idm': bad config"):
        DiffTSRModel(base_opt(root, opt, network_g={'idm_config': {'channels': 3}}))
    model = DiffTSRModel(base_opt(root, opt))
    with pytest.raises(ValueError, match=r'lq must be \(B,3,32,128\)'):
        model.feed_data({'lq': torch.rand(1, 3, 64, 256)})
    with pytest.raises(ValueError, match=r'\[0, 1\]'):
        model.feed_data({'lq': torch.rand(1, 3, 32, 128) * 2 - 1})
