"""TOLA's parts in BasicSR's own models (README, "Writing an option file"; docs/baselines.md, "Text-aware baselines"):
LPIPSLoss as the perceptual_opt of SRModel and ESRGANModel, the OCR cross-entropy through TextSRModel /
TextESRGANModel, and the clear errors where a part does not fit (OCRCELoss as a pixel loss, a text dataset at its
TOLA defaults under a x4 network, OCR on square patches). Options are parsed by the launchers' parser, as a run's."""
import copy
import os
import sys

import pytest
import torch
import yaml

import basicsr.utils.options
from basicsr.data import build_dataset
from basicsr.models import build_model

from tola_plugin.models.text_sr_model import PixelWithOCR
from tola_plugin.utils import run_lock
from launcher_testing import TINY_NETWORKS
from tola_testing import REPO, load_yaml, one_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures('one_thread')
LPIPS = {'type': 'LPIPSLoss', 'loss_weight': 1.0, 'pretrained_backbone': False}  # the trunk's file: test_tola_losses
OCR = {'type': 'OCRCELoss', 'loss_weight': 0.02}


def baseline(name, rendered, **train):
    """options/baselines/<name> on the rendered lines (folders), tiny networks, 2 lines per batch, and ``train``
    entries replaced."""
    opt = load_yaml(os.path.join(REPO, 'options', 'baselines', name))
    for key in ('network_g', 'network_d'):
        if key in opt:
            opt[key].update(TINY_NETWORKS[opt[key]['type']])
    for phase, folder in (('train', 'train'), ('val', 'val')):
        ds = opt['datasets'][phase]
        ds.pop('index_list')
        ds.update(
            dataroot_gt=os.path.join(rendered[folder], 'hr'), labels=os.path.join(rendered[folder], 'labels.tsv'),
            io_backend={'type': 'disk'})
    opt['datasets']['train'].update(batch_size_per_gpu=2, num_worker_per_gpu=0)
    opt['num_gpu'] = 0
    opt['path']['pretrain_network_g'] = None
    opt['train'].update(train)
    return opt


def parse(opt, tmp_path, monkeypatch, is_train=True):
    """``opt`` written to a file and read by the launchers' parser (BasicSR's, with the plugin's start-up checks)."""
    path = tmp_path / 'options.yml'
    path.write_text(yaml.safe_dump(opt, sort_keys=False, allow_unicode=True), encoding='utf-8')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, 'argv', ['basicsr.train', '-opt', str(path)])
    try:
        parsed, _ = basicsr.utils.options.parse_options(str(tmp_path), is_train=is_train)
    finally:
        run_lock.release_all()
    return parsed


def one_step(opt):
    """Build the model and the training set of a parsed ``opt``, run one iteration; -> (model, its log_dict)."""
    torch.manual_seed(0)
    dataset = build_dataset(opt['datasets']['train'])
    batch = torch.utils.data.default_collate([dataset[0], dataset[1]])
    model = build_model(opt)
    before = [p.detach().clone() for p in model.net_g.parameters()]
    model.feed_data(batch)
    model.optimize_parameters(1)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.net_g.parameters()))  # the generator trained
    return model, model.log_dict


def test_lpips_loss_is_a_perceptual_opt_of_basicsr_srmodel(rendered_sets, tmp_path, monkeypatch):
    """BasicSR's SRModel unpacks (perceptual, style) from its perceptual loss: LPIPSLoss gives (LPIPS, None)."""
    opt = parse(baseline('train_RRDBNet_PSNR_x4.yml', rendered_sets, perceptual_opt=LPIPS), tmp_path, monkeypatch)
    model, log = one_step(opt)
    assert type(model).__name__ == 'SRModel' and set(log) == {'l_pix', 'l_percep'} and log['l_percep'] > 0


def test_text_aware_srmodel_adds_the_ocr_cross_entropy(rendered_sets, tmp_path, monkeypatch):
    """TextSRModel: BasicSR's SRModel step with TOLA's OCR CE (the demo backbone's TransOCR, frozen) in the
    generator's loss, logged beside the pixel and LPIPS terms; whole lines (no gt_size) at x4."""
    opt = baseline('train_RRDBNet_PSNR_x4.yml', rendered_sets, perceptual_opt=LPIPS, ocr_opt=OCR, ocr_recognizer='demo')
    opt['model_type'] = 'TextSRModel'
    del opt['datasets']['train']['gt_size']
    model, log = one_step(parse(opt, tmp_path, monkeypatch))
    assert set(log) == {'l_pix', 'l_percep', 'l_ocr'} and log['l_ocr'] > 0
    assert isinstance(model.cri_pix, PixelWithOCR) and not model.ocr_recognizer.training
    assert not any(p.requires_grad for p in model.ocr_recognizer.parameters())
    assert model.output.shape == (2, 3, 128, 512)  # the whole line restored x4: what the recognizer reads
    # the logged pixel term is the L1 alone: the pixel loss recomputed on the step's output matches it
    with torch.no_grad():
        l1 = model.cri_pix.pixel(model.output, model.gt).item()
        ocr = model.cri_pix.ocr(model.output, model.ocr_target, model.ocr_recognizer).item()
    assert log['l_pix'] == pytest.approx(l1, rel=1e-6) and log['l_ocr'] == pytest.approx(ocr, rel=1e-6)


def test_text_aware_esrgan_with_lpips_and_ocr(rendered_sets, tmp_path, monkeypatch):
    """options/baselines/train_TextESRGAN_x4.yml (tiny networks; LPIPS-VGG instead of the VGG19 loss whose ImageNet
    file is absent; the demo TransOCR): ESRGANModel's generator and discriminator step with the OCR CE."""
    opt = baseline('train_TextESRGAN_x4.yml', rendered_sets, perceptual_opt=LPIPS, ocr_recognizer='demo')
    model, log = one_step(parse(opt, tmp_path, monkeypatch))
    assert type(model).__name__ == 'TextESRGANModel'
    assert {'l_g_pix', 'l_g_percep', 'l_g_gan', 'l_ocr', 'l_d_real', 'l_d_fake'} <= set(log) and log['l_ocr'] > 0


def test_text_aware_option_files_are_the_stock_ones_plus_ocr_on_whole_lines():
    """train_TextSwinIR_x4.yml / train_TextESRGAN_x4.yml are train_SwinIR_x4.yml / train_ESRGAN_x4.yml with the
    text-aware model, ocr_opt (TOLA's weight 0.02), whole lines, and (ESRGAN) a discriminator of any input size."""
    for text, stock in (('train_TextSwinIR_x4.yml', 'train_SwinIR_x4.yml'), ('train_TextESRGAN_x4.yml',
                                                                             'train_ESRGAN_x4.yml')):
        a, b = (load_yaml(os.path.join(REPO, 'options', 'baselines', n)) for n in (text, stock))
        assert a['model_type'] == 'Text' + b['model_type'] and a['train'].pop('ocr_opt') == OCR
        assert a['train'].pop('ocr_recognizer') == 'checkpoints/transocr.pth' and a['train'] == b['train']
        assert 'gt_size' not in a['datasets']['train'] and b['datasets']['train'].pop('gt_size') == 128
        assert a['datasets'] == b['datasets'] and a['network_g'] == b['network_g'] and a['val'] == b['val']
    assert a['network_d']['type'] == 'UNetDiscriminatorSN_basicsr' and b['network_d']['type'] == 'VGGStyleDiscriminator'


def test_parts_that_do_not_fit_say_so(rendered_sets, tmp_path, monkeypatch):
    # OCRCELoss as BasicSR's pixel loss: it has no recognizer there
    opt = parse(baseline('train_RRDBNet_PSNR_x4.yml', rendered_sets, pixel_opt=OCR), tmp_path, monkeypatch)
    with pytest.raises(ValueError, match='OCRCELoss .* train.ocr_opt of TOLAModel or of TextSRModel'):
        one_step(opt)
    # a text dataset at its TOLA defaults (LR resized back to 128x512) under a x4 network: the two keys to set
    opt = baseline('train_RRDBNet_PSNR_x4.yml', rendered_sets)
    for key in ('scales', 'lq_size', 'gt_size'):
        del opt['datasets']['train'][key]
    with pytest.raises(ValueError, match=r'scale is 4 .*set scales: \[4\] and lq_size: native'):
        build_dataset(parse(opt, tmp_path, monkeypatch)['datasets']['train'])
    test = load_yaml(os.path.join(REPO, 'options', 'baselines', 'test_RRDBNet_PSNR_x4.yml'))['datasets']['test_1']
    test = dict(test, dataroot_lq=os.path.join(rendered_sets['val'],
                                               'lr_x4'), dataroot_gt=os.path.join(rendered_sets['val'], 'hr'),
                labels=os.path.join(rendered_sets['val'], 'labels.tsv'), phase='test', scale=4)
    del test['lq_size']
    with pytest.raises(ValueError, match='scale is 4 .*set lq_size: native'):
        build_dataset(test)
    # the OCR cross-entropy on square patches: the recognizer would read a piece of the line
    opt = baseline('train_RRDBNet_PSNR_x4.yml', rendered_sets, ocr_opt=OCR, ocr_recognizer='demo')
    opt['model_type'] = 'TextSRModel'
    with pytest.raises(ValueError, match='whole text lines.*remove gt_size'):
        build_model(parse(copy.deepcopy(opt), tmp_path, monkeypatch))
    # a typo under a text-aware model is an error naming the closest key
    opt['train']['ocr_recogniser'] = opt['train'].pop('ocr_recognizer')
    with pytest.raises(ValueError, match="ocr_recogniser.*did you mean 'ocr_recognizer'"):
        parse(opt, tmp_path, monkeypatch)


def test_missing_recognizer_of_the_ocr_loss_names_the_option_and_its_demo_value(rendered_sets, tmp_path, monkeypatch):
    """TextSRModel without checkpoints/transocr.pth (the default train.ocr_recognizer): the error names the file,
    where it comes from, train.ocr_recognizer, its demo value, and the override without the OCR loss."""
    opt = baseline('train_RRDBNet_PSNR_x4.yml', rendered_sets, ocr_opt=OCR)
    opt['model_type'] = 'TextSRModel'
    del opt['datasets']['train']['gt_size']
    with pytest.raises(FileNotFoundError) as err:
        build_model(parse(opt, tmp_path, monkeypatch))
    message = str(err.value)
    assert message.startswith('train.ocr_recognizer (the frozen TransOCR of train.ocr_opt): ')
    assert "'checkpoints/transocr.pth'" in message and 'DiffTSR release' in message
    assert '--force_yml train:ocr_recognizer=demo' in message and 'train:ocr_opt=~' in message
