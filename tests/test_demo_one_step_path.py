"""The exact one-step path of the demo IDM (tola_lab/demo/one_step_path.py): after it is written the t = 999 step
gives ẑ0 = s·z_LR (to the bound the construction derives), it stays exact under training while the rest learns, it is
not written twice, and the backbone tool trains and installs an IDM that carries it (``--only idm``, ``--idm-run``)."""
import json
import os
import shutil
import sys

import pytest
import torch
from safetensors.torch import load_file
from test_eval_recognizers import cjk_font

from tola_lab.demo import one_step_path
from tola_lab.demo.one_step_path import FixedPath, K, graft, is_grafted
from tola_plugin.archs.backbone_builder import save_converted
from tola_plugin.archs.diffusion_schedule import make_ldm_scheduler
from tola_plugin.archs.idm_unet_arch import DiffTSRIDMUNet
from tola_plugin.archs.vae_arch import LATENT_SCALE, DiffTSRVAE
from tola_plugin.checkpoints.demo_backbone import DIFFTSR_FILE, demo_checkpoint_paths
from conftest import write_options
from tola_testing import REPO, load_yaml, one_thread  # noqa: F401  (fixture)

SMALL = dict(
    block_out_channels=(16, 16), layers_per_block=1, attention_levels=(False, True), attention_heads=2,
    cross_attention_dim=16, norm_num_groups=4)  # 4 channels a group at level 0


def _idm(seed=0, **changes):
    torch.manual_seed(seed)
    return DiffTSRIDMUNet(**dict(SMALL, **changes))


def _one_step(idm, z_lr, eps, context):
    """TOLA's step 5-6 (archs/tola_arch.py) in the IDM's dtype: z_t = √ᾱ z_LR + √(1−ᾱ) ε, ẑ0 = (z_t − √(1−ᾱ) ε̂)/√ᾱ."""
    alpha_bar = make_ldm_scheduler('ddpm').alphas_cumprod[999].double()
    s0, s1 = float(alpha_bar.sqrt()), float((1 - alpha_bar).sqrt())
    z_t = s0 * z_lr + s1 * eps
    eps_hat = idm(torch.cat([z_t, z_lr], 1), torch.full((z_lr.shape[0], ), 999), context)
    return (z_t - s1 * eps_hat) / s0, (z_t - s0 * LATENT_SCALE * z_lr) / s1


def _inputs(dtype=torch.float64):
    g = torch.Generator().manual_seed(3)
    z_lr = torch.randn(2, 3, 16, 32, generator=g, dtype=dtype) / LATENT_SCALE  # unscaled: HR-like std 1 / 0.18215
    eps = torch.randn(2, 3, 16, 32, generator=g, dtype=dtype)
    return z_lr, eps, torch.randn(2, 4, 16, generator=g, dtype=dtype)


def test_the_path_makes_the_one_step_latent_the_scaled_lr_latent():
    """In float64, so only the construction's own error remains: the GroupNorm returns u·(1 − q/2K²) (q = mean u²)
    (SiLU(u) − SiLU(−u) = u exactly), times √(1−ᾱ)/√ᾱ = 101.6 in ẑ0."""
    z_lr, eps, context = _inputs()
    idm = _idm().double().eval()
    with torch.no_grad():
        before, _ = _one_step(idm, z_lr, eps, context)
        assert graft(idm)
        z0, u = _one_step(idm, z_lr, eps, context)
    target = LATENT_SCALE * z_lr
    bound = 101.6 * (u**2).mean(dim=(2, 3)).max() / (2 * K**2) * u.abs().max()
    assert (z0 - target).abs().max() <= 1.5 * bound < 0.05
    assert (before - target).abs().mean() > 10 * (z0 - target).abs().mean()  # what the path changes
    assert is_grafted(idm) and not is_grafted(_idm().double())


def test_the_path_stays_exact_under_training_while_the_rest_learns(one_thread):  # noqa: F811
    z_lr, eps, context = _inputs(torch.float32)
    idm = _idm().train()
    graft(idm)
    fixed, start = FixedPath(idm), {k: v.clone() for k, v in idm.state_dict().items()}
    optimizer = torch.optim.AdamW(idm.parameters(), lr=1e-3, weight_decay=0.01)
    target = LATENT_SCALE * z_lr + 0.1 * torch.randn_like(z_lr)
    for _ in range(3):
        z0, _ = _one_step(idm, z_lr, eps, context)
        optimizer.zero_grad()
        (z0 - target).abs().mean().backward()
        optimizer.step()
        assert not is_grafted(idm)  # the step moves the path's weights ...
        fixed.restore()
        assert is_grafted(idm)  # ... and restore() puts them back
    learnt = idm.conv_out.weight[:, 12:]  # the channels outside the path, zero after the graft
    assert learnt.abs().max() > 0 and not torch.equal(idm.conv_in.weight[3:], start['conv_in.weight'][3:])


def test_an_idm_that_holds_the_path_is_not_written_again():
    idm = _idm()
    assert graft(idm)
    with torch.no_grad():
        idm.conv_out.weight[:, 14] += 0.5  # what training learnt outside the path
        idm.conv_in.weight[0, 0, 1, 1] += 1e-5  # float16 storage's rounding of the path (1.00005 -> 1)
    kept = idm.conv_out.weight.clone()
    assert not graft(idm)
    assert torch.equal(idm.conv_out.weight, kept)


def test_an_idm_without_groups_of_four_at_the_output_is_refused():
    with pytest.raises(ValueError, match=r'groups of 4 channels.*norm_num_groups.*16 channels in 8 groups'):
        graft(_idm(norm_num_groups=8))


def test_train_idm_refuses_the_path_with_other_timesteps():
    from tola_lab.demo.training_stages import train_idm
    with pytest.raises(ValueError, match=r'one_step_fraction 1\), got one_step_fraction 0.5'):
        train_idm(_idm(), None, None, None, 1, 2, 1e-4, one_step_fraction=0.5, one_step_path=True)


def _options(tmp_path):
    options = load_yaml(os.path.join(REPO, 'tests', 'data', 'demo_backbone', 'tiny_backbone.yml'))
    options['data']['fonts'] = [cjk_font()]
    options['work_dir'] = str(tmp_path / 'work')
    options['idm'].update(one_step_path=True, one_step_fraction=1, iterations=2)
    options['idm']['config'].update(block_out_channels=[16, 16, 16], norm_num_groups=4)
    return options


def test_only_idm_trains_the_path_on_the_init_vae_and_installs_it(tmp_path, one_thread, capsys):  # noqa: F811
    from tola_lab.demo.shipping import install_backbone, install_stage, to_float16
    from tola_lab.demo.training import train_demo_backbone as train
    options = _options(tmp_path)
    opt = write_options(tmp_path / 'idm.yml', options)
    init = tmp_path / 'init'
    init.mkdir()
    with pytest.raises(FileNotFoundError, match=r'--only idm encodes with a trained VAE.*vae\.safetensors'):
        train(opt, only='idm', init_dir=str(init))
    torch.manual_seed(0)
    save_converted({'vae': DiffTSRVAE(**options['vae']['config'])}, str(init / 'vae.safetensors'))
    sys.path.insert(0, os.path.join(REPO, 'tools'))
    import train_demo_backbone  # the docs' command line (docs/demo_backbone.md, "The one-step path")
    assert train_demo_backbone.main(['-opt', opt, '--only', 'idm', '--init-dir', str(init), '--deadline', '4500']) == 0
    log = capsys.readouterr().out
    assert 'the exact t = 999 path written' in log and '--only idm: done' in log and 'vae:' not in log
    assert not os.path.exists(tmp_path / 'work' / 'transocr.safetensors')
    from tola_plugin.archs.backbone_builder import load_difftsr
    idm = load_difftsr(
        str(tmp_path / 'work' / 'idm.safetensors'), ('idm', ), configs={'idm': options['idm']['config']})['idm']
    assert is_grafted(idm)
    # installed beside a backbone's VAE: the IDM in float32, the rest float16, the frozen one step measured
    folder = tmp_path / 'shipped'
    shutil.copytree(os.path.dirname(demo_checkpoint_paths()[0]), folder)
    small_vae = load_difftsr(str(init / 'vae.safetensors'), ('vae', ))['vae']
    save_converted({'vae': small_vae}, str(folder / DIFFTSR_FILE))  # a backbone file with the tiny run's VAE
    with pytest.raises(ValueError, match=r"stage 'vae'.*moves the latent the IDM was trained in"):
        install_stage('vae', opt, 'cmd', str(folder))
    record = install_stage('idm', opt, 'cmd', str(folder))
    stored = load_file(str(folder / DIFFTSR_FILE))
    assert all(v.dtype == (torch.float32 if k.startswith('idm.') else torch.float16) for k, v in stored.items()
               if v.is_floating_point())
    assert torch.equal(stored['vae.encoder.conv_in.weight'], small_vae.encoder.conv_in.weight.half())
    assert record['iterations_done'] == 2 and record['command'] == 'cmd'
    assert set(record['held_out_one_step']) >= {'psnr_lr', 'psnr_one_step'}
    manifest = json.loads((folder / 'manifest.json').read_text(encoding='utf-8'))
    assert manifest['continued']['idm'] == record
    # a backbone packed in float16 (the GPU check's demo_model step) installed: the path written exactly again
    state = tmp_path / 'state'
    state.mkdir()
    for name, src in (('vae', init / 'vae.safetensors'), ('idm', tmp_path / 'work' / 'idm.safetensors'),
                      ('transocr', demo_checkpoint_paths()[1])):
        to_float16(str(src), str(state / f'{name}.safetensors'))
    (state / 'stages.json').write_text(json.dumps({s: {'iterations_done': 1} for s in ('vae', 'idm', 'transocr')}))
    install_backbone(str(state), str(folder))
    shipped = load_difftsr(str(folder / DIFFTSR_FILE), ('idm', ))['idm']
    assert load_file(str(folder / DIFFTSR_FILE))['idm.conv_in.weight'].dtype == torch.float32
    assert all(torch.equal(p[mask], values[mask]) for p, mask, values in FixedPath(shipped).targets)


def test_only_idm_refuses_text_priors_it_cannot_read(tmp_path):
    from tola_lab.demo.training import train_demo_backbone as train
    options = _options(tmp_path)
    options['idm']['text_probs'] = {'predicted': 0.5, 'gt': 0.5}
    init = tmp_path / 'init'
    init.mkdir()
    torch.manual_seed(0)
    save_converted({'vae': DiffTSRVAE(**options['vae']['config'])}, str(init / 'vae.safetensors'))
    with pytest.raises(ValueError, match=r"--only idm trains on ground-truth or empty text"):
        train(write_options(tmp_path / 'idm.yml', options), only='idm', init_dir=str(init))


@pytest.mark.parametrize('name', [
    'train_demo_backbone_one_step_path.yml', 'train_demo_backbone_one_step_path_on.yml', 'train_demo_backbone_gpu.yml'
])
def test_the_option_files_build_an_idm_the_path_fits(name):
    """The CPU runs of docs/demo_backbone.md and the GPU recipe: their IDM takes the path (graft's own check)."""
    idm = load_yaml(os.path.join(REPO, 'options', 'demo', name))['idm']
    assert idm['one_step_path'] is True and idm['one_step_fraction'] == 1 and one_step_path.T == 999
    assert graft(DiffTSRIDMUNet(**idm['config']))
