"""tools/export_merged.py and tools/infer_tola.py (the alias of tola-infer) on a tiny random backbone."""
import copy
import os
import sys

import cv2
import pytest
import torch
import yaml
from safetensors.torch import load_file

import tola_plugin  # noqa: F401
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.checkpoints.tola import MERGED_FORMAT
from tola_plugin.inference.prior_csv import read_prior_csv
from inference_testing import TINY_LRC, tiny_adapted_net
from tola_testing import REPO, one_thread, tiny_net_opt  # noqa: F401

sys.path.insert(0, os.path.join(REPO, 'tools'))
import export_merged  # noqa: E402
import infer_tola  # noqa: E402

from numerics import rel_err, within  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """An option file with the tiny backbone and a checkpoint of non-trivial adapters."""
    root = tmp_path_factory.mktemp('tola_tools')
    torch.manual_seed(0)
    net = tiny_adapted_net()
    checkpoint = root / 'net_g_1.pth'
    torch.save({'params': net.adaptation_state_dict()}, checkpoint)
    opt = {
        'network_g': dict(type='TOLANet', **tiny_net_opt(lrc=TINY_LRC)),
        'path': {'pretrain_network_g': str(checkpoint), 'param_key_g': 'params'}
    }
    opt_path = root / 'tiny.yml'
    opt_path.write_text(yaml.safe_dump(opt), encoding='utf-8')
    lr_dir = root / 'lr'
    lr_dir.mkdir()
    rng = torch.Generator().manual_seed(2)
    for name in ('a.png', 'b.jpg'):
        img = (torch.rand(40, 150, 3, generator=rng) * 255).to(torch.uint8).numpy()
        cv2.imwrite(str(lr_dir / name), img)
    return dict(root=root, opt=str(opt_path), checkpoint=str(checkpoint), lr=str(lr_dir), net=net)


@pytest.mark.numerics
def test_export_merged_writes_a_pickle_free_equivalent_model(trained):
    out = trained['root'] / 'merged.safetensors'
    assert export_merged.main(['-opt', trained['opt'], '--out', str(out), '--verify']) == 0
    from safetensors import safe_open
    with safe_open(str(out), framework='pt') as f:
        assert f.metadata()['format'] == MERGED_FORMAT
        assert not any('lora_' in k for k in f.keys())
    # the file holds the float32 merge W + s·BA: against the same merge in float64, two roundings of 2^-24 each;
    # measured 6.0e-8 of a tensor's largest value, tolerance 1e-5 (170x; a wrong or lost tensor is O(1) off)
    adapted = TOLANet.from_options(trained['opt']).double().eval()
    exact = copy.deepcopy(adapted)
    exact.merge_lora()
    stored, expected = load_file(str(out)), exact.state_dict()
    assert stored.keys() == expected.keys()
    within(max(rel_err(stored[k], expected[k]) for k in stored), 1e-5, 'merged file vs float64 merge (weights)')
    # the network rebuilt from the file, run in float64 against the adapted network: only the stored weights'
    # float32 rounding differs, which t = 999 multiplies by 101.6 on the way to the image; measured 2.8e-8
    # relative, tolerance 1e-5 (360x)
    merged = TOLANet.from_merged(str(out)).double()
    lq = torch.rand(2, 3, 32, 128, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    with torch.no_grad():
        a, b = adapted(lq, noise_seeds=[3, 4]), merged(lq, noise_seeds=[3, 4])
    within(rel_err(b, a), 1e-5, 'merged file vs adapted network (float64 forward)')
    with pytest.raises(ValueError, match='cannot be switched on a built network'):
        TOLANet.from_merged(str(out), lrc=None)
    bad = trained['root'] / 'foreign.safetensors'
    from safetensors.torch import save_file
    save_file({'x': torch.zeros(1)}, str(bad))
    with pytest.raises(ValueError, match='not a merged TOLA model'):
        TOLANet.from_merged(str(bad))


def test_export_refuses_untrained_adapters(trained, tmp_path):
    opt = yaml.safe_load(open(trained['opt'], encoding='utf-8'))
    opt['path'] = {}
    path = tmp_path / 'nockpt.yml'
    path.write_text(yaml.safe_dump(opt), encoding='utf-8')
    with pytest.raises(ValueError, match='no adaptation checkpoint'):
        export_merged.main(['-opt', str(path), '--out', str(tmp_path / 'x.safetensors')])


def test_infer_writes_images_and_prior_csv(trained, tmp_path):
    merged = trained['root'] / 'merged_for_infer.safetensors'
    export_merged.main(['-opt', trained['opt'], '--out', str(merged)])
    out_a, out_b, out_c = tmp_path / 'merged', tmp_path / 'options', tmp_path / 'torch'
    assert infer_tola.main(
        ['--model', str(merged), '-i', trained['lr'], '-o',
         str(out_a), '--batch-size', '2', '--ext', 'png']) == 0
    assert infer_tola.main(['-opt', trained['opt'], '-i', trained['lr'], '-o', str(out_b), '--ext', 'png']) == 0
    assert infer_tola.main([
        '--model',
        str(merged), '-i', trained['lr'], '-o',
        str(out_c), '--ext', 'png', '--backend', 'torch', '--batch-size', '1'
    ]) == 0
    for name in ('a.png', 'b.png'):
        img_a, img_b, img_c = (cv2.imread(str(out / name)) for out in (out_a, out_b, out_c))
        assert img_a.shape == (128, 480, 3)  # 40x150 at height 128, aspect kept
        # same per-image noise, batch 2 vs 1, merged vs merged-on-load (backend auto is torch outside the openvino
        # session, tests/conftest.py; OpenVINO's parity: test_inference_openvino.py): float32 noise far below a
        # grey level, which may still cross one rounding boundary
        assert abs(img_a.astype(int) - img_b.astype(int)).max() <= 1
        assert abs(img_a.astype(int) - img_c.astype(int)).max() <= 1
    prior = read_prior_csv(str(out_a / 'prior.csv'))
    assert set(prior) == {'a.png', 'b.png'}  # the output names (b.jpg written as PNG with --ext png)
    assert all(0.0 <= row['prior_confidence'] <= 1.0 for row in prior.values())
    with pytest.raises(FileNotFoundError):
        infer_tola.main(['--model', str(merged), '-i', str(tmp_path / 'nope'), '-o', str(tmp_path / 'o')])


def test_export_takes_the_launchers_overrides_and_writes_with_the_umask(tmp_path, monkeypatch):
    """tola-export-merged on the demo: the paper's test file with the launchers' --force_yml (the same override as
    training: network_g:backbone_init=demo) and the shipped adaptation (--checkpoint demo); the file gets the mode the
    user's umask gives a new file (not mkstemp's or safetensors' private 0600); a bad override names itself."""
    from tola_plugin.inference.demo_model import is_demo_model
    opt = os.path.join(REPO, 'options', 'test', 'test_TOLA.yml')
    previous = os.umask(0o027)
    try:
        out = tmp_path / 'demo_merged.safetensors'
        assert export_merged.main(
            ['-opt', opt, '--force_yml', 'network_g:backbone_init=demo', '--checkpoint', 'demo', '--out',
             str(out)]) == 0
        assert os.stat(out).st_mode & 0o777 == 0o640
        os.umask(0o022)
        again = tmp_path / 'again.safetensors'
        assert export_merged.main(
            ['-opt', opt, '--force_yml', 'network_g:backbone_init=demo', '--checkpoint', 'demo', '--out',
             str(again)]) == 0
        assert os.stat(again).st_mode & 0o777 == 0o644
    finally:
        os.umask(previous)
    assert is_demo_model(str(out))  # the demo model, whatever its name
    with pytest.raises(ValueError, match="--force_yml 'network_h:backbone_init=demo': the option file has no block "
                       'network_h'):
        export_merged.main(['-opt', opt, '--force_yml', 'network_h:backbone_init=demo', '--out', str(out)])
    with pytest.raises(ValueError, match='expected KEY:SUBKEY=VALUE'):
        export_merged.main(['-opt', opt, '--force_yml', 'network_g:backbone_init', '--out', str(out)])
    with pytest.raises(ValueError, match='adapts the demo backbone; set network_g:backbone_init=demo'):
        export_merged.main(
            ['-opt', opt, '--force_yml', 'network_g:backbone_init=random', '--checkpoint', 'demo', '--out',
             str(out)])
    monkeypatch.chdir(tmp_path)  # no checkpoints/ here: the official backbone is missing, the demo route is named
    with pytest.raises(
            FileNotFoundError, match="DiffTSR checkpoint not found at 'checkpoints/DiffTSR.ckpt'.*"
            '--force_yml network_g:backbone_init=demo'):
        export_merged.main(['-opt', opt, '--checkpoint', 'net_g_latest.pth', '--out', str(out)])
