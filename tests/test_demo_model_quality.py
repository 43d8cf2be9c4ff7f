"""The demo model shipped with the package, run on held-out lines (not read from its record): what every first
contact with the project restores must keep doing it. ``make demo``'s first held-out lines (rendered with seed 1,
degraded x4 by the test option file's dataset, the test launcher's per-image noise) are restored by the shipped
backbone and adaptation, and scored against their references: PSNR (BT.601 Y, 8-bit, as the test launcher) and SSIM
of TOLA against the LR input; the shipped TransOCR (the text prior) reads the LR lines. Float32 rounding of one forward
pass moves these by far less than the margins."""
import os

import numpy as np
import pytest
import torch

from tola_plugin.archs.tola_arch import image_noise_seed
from tola_plugin.checkpoints.demo_backbone import demo_adaptation_record
from tola_plugin.data.image_io import tensor_to_uint8
from tola_plugin.data_preparation.rendered_lines import write_rendered_lines
from tola_plugin.metrics.image_metrics import psnr_y8
from tola_plugin.metrics.text_metrics import normalize
from tola_plugin.ocr.transocr_recognizer import read_text
from tola_testing import REPO, load_yaml, one_thread  # noqa: F401  (fixture)

LINES = 6  # the first of make demo's 32 held-out lines
READ_LINES = 12  # the first lines the text prior reads (TransOCR alone is cheap)
TEST_OPTIONS = os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml')


@pytest.fixture(scope='module')
def restored(tmp_path_factory, one_thread):  # noqa: F811
    """(LR, TOLA, HR) uint8 RGB images of the first ``LINES`` held-out lines, and what the shipped TransOCR reads of
    the first ``READ_LINES`` LR lines (hits, lines)."""
    from basicsr.archs import build_network

    from tola_plugin.data.text_degradation_dataset import TextDegradationDataset
    opt = load_yaml(TEST_OPTIONS)
    folder = str(tmp_path_factory.mktemp('held_out'))
    write_rendered_lines(READ_LINES, seed=1, out=folder, chinese_chars='demo')  # make demo: --num 32 --seed 1
    data = dict(opt['datasets']['test_1'], dataroot_gt=folder, labels=os.path.join(folder, 'labels.tsv'), phase='val',
                scale=1)
    dataset = TextDegradationDataset(data)
    net = build_network(opt['network_g']).eval()
    net.load_adaptation_checkpoint('demo')
    items = [dataset[i] for i in range(READ_LINES)]
    lq = torch.stack([it['lq'] for it in items])
    seeds = [image_noise_seed(os.path.basename(it['lq_path']), opt['val']['noise_seed']) for it in items[:LINES]]
    with torch.no_grad():
        out = net(lq[:LINES], noise_seeds=seeds)
        reads = read_text(net.transocr, lq)
    hits = sum(normalize(r.text, lower=True) == normalize(it['text'], lower=True) for r, it in zip(reads, items))
    gt = torch.stack([it['gt'] for it in items[:LINES]])
    return tensor_to_uint8(lq[:LINES]), tensor_to_uint8(out), tensor_to_uint8(gt), (hits, len(items))


def ssim_y8(pred: np.ndarray, ref: np.ndarray) -> float:
    """BasicSR's SSIM on the Y channel of uint8 RGB images, no border crop (the test launcher's ``calculate_ssim``)."""
    from basicsr.metrics import calculate_ssim
    return calculate_ssim(pred[..., ::-1], ref[..., ::-1], crop_border=0, test_y_channel=True)


def test_the_shipped_model_restores_held_out_lines_as_its_record_says(restored):
    """Structure (SSIM) above the input on these lines, as on all 32; PSNR at least the record's gain on 32 lines less
    0.5 dB (six lines scatter around the mean of 32 by tenths of a dB; one forward pass's float32 rounding by far less
    than 0.01 dB), so a change that made the model fall further below its input fails here."""
    lr, tola, hr, _ = restored
    psnr = {k: np.mean([psnr_y8(a, b) for a, b in zip(v, hr)]) for k, v in (('LR', lr), ('TOLA', tola))}
    ssim = {k: np.mean([ssim_y8(a, b) for a, b in zip(v, hr)]) for k, v in (('LR', lr), ('TOLA', tola))}
    recorded = demo_adaptation_record()['held_out']
    assert recorded['TOLA']['ssim'] > recorded['LR']['ssim']  # what the package claims of all 32 lines ...
    assert ssim['TOLA'] > ssim['LR'], ssim  # ... holds on these
    gain = recorded['TOLA']['psnr'] - recorded['LR']['psnr']
    assert psnr['TOLA'] - psnr['LR'] >= gain - 0.5, (psnr, gain)


def test_the_shipped_text_prior_reads_held_out_lines(restored):
    """The TransOCR shipped reads LR lines it never saw (the issue's target: half of the backbone's 64 held-out LR
    lines; 0.41 of make demo's 32, as recorded): at least a third of these twelve (it reads 5; the ones it reads with
    confidence 0.80-1.00, so one forward pass's rounding cannot flip them); the one shipped before it reads 3."""
    hits, lines = restored[3]
    recorded = demo_adaptation_record()['held_out']['LR']['t_acc']
    assert recorded >= 0.4, recorded
    assert hits >= lines / 3, (hits, lines)
