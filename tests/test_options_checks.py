"""Problem 4 (issue "Nothing lost, nothing run, nothing silent"): wrong configurations are errors at start.

The launcher is run in this process (``tola_plugin.train.main`` with its command line), so each case costs
milliseconds: every check happens while the option file is parsed, before any model or data is built.
"""
import json
import os
import socket
import subprocess
import sys

import pytest
import torch
from reliability_testing import expect_error

import tola_plugin  # noqa: F401
from tola_plugin.archs.tola_arch import TOLANet
from tola_testing import REPO, load_yaml, one_thread, tiny_demo_options, tiny_net_opt  # noqa: F401


def demo_options(rendered):
    return tiny_demo_options(rendered, 'strict', total_iter=2, freq=2)


@pytest.mark.parametrize('total_iter', [-5, 0])
def test_non_positive_total_iter_is_refused_before_training(rendered_sets, tmp_path, monkeypatch, capsys, total_iter):
    opt = demo_options(rendered_sets)
    opt['train']['total_iter'] = total_iter
    expect_error(tmp_path, monkeypatch, capsys, opt, 'train.total_iter', str(total_iter), 'options.yml')
    assert not (tmp_path / 'experiments' / 'strict' / 'models').exists()  # no untrained net_g_latest.pth


@pytest.mark.parametrize('block,key,suggestion', [
    (('datasets', 'train'), 'chain_prob', 'chain_probs'),
    (('datasets', 'val'), 'seeed', 'seed'),
    (('train', ), 'grad_clip_nrom', 'grad_clip_norm'),
    (('train', 'pixel_opt'), 'loss_wieght', 'loss_weight'),
    (('network_g', ), 'lora_rnak', 'lora_rank'),
    (('network_g', 'lrc'), 'num_fet', 'num_feat'),
])
def test_misspelled_keys_name_the_key_and_the_closest_one(rendered_sets, tmp_path, monkeypatch, capsys, block, key,
                                                          suggestion):
    opt = demo_options(rendered_sets)
    target = opt
    for part in block:
        target = target[part]
    target[key] = 1
    expect_error(tmp_path, monkeypatch, capsys, opt, f'{".".join(block)}.{key}', f"did you mean '{suggestion}'")


def test_test_launcher_checks_its_option_file_too(tmp_path, monkeypatch, capsys):
    opt = load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))
    opt['datasets']['test_1']['resize_to_canvass'] = True
    expect_error(tmp_path, monkeypatch, capsys, opt, 'datasets.test_1.resize_to_canvass', 'resize_to_canvas',
                 module='test')


def test_more_gpus_than_present_is_refused_at_start(rendered_sets, tmp_path, monkeypatch, capsys):
    opt = demo_options(rendered_sets)
    opt['num_gpu'] = torch.cuda.device_count() + 1
    expect_error(tmp_path, monkeypatch, capsys, opt, 'num_gpu', f'{torch.cuda.device_count()} CUDA device')


def test_an_experiment_in_use_is_refused_and_a_stale_lock_is_replaced(rendered_sets, tmp_path, monkeypatch, capsys):
    from tola_plugin.utils import run_lock
    opt = demo_options(rendered_sets)
    folder = str(tmp_path / 'experiments' / 'strict')
    other = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3600)'])  # alive until killed below
    try:
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        with open(run_lock.lock_path(folder), 'w', encoding='utf-8') as f:
            json.dump(
                {
                    'pid': other.pid, 'host': socket.gethostname(), 'command': 'python -m tola_plugin.train',
                    'start_time': run_lock._start_time(other.pid)
                }, f)
        expect_error(tmp_path, monkeypatch, capsys, opt, f'PID {other.pid}', 'strict.lock')
    finally:
        other.kill()
        other.wait()
    warnings = []
    path = run_lock.acquire(folder, warnings.append)  # the owner is gone now: stale
    try:
        assert len(warnings) == 1 and 'stale' in warnings[0] and str(other.pid) in warnings[0]
        assert str(os.getpid()) in open(path, encoding='utf-8').read()
    finally:
        run_lock.release(path)
    assert not os.path.exists(path)


# ------------------------------------------------------------------------------------------ LoRA settings
@pytest.fixture(scope='module')
def trained_checkpoint(tmp_path_factory, one_thread):  # noqa: F811
    """An adaptation checkpoint written by TOLAModel.save_network for a rank-4, alpha-4 network."""
    from types import SimpleNamespace

    from tola_plugin.models.tola_model import TOLAModel
    folder = tmp_path_factory.mktemp('models')
    net = TOLANet(**tiny_net_opt(lora_alpha=4))
    saver = SimpleNamespace(opt={'path': {'models': str(folder)}}, get_bare_model=lambda n: n)
    TOLAModel.save_network(saver, net, 'net_g', 7)
    return str(folder / 'net_g_7.pth'), net


@pytest.mark.parametrize('override,option', [({'lora_alpha': 8}, 'lora_alpha'), ({'lora_rank': 2}, 'lora_rank'),
                                             ({'lrc': {'type': 'LatentResidualCorrection', 'num_feat': 16}}, 'lrc'),
                                             ({'vae_lora': False}, 'vae_lora')])
def test_checkpoint_settings_must_match_the_network(trained_checkpoint, override, option):
    path, _ = trained_checkpoint
    net = TOLANet(**tiny_net_opt(**override))
    with pytest.raises(ValueError) as err:
        net.load_adaptation_checkpoint(path)
    assert path in str(err.value) and option in str(err.value)


def test_matching_settings_load_and_restore_the_state(trained_checkpoint):
    path, trained = trained_checkpoint
    net = TOLANet(**tiny_net_opt(lora_alpha=None, lrc={'type': 'LatentResidualCorrection', 'num_feat': 32}))
    net.load_adaptation_checkpoint(path)  # alpha None = rank, explicit LRC defaults: the same settings
    expected = trained.adaptation_state_dict()
    assert all(torch.equal(v, expected[k]) for k, v in net.adaptation_state_dict().items())


def test_a_checkpoint_of_another_rank_without_settings_names_the_tensor(trained_checkpoint, tmp_path):
    """Files written before the settings were recorded: the shapes still give a clear error, not peft's raw
    'size mismatch'."""
    path, _ = trained_checkpoint
    old = str(tmp_path / 'old_format.pth')
    torch.save({'params': torch.load(path, weights_only=True)['params']}, old)
    with pytest.raises(ValueError, match=r'old_format\.pth.*lora_A.*shape'):
        TOLANet(**tiny_net_opt(lora_rank=2)).load_adaptation_checkpoint(old)


def test_contradictory_lora_options_are_refused():
    with pytest.raises(ValueError, match='vae_lora_active'):
        TOLANet(**tiny_net_opt(vae_lora=False, vae_lora_active=False))
    with pytest.raises(ValueError, match='lora_alpha'):
        TOLANet(**tiny_net_opt(lora_alpha=0))
