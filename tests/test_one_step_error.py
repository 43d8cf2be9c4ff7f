"""tools/one_step_error.py and its measurements (tola_lab/demo/one_step_error.py) on the tiny backbone."""
import json
import os
import sys

import numpy as np
import pytest
import torch

from tola_lab.demo.one_step_error import mean_over_batches, one_step_error
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.utils.cli_errors import run_tool
from conftest import write_options
from numerics import rel_err, within
from tola_testing import REPO, load_yaml, one_thread, tiny_backbone, tiny_net_opt  # noqa: F401  (fixture)

sys.path.insert(0, os.path.join(REPO, 'tools'))
import one_step_error as tool  # noqa: E402


def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(2, 3, 32, 64, generator=gen), torch.rand(2, 3, 32, 64, generator=gen)


@pytest.mark.numerics
def test_amplification_is_the_t999_schedule_ratio(one_thread):  # noqa: F811
    """The factor that multiplies the ε error in ẑ0 is √(1−ᾱ)/√ᾱ of the fixed timestep (~102 at t = 999)."""
    net = TOLANet(**tiny_net_opt()).eval()
    lq, gt = _batch()
    result = one_step_error(net, lq, gt)
    # LDM's 'linear' (diffusers' scaled_linear) schedule in float64, docs/backbone.md
    abar = float(np.prod(1 - np.linspace(0.0015**0.5, 0.0205**0.5, 1000)**2))
    reference = ((1 - abar) / abar)**0.5
    assert 101 < reference < 103
    # diffusers' float32 betas vs the float64 schedule: measured up to 7.7e-9 relative over the kernel sets;
    # 1e-6 allowed (130x)
    within(rel_err(result['amplification'], reference), 1e-6, 'amplification vs float64 schedule')


def test_noise_dependent_part_is_zero_without_noise_and_present_with_it(one_thread):  # noqa: F811
    lq, gt = _batch()
    gaussian = one_step_error(TOLANet(**tiny_net_opt()).eval(), lq, gt)
    zero = one_step_error(TOLANet(**tiny_net_opt(noise='zero')).eval(), lq, gt)
    assert gaussian['z0_between_draws_l1'] > 1.0  # random IDM: its ε error times ~102
    assert zero['z0_between_draws_l1'] == 0.0
    assert zero['eps_l1'] > 0 and 'z0_corr_l1' in zero


def test_lr_equal_to_hr_gives_zero_latent_error_and_equal_ceilings(one_thread):  # noqa: F811
    """With LoRA at its zero initialisation the network's encoder is the frozen one: z_LR = z_HR when LR = HR."""
    net = TOLANet(**dict(tiny_backbone(), lrc=None)).eval()
    lq, _ = _batch()
    result = one_step_error(net, lq, lq)
    assert result['z_lr_l1'] == 0.0
    assert result['psnr_vae_hr'] == result['psnr_vae_lr']
    assert 'z0_corr_l1' not in result  # no LRC


def test_mean_over_batches_weights_by_images():
    assert mean_over_batches([{'a': 1.0}, {'a': 4.0}], [1, 2]) == {'a': 3.0}


def test_tool_on_a_tiny_test_option_file(rendered_sets, tmp_path, one_thread, capsys):  # noqa: F811
    test = load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))
    test['network_g'].update(tiny_backbone())
    test['datasets']['test_1'].update(
        dataroot_gt=os.path.join(rendered_sets['val'], 'hr'), labels=os.path.join(rendered_sets['val'], 'labels.tsv'))
    opt_path = write_options(tmp_path / 'test.yml', test)
    out = tmp_path / 'one_step.json'
    with pytest.raises(SystemExit) as exit_info:  # the option file's checkpoint does not exist here
        run_tool(lambda: tool.main(['-opt', opt_path, '--checkpoint', str(tmp_path / 'missing.pth')]))
    assert exit_info.value.code == 2 and 'missing.pth' in capsys.readouterr().err
    assert tool.main(['-opt', opt_path, '--frozen', '--num', '1', '--batch', '1', '--out', str(out)]) == 0
    saved = json.loads(out.read_text(encoding='utf-8'))
    assert saved['lines'] == 1 and saved['frozen'] is True
    assert 'z0_corr_l1' not in saved and saved['amplification'] > 100
    assert 'one-step z0 error' in capsys.readouterr().out
