"""Recognizers: the real PP-OCRv4 model from the rapidocr wheel on rendered lines; TransOCR behind the same
interface (tiny random model with known outputs: the official checkpoint is not available offline)."""
import math
import subprocess

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw, ImageFont

from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.metrics.text_metrics import normalize
from tola_plugin.ocr.ppocr import PPOCRv4Recognizer
from tola_plugin.ocr.recognition import Recognition
from tola_plugin.ocr.recognizers import build_recognizer
from tola_plugin.ocr.transocr_recognizer import TransOCRRecognizer, read_text
from tola_plugin.text.alphabets import TRANSOCR_END, encode_transocr
from numerics import within


def cjk_font():
    try:
        out = subprocess.run(['fc-list', ':lang=zh', 'file'], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip('fontconfig not available')
    fonts = sorted(line.split(':')[0].strip() for line in out.splitlines() if line.strip())
    if not fonts:
        pytest.skip('no CJK font installed (fc-list :lang=zh)')
    preferred = [f for f in fonts if 'wqy-zenhei' in f or 'NotoSansCJK' in f]
    return (preferred or fonts)[0]


def render_line(text, font_path, size=(512, 128), font_size=80, fill='black', background='white'):
    """Text on the paper's 128x512 canvas (black on white by default); returns HxWx3 uint8 RGB."""
    img = Image.new('RGB', size, background)
    ImageDraw.Draw(img).text((20, 18), text, fill=fill, font=ImageFont.truetype(font_path, font_size))
    return np.asarray(img).copy()


@pytest.fixture(scope='module')
def ppocr():
    return PPOCRv4Recognizer(num_threads=1)


def test_ppocrv4_reads_rendered_lines(ppocr):
    font = cjk_font()
    texts = ['文字识别', 'Hello 2024']
    results = ppocr([render_line(t, font) for t in texts])
    assert [normalize(r.text) for r in results] == [normalize(t) for t in texts]  # case preserved
    assert all(isinstance(r, Recognition) and 0.5 < r.confidence <= 1.0 for r in results)
    assert ppocr([]) == []


def test_ppocrv4_takes_rgb_and_converts_once_at_its_boundary(ppocr):
    """PaddleOCR's model reads BGR: the RGB line given to the recognizer must reach it as BGR, exactly once. On a
    coloured line, the engine fed the RGB array itself reads with another confidence, so a missing or doubled
    conversion shows."""
    rgb = render_line('Hello 2024', cjk_font(), fill=(200, 30, 20), background=(40, 90, 230))
    ours = ppocr([rgb])[0]
    (text, conf), = ppocr.engine([np.ascontiguousarray(rgb[..., ::-1])])[0]
    (_, conf_unconverted), = ppocr.engine([rgb])[0]
    assert (ours.text, ours.confidence) == (str(text), float(conf))
    assert float(conf_unconverted) != float(conf)


def test_ppocrv4_is_recognition_only_and_offline(ppocr):
    import os
    assert os.environ.get('ORT_DISABLE_TELEMETRY') == '1'
    import rapidocr_onnxruntime
    assert os.path.basename(ppocr.model_path) == 'ch_PP-OCRv4_rec_infer.onnx'
    assert ppocr.model_path.startswith(os.path.dirname(rapidocr_onnxruntime.__file__))  # inside the wheel
    # one ONNX session, and it runs the recognition model: no detector, no orientation classifier
    sessions = [v for v in vars(ppocr).values() if hasattr(v, 'session')]
    assert sessions == [ppocr.engine] and ppocr.engine.session.session._model_path == ppocr.model_path
    assert len(ppocr.engine.postprocess_op.character) == 6625  # blank + ppocr_keys_v1 (6,623) + space


def test_recognizers_reject_bad_input(ppocr):
    with pytest.raises(ValueError, match='uint8'):
        ppocr([np.zeros((32, 128, 3), np.float32)])
    with pytest.raises(ValueError, match='unknown recognizer'):
        build_recognizer('tesseract')


def tiny_transocr(preprocess='difftsr'):
    torch.manual_seed(0)
    return TransOCR(embed_dim=16, pe_max_len=64, stem_channels=(8, 8), stage_channels=(8, 8, 8, 8),
                    stage_blocks=(1, 1, 1, 1), num_heads=2, ff_dim=32, preprocess=preprocess).eval()


def forced(model, class_index, logit=10.0):
    """Make every decoding step output ``class_index`` with a known probability (float64 value)."""
    with torch.no_grad():
        model.generator_word.proj.weight.zero_()
        model.generator_word.proj.bias.zero_()
        model.generator_word.proj.bias[class_index] = logit
    return math.exp(logit) / (math.exp(logit) + model.num_classes - 1)


# The float32 softmax over 7,937 classes sums 7,936 equal terms: measured 1.3e-5 relative from the float64 value
# with the AVX2 and the generic kernels (Intel and AMD alike), so 2e-3 keeps 150x; the next candidate answer, p^5,
# is 70% off.
SOFTMAX_TOL = 2e-3


@pytest.mark.numerics
def test_transocr_known_outputs():
    images = [np.full((128, 512, 3), 200, np.uint8), np.zeros((64, 256, 3), np.uint8)]
    model = tiny_transocr()
    p = forced(model, encode_transocr('a')[0])
    rec = TransOCRRecognizer(model=model, max_steps=5)
    got = rec(images)
    assert [r.text for r in got] == ['aaaaa'] * 2
    for r in got:
        within(abs(r.confidence - p) / p, SOFTMAX_TOL, 'forced-step confidence')
    p_end = forced(model, TRANSOCR_END)
    got = rec(images)
    assert [r.text for r in got] == [''] * 2
    for r in got:  # empty text: confidence of END
        within(abs(r.confidence - p_end) / p_end, SOFTMAX_TOL, 'END confidence')


def test_transocr_matches_read_text_and_batches():
    model = tiny_transocr()
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (128, 512, 3)).astype(np.uint8) for _ in range(3)]
    images.insert(1, rng.integers(0, 256, (64, 200, 3)).astype(np.uint8))  # a different size splits the batch
    got = TransOCRRecognizer(model=model, batch_size=2)(images)
    expected = [
        read_text(model,
                  torch.from_numpy(img.astype(np.float32) / 255).permute(2, 0, 1)[None])[0].text for img in images
    ]
    assert [r.text for r in got] == expected
    assert all(0.0 < r.confidence <= 1.0 for r in got)


def test_transocr_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match='exactly one'):
        TransOCRRecognizer()
    with pytest.raises(ValueError, match='benchmark'):
        TransOCRRecognizer(model=tiny_transocr('difftsr'), preprocess='benchmark')
    with pytest.raises(FileNotFoundError, match='transocr'):
        TransOCRRecognizer(checkpoint=str(tmp_path / 'transocr.pth'))
