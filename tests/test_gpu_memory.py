"""Training memory: gradient checkpointing of the IDM and the VAE encoder/decoder gives the plain gradients,
gradient accumulation of k micro-batches of b gives the gradients of one batch of k·b (both in float64: equal in
exact arithmetic), and the meta-device estimator (tools/estimate_memory.py) is linear in the batch."""
import json
import os
import sys

import pytest
import torch
import torch.nn.functional as F
import yaml

from basicsr.data import build_dataset
from basicsr.models import build_model

from tola_plugin.archs.tola_adaptation import CHECKPOINTABLE
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.commands import estimate_memory as E
from tola_plugin.models import memory_estimate as M
from tola_plugin.utils.cli_errors import UsageError
from numerics import equivalent
from tola_testing import REPO, load_yaml, one_thread, tiny_backbone, tiny_net_opt, tiny_options  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')
SIZE = (32, 128)


def trainable_grads(net):
    return torch.cat([p.grad.flatten() for p in net.parameters() if p.requires_grad])


@pytest.fixture(scope='module')
def tiny_double_net():
    torch.manual_seed(0)
    return TOLANet(**tiny_net_opt()).double()


@pytest.mark.numerics
@pytest.mark.parametrize('parts', [('idm', ), ('vae_encoder', ), ('vae_decoder', ), CHECKPOINTABLE],
                         ids=lambda p: '+'.join(p))
def test_checkpointed_gradients_equal_plain_ones(tiny_double_net, parts):
    net = tiny_double_net
    lq = torch.rand(2, 3, *SIZE, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    target = torch.rand(2, 3, *SIZE, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    stages = {net.vae.encoder: 'vae_encoder', net.idm: 'idm', net.vae.decoder: 'vae_decoder'}

    def run():
        net.zero_grad(set_to_none=True)
        counter = M.SavedTensors(stages, M.parameter_storages(net))
        with counter():
            loss = F.l1_loss(net(lq, noise_seeds=[3, 4]), target)
        loss.backward()
        return trainable_grads(net), counter.by_stage

    plain, kept = run()
    net.set_gradient_checkpointing(parts)
    try:
        checkpointed, kept_checkpointed = run()
    finally:
        net.set_gradient_checkpointing(())
    for part in CHECKPOINTABLE:  # the chosen parts keep (almost) nothing for the backward pass, the others all
        if part in parts:
            assert kept_checkpointed.get(part, 0) < kept[part] / 4, part
        else:
            assert kept_checkpointed[part] == kept[part], part
    equivalent(checkpointed, plain, 'checkpointed vs plain gradients')


def test_gradient_checkpointing_option_is_checked():
    for bad in (['unet'], 'idm', ['idm', 'idm']):
        with pytest.raises(ValueError, match='gradient_checkpointing'):
            TOLANet(**tiny_net_opt(gradient_checkpointing=bad))


def _train_opt(tmp_path, rendered, batch):
    opt = tiny_options(load_yaml(os.path.join(REPO, 'options/train/train_TOLA.yml')), rendered, tmp_path)
    opt['train'].pop('warmup_iter', None)
    opt['datasets']['train']['batch_size_per_gpu'] = batch
    return opt


def _batch(dataset, n):
    items = [dataset[i] for i in range(n)]
    batch = {k: torch.stack([it[k] for it in items]) for k in items[0] if torch.is_tensor(items[0][k])}
    for key in ('lq', 'gt'):
        batch[key] = F.interpolate(batch[key], size=SIZE, mode='area').double()
    return batch


@pytest.mark.numerics
def test_accumulated_micro_batches_equal_one_batch(tmp_path, rendered_sets, monkeypatch):
    """k = 2 and 4 micro-batches of a batch of 4 give the batch's gradients and losses: L1 and LPIPS weighted by
    the micro-batch's share, the OCR CE divided by the whole batch's token count (the lines differ in length)."""
    opt = _train_opt(tmp_path, rendered_sets, batch=4)
    opt['train']['perceptual_opt'].update(pretrained_backbone=False)
    model = build_model(opt)
    model.net_g.double()
    model.cri_perceptual.double()
    model.grad_clip_norm = None
    model.optimizer_g.step = lambda: None  # keep the gradients
    # ε as a function of the sample, so a micro-batch draws the same noise as the whole batch (the RNG's split
    # into calls is not what is tested)
    monkeypatch.setattr(TOLANet, 'draw_noise', lambda self, z_lr, seeds=None: torch.sin(37.0 * z_lr + 1.0))
    batch = _batch(build_dataset(opt['datasets']['train']), 4)
    tokens = (batch['ocr_target'] != -100).sum(1)
    assert len(set(tokens.tolist())) > 1  # unequal token counts: a per-micro-batch mean would differ
    results = {}
    for k in (1, 2, 4):
        model.accumulate_grad_batches = k
        model.feed_data(batch)
        model.optimize_parameters(1)
        results[k] = trainable_grads(model.net_g), dict(model.log_dict)
    for k in (2, 4):
        equivalent(results[k][0], results[1][0], f'gradients of {k} micro-batches vs one batch')
        for name, value in results[1][1].items():
            # log_dict holds .item() floats of float64 losses
            ours, ref = (torch.tensor(v, dtype=torch.float64) for v in (results[k][1][name], value))
            equivalent(ours, ref, f'{name} of {k} micro-batches')


def test_accumulation_must_divide_the_batch(tmp_path, rendered_sets):
    opt = _train_opt(tmp_path, rendered_sets, batch=4)
    opt['train'].pop('perceptual_opt')
    opt['train']['accumulate_grad_batches'] = 3
    with pytest.raises(ValueError, match='accumulate_grad_batches: expected a positive integer dividing .*\\(4\\)'):
        build_model(opt)


def tiny_training_options():
    opt = load_yaml(os.path.join(REPO, 'options/train/train_TOLA.yml'))
    opt['network_g'].update(tiny_backbone())
    return opt


def test_estimator_is_linear_in_the_batch():
    opt = tiny_training_options()
    net, losses = M.meta_network(opt['network_g']), M.meta_losses(opt['train'])
    assert set(losses) == {'pixel_opt', 'perceptual_opt', 'ocr_opt'}
    saved = [M.saved_activations(net, losses, SIZE, b) for b in (1, 2, 3)]
    assert set(saved[0]) >= {'VAE encoder', 'IDM', 'LRC', 'VAE decoder', 'LPIPS-VGG', 'TransOCR CE'}
    for stage in saved[0]:  # a fixed part (position tables, ...) plus b times one sample's tensors
        assert saved[2][stage] - saved[1][stage] == saved[1][stage] - saved[0][stage] > 0, stage
    peaks = [M.peak_training(net, losses, SIZE, b) for b in (1, 2, 3)]
    assert peaks[2] - peaks[1] == peaks[1] - peaks[0] > 0  # a fixed part plus b x per sample
    every = [M.peak_training(net, losses, SIZE, b, CHECKPOINTABLE) for b in (1, 2)]
    every = every[1] - every[0]
    assert 0 < every < peaks[1] - peaks[0]  # checkpointing everything needs less per sample
    inference = [M.peak_inference(net, SIZE, b) for b in (1, 2, 3)]
    assert inference[2] - inference[1] == inference[1] - inference[0] > 0
    assert E.largest_batch(fixed=2 * E.GIB, per_sample=E.GIB, capacity_gib=10, reserve=0.1) == 7
    assert E.largest_batch(fixed=20 * E.GIB, per_sample=E.GIB, capacity_gib=10) == 0


@pytest.mark.end_to_end  # the tool's whole run; the estimator: the tests above
def test_estimate_memory_tool(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(E, 'checkpoint_choices', lambda: [(), ('vae_decoder', )])  # two of the eight: time
    sys.path.insert(0, os.path.join(REPO, 'tools'))
    try:
        import estimate_memory
    finally:
        sys.path.pop(0)
    opt_file = tmp_path / 'tiny.yml'
    opt_file.write_text(yaml.safe_dump(tiny_training_options()))
    out = tmp_path / 'memory.json'
    assert estimate_memory.main(
        ['-opt', str(opt_file), '--size', '32', '128', '--capacities', '1', '2', '--json',
         str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r['gradient_checkpointing'] for r in result['training']] == [list(c) for c in E.checkpoint_choices()]
    for row in result['training'] + [result['inference']]:
        assert row['per_sample_bytes'] == row['peak_batch2_bytes'] - row['peak_batch1_bytes'] > 0
        assert len(row['largest_batch']) == 2 and row['largest_batch'][0] <= row['largest_batch'][1]
    printed = capsys.readouterr().out
    assert '| training, none |' in printed and '| training, [vae_decoder] |' in printed
    with pytest.raises(UsageError, match='multiples of 8'):
        estimate_memory.main(['-opt', str(opt_file), '--size', '30', '128'])
