"""TOLAModel through BasicSR on a tiny random backbone: one optimizer step, checkpoints, resume, validation,
and every option file (ablations, real run, demo) building and running one iteration."""
import glob
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from basicsr.data import build_dataset
from basicsr.models import build_model

import tola_plugin  # noqa: F401
from numerics import within
from tola_testing import REPO, load_yaml, one_thread, tiny_options  # noqa: F401

SMALL = (32, 128)  # batches are shrunk from the 128x512 canvas to keep one iteration ~1 s on CPU

pytestmark = pytest.mark.usefixtures('one_thread')

_LPIPS_CACHE = {}


@pytest.fixture(autouse=True)
def shared_lpips(monkeypatch):
    """Build the (random-trunk) LPIPS network once for the module instead of once per model (VGG16's
    construction dominates a tiny iteration)."""
    import lpips
    real = lpips.LPIPS

    def cached(**kwargs):
        key = tuple(sorted(kwargs.items()))
        if key not in _LPIPS_CACHE:
            _LPIPS_CACHE[key] = real(**kwargs)
        return _LPIPS_CACHE[key]

    monkeypatch.setattr(lpips, 'LPIPS', cached)
    yield


def small_batch(dataset, n=2):
    """First ``n`` items collated, images shrunk to SMALL (texts and tokens unchanged)."""
    items = [dataset[i] for i in range(n)]
    batch = {}
    for key in items[0]:
        values = [it[key] for it in items]
        batch[key] = torch.stack(values) if torch.is_tensor(values[0]) else values
    for key in ('lq', 'gt'):
        if key in batch:
            batch[key] = F.interpolate(batch[key], size=SMALL, mode='area')
    return batch


def train_opt(tmp_path, rendered, path='options/train/train_TOLA.yml'):
    opt = tiny_options(load_yaml(os.path.join(REPO, path)), rendered, tmp_path)
    opt['train'].pop('warmup_iter', None)
    return opt


def snapshot(net):
    return {k: v.detach().clone() for k, v in net.state_dict().items()}


def test_one_step_changes_only_lora_and_lrc(tmp_path, rendered_sets):
    opt = train_opt(tmp_path, rendered_sets)
    model = build_model(opt)
    net = model.bare_net
    n_opt = sum(p.numel() for g in model.optimizer_g.param_groups for p in g['params'])
    assert n_opt == net.trainable_parameter_counts()['total']
    assert model.optimizer_g.defaults['lr'] == 5e-5 and model.optimizer_g.defaults['weight_decay'] == 0.01
    assert model.optimizer_g.defaults['betas'] == (0.9, 0.999) and type(model.optimizer_g) is torch.optim.AdamW
    before = snapshot(net)
    model.feed_data(small_batch(build_dataset(opt['datasets']['train'])))
    model.optimize_parameters(1)
    assert set(model.log_dict) == {'l_pix', 'l_lpips', 'l_ocr'}
    after = snapshot(net)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    frozen = [k for k in before if not ('.lora_' in k or k.startswith('lrc.'))]
    assert frozen and all(torch.equal(before[k], after[k]) for k in frozen)  # bit-identical
    assert changed and all('.lora_' in k or k.startswith('lrc.') for k in changed)
    assert any(k.startswith('idm.') and '.lora_B.' in k for k in changed)
    assert any(k.startswith('vae.') and '.lora_B.' in k for k in changed)
    assert 'lrc.conv_out.weight' in changed


def test_real_run_has_the_papers_training_configuration():
    """options/train/train_TOLA.yml carries the paper's Implementation Details / Table S4 numbers."""
    opt = load_yaml(os.path.join(REPO, 'options/train/train_TOLA.yml'))
    train, net = opt['train'], opt['network_g']
    assert (train['total_iter'], train['warmup_iter'], train['grad_clip_norm']) == (100_000, 500, 1.0)
    assert opt['datasets']['train']['batch_size_per_gpu'] == 16
    assert train['optim_g'] == {'type': 'AdamW', 'lr': 5e-5, 'betas': [0.9, 0.999], 'weight_decay': 0.01}
    assert train['scheduler']['milestones'] == [] and train.get('ema_decay', 0) == 0
    weights = {k: (train[k]['type'], train[k]['loss_weight']) for k in ('pixel_opt', 'perceptual_opt', 'ocr_opt')}
    assert weights == {
        'pixel_opt': ('L1Loss', 1.0), 'perceptual_opt': ('LPIPSLoss', 1.0), 'ocr_opt': ('OCRCELoss', 0.02)
    }
    assert train['perceptual_opt']['net'] == 'vgg' and train['perceptual_opt'].get('pretrained_backbone', True)
    assert (net['timestep'], net['latent'], net['lora_rank'], net['lora_alpha']) == (999, 'mode', 4, 4)
    assert net['lrc'] == {'type': 'LatentResidualCorrection', 'num_feat': 32, 'num_grow_ch': 16, 'num_block': 1}


@pytest.mark.numerics
def test_gradients_are_clipped_to_norm_one(tmp_path, rendered_sets):
    opt = train_opt(tmp_path, rendered_sets)
    model = build_model(opt)
    assert model.grad_clip_norm == 1.0
    params = model.optimizer_g.param_groups[0]['params']
    model.optimizer_g.step = lambda: None  # keep the clipped gradients for inspection
    model.feed_data(small_batch(build_dataset(opt['datasets']['train'])))
    for p in params:  # huge gradients from a scaled loss would exceed the clip norm
        p.register_hook(lambda g: g * 1e6)
    model.optimize_parameters(1)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
    # clip_grad_norm_ scales by 1 / (norm + 1e-6) with float32 norms: measured 1.8e-7 off 1, tolerance 1e-4 (the
    # 1e-6 in the scale is 1e-12 relative here; float32 norms of ~1e4 terms round to ~1e-6)
    within(abs(float(total) - 1.0), 1e-4, 'clipped gradient norm')


def test_warmup_reaches_the_base_lr(tmp_path, rendered_sets):
    opt = train_opt(tmp_path, rendered_sets)
    model = build_model(opt)
    lrs = []
    for it in range(1, 7):
        model.update_learning_rate(it, warmup_iter=4)
        lrs.append(model.optimizer_g.param_groups[0]['lr'])
    assert lrs == pytest.approx([5e-5 / 4, 5e-5 / 2, 5e-5 * 3 / 4, 5e-5, 5e-5, 5e-5])


def test_checkpoint_resume_and_pretrained_load(tmp_path, rendered_sets):
    opt = train_opt(tmp_path, rendered_sets)
    model = build_model(opt)
    model.feed_data(small_batch(build_dataset(opt['datasets']['train'])))
    model.optimize_parameters(1)
    model.update_learning_rate(2, warmup_iter=4)  # steps the scheduler and sets a warm-up lr a fresh model lacks
    model.save(epoch=0, current_iter=1)
    saved = torch.load(tmp_path / 'net_g_1.pth', weights_only=True)
    assert list(saved) == ['params', 'tola_adaptation']  # the state and the settings it was trained with
    assert saved['tola_adaptation'] == model.bare_net.adaptation_config()
    state = model.bare_net.adaptation_state_dict()
    assert set(saved['params']) == set(state)  # exactly the adaptation state, nothing frozen
    assert sum(v.numel() for v in saved['params'].values()) == model.bare_net.trainable_parameter_counts()['total']
    assert all(torch.equal(saved['params'][k], state[k]) for k in state)
    resume_state = torch.load(tmp_path / '1.state', weights_only=True)

    opt2 = train_opt(tmp_path, rendered_sets)
    opt2['path']['pretrain_network_g'] = str(tmp_path / 'net_g_1.pth')
    model2 = build_model(opt2)
    model2.resume_training(resume_state)
    assert all(torch.equal(v, state[k]) for k, v in model2.bare_net.adaptation_state_dict().items())
    o1, o2 = model.optimizer_g.state_dict(), model2.optimizer_g.state_dict()
    assert o1['param_groups'] == o2['param_groups']
    assert all(torch.equal(o1['state'][i]['exp_avg'], o2['state'][i]['exp_avg']) for i in o1['state'])
    assert model2.schedulers[0].state_dict() == model.schedulers[0].state_dict()
    assert model2.schedulers[0].last_epoch == 1 and o2['param_groups'][0]['lr'] == pytest.approx(5e-5 / 2)

    opt3 = train_opt(tmp_path, rendered_sets)
    opt3['path']['pretrain_network_g'] = str(tmp_path / 'missing.pth')
    with pytest.raises(FileNotFoundError, match='missing.pth'):
        build_model(opt3)


def test_validation_reports_image_and_ocr_metrics(tmp_path, rendered_sets):
    from basicsr.data import build_dataloader
    opt = tiny_options(load_yaml(os.path.join(REPO, 'options/test/test_TOLA.yml')), rendered_sets, tmp_path)
    opt['path'].pop('pretrain_network_g', None)
    opt['val']['save_img'] = True
    model = build_model(opt)
    ds_opt = opt['datasets']['test_1']
    loader = build_dataloader(build_dataset(ds_opt), ds_opt, num_gpu=0, dist=False)
    model.validation(loader, current_iter='t', tb_logger=None, save_img=True)
    assert set(model.metric_results) == {'psnr', 'ssim'}
    assert set(model.ocr_metric_results) == {'ocr_acc', 'ocr_ned'}
    assert len(glob.glob(str(tmp_path / ds_opt['name'] / '*.png'))) == 2


def test_a_nonfinite_output_is_never_saved(tmp_path, rendered_sets, monkeypatch):
    """BasicSR's validation saves what ``test`` leaves in ``self.output``: a non-finite output is an error naming the
    images, and nothing is written."""
    from basicsr.data import build_dataloader
    opt = tiny_options(load_yaml(os.path.join(REPO, 'options/test/test_TOLA.yml')), rendered_sets, tmp_path)
    opt['path'].pop('pretrain_network_g', None)
    model = build_model(opt)
    real = model.bare_net.forward
    monkeypatch.setattr(model.bare_net, 'forward', lambda *a, **k: real(*a, **k) * float('nan'))
    ds_opt = opt['datasets']['test_1']
    loader = build_dataloader(build_dataset(ds_opt), ds_opt, num_gpu=0, dist=False)
    with pytest.raises(FloatingPointError, match=r'non-finite pixels .*000001\.png.*nothing written'):
        model.validation(loader, current_iter='t', tb_logger=None, save_img=True)
    assert glob.glob(str(tmp_path / '**' / '*.png'), recursive=True) == []


def _option_files():
    files = sorted(glob.glob(os.path.join(REPO, 'options', 'ablations', '*.yml')))
    return files + [
        os.path.join(REPO, p) for p in ('options/train/train_TOLA.yml', 'options/test/test_TOLA.yml',
                                        'options/demo/train_TOLA_demo.yml', 'options/demo/test_TOLA_demo.yml')
    ]


def test_ablation_files_are_generated_and_complete(capsys):
    sys.path.insert(0, os.path.join(REPO, 'tools'))
    try:
        import make_tola_ablations
    finally:
        sys.path.pop(0)
    assert make_tola_ablations.main(['--check']) == 0, capsys.readouterr().err
    names = {os.path.basename(p)[:-4] for p in glob.glob(os.path.join(REPO, 'options', 'ablations', '*.yml'))}
    expected = {
        'frozen_one_step', 'lrc_only', 'lora_only', 'full', 'plain_residual', 'no_mom', 'direct_tokens',
        'idm_lora_only', 'vae_lora_only', 'rank2', 'rank4', 'rank8', 'lrc_small', 'lrc_default', 'lrc_large', 'no_l1',
        'no_lpips', 'ocr_w0', 'ocr_w002', 'ocr_w005', 'train_t899', 'train_t949', 'train_t999'
    }
    controls = {
        'frozen_one_step', 'null_context', 'uniform_confidence', 'gt_prior', 'vae_lora_off', 'infer_t899', 'infer_t949',
        'infer_t999', 'eps_zero'
    }
    assert {f'train_{v}' for v in expected - {'frozen_one_step'}} <= names
    assert {f'test_{v}' for v in expected | controls} <= names
    for path in glob.glob(os.path.join(REPO, 'options', 'ablations', 'test_*.yml')):
        name = os.path.basename(path)[5:-4]
        train_path = os.path.join(REPO, 'options', 'ablations', f'train_{name}.yml')
        if os.path.isfile(train_path):  # a trained variant is evaluated with its own network switches
            assert load_yaml(path)['network_g'] == load_yaml(train_path)['network_g']
        assert 'Paper: ' in open(path, encoding='utf-8').readline()


def _covered_by_its_train_file(path):
    """A trained variant's test file has its train file's network (asserted above); that one runs below."""
    name = os.path.basename(path)
    return (os.path.basename(os.path.dirname(path)) == 'ablations' and name.startswith('test_')
            and os.path.isfile(os.path.join(os.path.dirname(path), 'train_' + name[len('test_'):])))


@pytest.mark.parametrize('path', [p for p in _option_files() if not _covered_by_its_train_file(p)],
                         ids=lambda p: os.path.relpath(p, REPO))
def test_option_file_builds_and_runs_one_iteration(path, tmp_path, rendered_sets):
    opt = tiny_options(load_yaml(path), rendered_sets, tmp_path)
    if opt['is_train']:
        model = build_model(opt)
        model.feed_data(small_batch(build_dataset(opt['datasets']['train'])))
        model.optimize_parameters(1)
        assert all(torch.isfinite(torch.as_tensor(v)) for v in model.log_dict.values())
    else:
        opt['path'].pop('pretrain_network_g', None)  # the adaptation checkpoint of a real run is not here
        model = build_model(opt)
        dataset = build_dataset(next(iter(opt['datasets'].values())))
        model.feed_data(small_batch(dataset, n=1))
        model.test()
        assert model.output.shape == (1, 3) + SMALL
