"""Helpers of the inference tests: stand-in restorers with TOLANet's inference contract, stand-ins for PP-OCRv4
(``InkDetector``, ``InkReader``), a tiny merged model and the rendered test photo."""
import numpy as np
import torch

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.commands.data_preparation.photo_render import PhotoLine
from tola_plugin.ocr.recognition import Recognition
from tola_testing import tiny_net_opt

# Five lines at different angles (one upside down) and sizes on a 480x640 "photo"
# (commands/data_preparation/photo_render.py).
PHOTO_LINES = (PhotoLine('Restore text', 0, (200, 70),
                         40), PhotoLine('文本图像超分', 12, (330, 200), 44), PhotoLine('ONE STEP 2025', -10, (260, 330), 36),
               PhotoLine('TOLA', 30, (520, 400), 36), PhotoLine('Upside down', 180, (160, 440), 32))


class StandInRestorer(torch.nn.Module):
    """TOLANet's inference contract without a network: 'image' = lq (identity), 1 - lq (invert) or white (blank); the
    text prior of canvas i is its noise seed written out, with token confidences 0.5."""

    def __init__(self, invert: bool = False, blank: bool = False):
        super().__init__()
        self.invert, self.blank = invert, blank
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # a parameter, so that the pipeline finds the device
        self.calls = []  # batch sizes seen

    def forward(self, lq, noise_seeds=None, return_intermediates=False):
        assert tuple(lq.shape[1:]) == (3, 128, 512) and lq.dtype == torch.float32
        self.calls.append(lq.shape[0])
        texts = [str(s) for s in noise_seeds]
        confidences = torch.full((lq.shape[0], 24), 0.5)
        image = torch.ones_like(lq) if self.blank else 1.0 - lq if self.invert else lq.clone()
        return dict(image=image, prior_texts=texts, confidences=confidences)


# The LRC at a tiny width too: the paper's 32/16 costs 0.55 s a call in bf16 where a CPU emulates bf16 (0.02 s in
# fp32), and the precision tests run it in bf16 a dozen times; 8/4 costs 0.04 s (first-generation AMD EPYC).
TINY_LRC = dict(type='LatentResidualCorrection', num_feat=8, num_grow_ch=4)


def tiny_adapted_net() -> TOLANet:
    """TOLANet of the tiny random backbone (tests/data/tola/tiny_backbone.yml, LRC ``TINY_LRC``) whose adapters are not
    zero (LoRA B and the LRC's last convolution seeded), so that merging and loading them is visible in the outputs."""
    with torch.random.fork_rng(devices=[]):  # the same file every time: one OpenVINO conversion per test cache
        torch.manual_seed(0)
        net = TOLANet(**tiny_net_opt(lrc=TINY_LRC))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if '.lora_B.' in name or name.startswith('lrc.conv_out'):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return net


def write_tiny_merged(path) -> str:
    """A merged model file of ``tiny_adapted_net``."""
    tiny_adapted_net().save_merged(str(path))
    return str(path)


class InkDetector:
    """PP-OCRv4's detector contract without its model: one "line", the bounding box of the ink (pixels with a channel
    below 128), or none on an image without ink; none upside down."""

    def __call__(self, image_rgb):
        rows, cols = np.nonzero(image_rgb.min(-1) < 128)
        if not len(rows):
            return np.zeros((0, 4, 2), np.float32)
        x0, y0, x1, y1 = cols.min(), rows.min(), cols.max() + 1, rows.max() + 1
        return np.float32([[[x0, y0], [x1, y0], [x1, y1], [x0, y1]]])

    def upside_down(self, strips_rgb):
        return [False] * len(strips_rgb)


class InkReader:
    """PP-OCRv4's recognizer contract without its model: 'ink' (confidence 0.9) where there is ink, else nothing."""

    def __call__(self, images_rgb):
        return [Recognition('ink', 0.9) if (img.min(-1) < 128).any() else Recognition('', 0.0) for img in images_rgb]
