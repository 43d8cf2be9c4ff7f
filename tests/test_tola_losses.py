"""LPIPSLoss (local weights only) and OCRCELoss (teacher-forced CE through a frozen TransOCR)."""
import copy
import os

import pytest
import torch
import torch.nn.functional as F
import torchvision

from basicsr.losses import build_loss

import tola_plugin  # noqa: F401
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.losses.lpips_loss import VGG16_FILE
from tola_plugin.text.alphabets import TRANSOCR_END
from numerics import equivalent
from tola_testing import one_thread, tiny_net_opt  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


def test_lpips_missing_trunk_names_file_and_folder(tmp_path, monkeypatch):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        build_loss(dict(type='LPIPSLoss'))
    assert VGG16_FILE in str(err.value) and str(tmp_path / 'hub' / 'checkpoints') in str(err.value)


def test_lpips_loads_the_local_vgg16_file(tmp_path, monkeypatch):
    """A fake vgg16 file under the real cache name goes through torchvision's real loading code; it is tiny
    because every tensor is a broadcast view of one stored number."""
    folder = tmp_path / 'hub' / 'checkpoints'
    folder.mkdir(parents=True)
    with torch.device('meta'):
        shapes = {k: v.shape for k, v in torchvision.models.vgg16().state_dict().items()}
    fake = {k: torch.full((1, ), 0.01).expand(s) for k, s in shapes.items()}
    torch.save(fake, folder / VGG16_FILE)
    assert os.path.getsize(folder / VGG16_FILE) < 100_000
    monkeypatch.setenv('TORCH_HOME', str(tmp_path))
    loss = build_loss(dict(type='LPIPSLoss', loss_weight=2.0))
    first_conv = loss.lpips.net.slice1[0].weight
    assert torch.all(first_conv == 0.01) and not first_conv.requires_grad
    x = torch.rand(1, 3, 32, 64)
    value, style = loss(x, x)  # BasicSR's (perceptual, style) pair
    assert value.item() == 0.0 and style is None
    loss.train()
    assert not loss.lpips.training


def test_lpips_random_trunk_option_and_gradient():
    loss = build_loss(dict(type='LPIPSLoss', pretrained_backbone=False))
    pred = torch.rand(1, 3, 32, 64, requires_grad=True)
    value, _ = loss(pred, torch.rand(1, 3, 32, 64))
    value.backward()
    assert value.item() > 0 and pred.grad.abs().sum() > 0
    with pytest.raises(ValueError, match='vgg'):
        build_loss(dict(type='LPIPSLoss', net='alex', pretrained_backbone=False))


@pytest.fixture(scope='module')
def tiny_net():
    torch.manual_seed(0)
    return TOLANet(**tiny_net_opt())


@pytest.mark.numerics
def test_ocr_ce_is_token_cross_entropy_with_padding_ignored(tiny_net):
    recognizer = copy.deepcopy(tiny_net.transocr).double()  # the loss and the hand sum, equal in exact arithmetic
    images = torch.rand(2, 3, 32, 128, dtype=torch.float64)
    targets = torch.full((2, 25), -100, dtype=torch.long)
    targets[0, :3] = torch.tensor([5, 6, TRANSOCR_END])
    targets[1, :2] = torch.tensor([7, TRANSOCR_END])
    loss = build_loss(dict(type='OCRCELoss', loss_weight=0.02))
    value = loss(images, targets, recognizer)
    logits = recognizer(images, targets)
    manual = torch.cat([
        F.cross_entropy(logits[0, :3], targets[0, :3], reduction='none'),
        F.cross_entropy(logits[1, :2], targets[1, :2], reduction='none')
    ]).mean()
    equivalent(value, 0.02 * manual, 'OCR CE vs by hand')  # the same terms, reduced in another order
    recognizer.train()
    try:
        with pytest.raises(RuntimeError, match='eval mode'):
            loss(images, targets, recognizer)
    finally:
        recognizer.eval()
    with pytest.raises(ValueError, match='targets'):
        loss(images, targets[0], recognizer)


def test_ocr_loss_alone_gives_gradients_to_lora_and_lrc(tiny_net):
    """Gradients of the OCR loss reach LoRA (IDM and VAE) and the LRC through the restored image; the frozen
    recognizer itself gets none. At init LoRA-B and the LRC output conv are the ones with non-zero gradient
    (LoRA-A and the LRC body sit behind a zero factor)."""
    tiny_net.train()
    tiny_net.zero_grad()
    lq = torch.rand(2, 3, 32, 128)
    targets = torch.full((2, 25), -100, dtype=torch.long)
    targets[:, :3] = torch.tensor([5, 6, TRANSOCR_END])
    loss = build_loss(dict(type='OCRCELoss'))(tiny_net(lq, noise_seeds=[0, 1]), targets, tiny_net.transocr)
    loss.backward()
    grads = {n: p.grad for n, p in tiny_net.named_parameters() if p.requires_grad}
    idm_b = [g for n, g in grads.items() if n.startswith('idm.') and '.lora_B.' in n]
    vae_b = [g for n, g in grads.items() if n.startswith('vae.') and '.lora_B.' in n]
    assert idm_b and all(g is not None for g in idm_b) and sum(g.abs().sum() for g in idm_b) > 0
    assert vae_b and sum(g.abs().sum() for g in vae_b) > 0
    assert grads['lrc.conv_out.weight'].abs().sum() > 0
    assert all(p.grad is None for p in tiny_net.transocr.parameters())
