"""One owner per concept (docs/architecture.md, "Conventions"): float -> uint8 and the channel order in
data/image_io.py, image and figure files written through it, PSNR in metrics/, reading text with TransOCR in ocr/.

Each owner replaced copies that lived elsewhere; the copies are kept here, verbatim, as the references the owner must
reproduce bit for bit (the demo's metrics, the datasets and the benchmarks stay what they were). Rounding can only
differ where x * 255 lands on or next to a half level: an exhaustive run over all 1,065,353,217 float32 values in
[0, 1] found every difference between the two roundings (130 values) and between either and exact rounding within 64
ulps of a half level (k + 0.5) / 255, so the inputs below hold every float32 within 128 ulps of each half level.
"""
import os

import cv2
import numpy as np
import pytest
import torch
from lint_testing import lint_flags
from PIL import Image

from basicsr.metrics import calculate_psnr
from basicsr.utils import imwrite, tensor2img

from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.data.image_io import (convert_order, jpeg_round_trip, tensor_to_uint8, to_uint8, write_figure,
                                       write_image, write_pil_image)
from tola_plugin.metrics.image_metrics import float_psnr, mean_psnr_y8, psnr_y8
from tola_plugin.ocr.transocr_recognizer import TransOCRRecognizer, read_text
from tola_plugin.text.alphabets import TRANSOCR_END, decode_transocr

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def near_half_levels(ulps: int = 128) -> np.ndarray:
    """Every float32 within ``ulps`` ulps of a half level (k + 0.5) / 255, k = 0..254, sorted."""
    centres = ((np.arange(255) + 0.5) / 255).astype(np.float32)
    bits = centres.view(np.int32)[:, None] + np.arange(-ulps, ulps + 1, dtype=np.int32)[None]
    return np.unique(bits.view(np.float32).ravel())


@pytest.fixture(scope='module')
def unit_values():
    """float32 values for [0, 1] conversions: the half-level neighbourhoods, random values (a quarter of them out
    of range), the edges. A multiple of 3 long."""
    rng = np.random.default_rng(0)
    edges = np.float32([0.0, -0.0, 1.0, 0.5, np.nextafter(np.float32(1), np.float32(2)), -1e-8, 1.5, -3.0, 1e-45])
    values = np.concatenate([near_half_levels(), rng.uniform(-0.25, 1.25, 300_000).astype(np.float32), edges])
    return values[:len(values) // 3 * 3]


def as_batch(values: np.ndarray) -> torch.Tensor:
    """1-D values -> a (1, 3, 1, N/3) RGB tensor (each column a pixel)."""
    return torch.from_numpy(values.reshape(1, 3, 1, -1).copy())


# The copies the owners replaced, verbatim (one expression each, named by where it was).
def old_line_geometry(image):  # inference/line_geometry.to_uint8
    return np.rint(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)


def old_to_rgb8(x):  # metrics/image_metrics.to_rgb8
    arr = (x.detach().float().clamp(0, 1).permute(0, 2, 3, 1).cpu().numpy() * 255.0).round()
    return list(arr.astype(np.uint8))


def old_pool(x):  # demo/pool._to_uint8
    return (x.permute(0, 2, 3, 1).numpy() * 255.0).round().clip(0, 255).astype(np.uint8)


def old_bsrgan_jpeg_input(img):  # data/bsrgan_degradation._jpeg: RGB float -> BGR uint8
    return (np.clip(img, 0, 1)[..., ::-1] * 255.0).round().astype(np.uint8)


def old_realesrgan_jpeg_input(out):  # data/realesrgan_degradation._jpeg, after its clamp: (1,3,H,W) -> BGR uint8
    out = torch.clamp(out, 0, 1)
    return (out[0].permute(1, 2, 0).numpy()[..., ::-1] * 255.0).round().astype(np.uint8)


def old_reader(img):  # data/image_io._to_uint8, float branch (after the float32 cast and range check)
    return (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def old_colour_fix(fixed):  # demo/report.color_fix_psnr
    return np.clip(fixed * 255.0 + 0.5, 0, 255).astype(np.uint8)


def old_renderers(canvas):  # data/text_render.render_line, data/photo_render.render_photo
    return np.clip(np.rint(canvas), 0, 255).astype(np.uint8)


def old_composites(out):  # data/image_io._composite, inference/photo_geometry.paste_strip (values in [0, 255])
    return (out + 0.5).astype(np.uint8)


def old_mean_psnr_y8(pred, ref):  # metrics/image_metrics.mean_psnr_y8
    return float(
        np.mean([
            calculate_psnr(p[..., ::-1], r[..., ::-1], crop_border=0, test_y_channel=True) for p, r in zip(pred, ref)
        ]))


def old_float_psnr(a, b):  # evaluation/inference_benchmark.psnr
    import math
    mse = float(((a.double() - b.double())**2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


def test_half_even_is_every_old_copy_bit_for_bit(unit_values):
    x = unit_values
    ours = to_uint8(x)
    assert ours.dtype == np.uint8 and ours.shape == x.shape
    assert np.array_equal(ours, old_line_geometry(x))
    batch = as_batch(x)  # (1, 3, 1, N/3)
    pixels = x.reshape(3, -1).T[None]  # (1, N/3, 3) RGB: the batch's image, channels last
    assert np.array_equal(tensor_to_uint8(batch)[0], to_uint8(pixels))
    assert np.array_equal(tensor_to_uint8(batch), np.stack(old_to_rgb8(batch)))
    assert np.array_equal(tensor_to_uint8(batch), old_pool(batch))
    # BasicSR's tensor2img (the demo report's and the benchmark's; BGR; it clamps its argument in place)
    assert np.array_equal(convert_order(tensor_to_uint8(batch[0]), 'RGB', 'BGR'), tensor2img(batch[0].clone()))
    jpeg_input = convert_order(to_uint8(pixels), 'RGB', 'BGR')
    assert np.array_equal(jpeg_input, old_bsrgan_jpeg_input(pixels))
    assert np.array_equal(jpeg_input, old_realesrgan_jpeg_input(batch))
    in_range = torch.from_numpy(np.clip(x, 0, 1).reshape(3, 1, -1).copy())  # the datasets' items are in [0, 1]
    old_test_set = np.round(in_range.numpy().transpose(1, 2, 0) * 255.0).astype(np.uint8)  # data/degraded_test_set
    assert np.array_equal(tensor_to_uint8(in_range), old_test_set)
    wide = np.random.default_rng(1).uniform(-0.5, 1.5, (64, 64, 3))  # float64 stays float64 (bsrgan's arrays)
    assert to_uint8(wide.astype(np.float32)).shape == wide.shape
    assert np.array_equal(to_uint8(wide)[..., ::-1], old_bsrgan_jpeg_input(wide))


def test_half_up_is_the_readers_and_the_colour_fixs_copies(unit_values):
    x = unit_values
    ours = to_uint8(x, 'half_up')
    assert np.array_equal(ours, old_reader(x)) and np.array_equal(ours, old_colour_fix(x))
    pixels = tensor_to_uint8(as_batch(x), rounding='half_up')[0]
    assert np.array_equal(pixels, old_colour_fix(as_batch(x)[0].permute(1, 2, 0).numpy()))
    # the two roundings differ on 130 float32 values, all among these inputs: each call site's choice is tested
    half_levels = near_half_levels()
    assert (to_uint8(half_levels, 'half_up') != to_uint8(half_levels)).sum() == 130


def test_the_0_255_scale_is_the_renderers_and_composites_copies():
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64):
        canvas = np.concatenate([rng.uniform(-20, 275, 200_000), np.arange(-2, 258, 0.5)]).astype(dtype)
        assert np.array_equal(to_uint8(canvas, peak=255.0), old_renderers(canvas))
    blend = np.concatenate([rng.uniform(0, 255, 200_000), np.arange(0, 255.5, 0.5)]).astype(np.float32)
    assert np.array_equal(to_uint8(blend, 'half_up', peak=255.0), old_composites(blend))
    with pytest.raises(ValueError, match='rounding'):
        to_uint8(blend, 'nearest')
    with pytest.raises(ValueError, match='peak'):
        to_uint8(blend, peak=65535.0)
    with pytest.raises(ValueError, match=r'\(\.\.\., 3, H, W\)'):
        tensor_to_uint8(torch.zeros(4, 8, 8))


def test_channel_order_is_the_one_swap():
    rgb = np.random.default_rng(3).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    assert convert_order(rgb, 'RGB', 'RGB') is rgb
    bgr = convert_order(rgb, 'RGB', 'BGR')
    assert bgr.flags.c_contiguous and np.array_equal(bgr, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert np.array_equal(convert_order(bgr, 'BGR', 'RGB'), rgb)
    with pytest.raises(ValueError, match="'BGR' or 'RGB'"):
        convert_order(rgb, 'RGB', 'HSV')
    with pytest.raises(ValueError, match=r'\(\.\.\., 3\)'):
        convert_order(np.zeros((5, 7, 4), np.uint8), 'RGB', 'BGR')


def test_jpeg_round_trip_is_the_degradations_copy():
    rgb = np.random.default_rng(4).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    for quality in (30, 95):
        ok, buf = cv2.imencode('.jpg', rgb[..., ::-1], [int(cv2.IMWRITE_JPEG_QUALITY), quality])
        old = cv2.imdecode(buf, cv2.IMREAD_COLOR)[..., ::-1]
        assert ok and np.array_equal(jpeg_round_trip(rgb, quality, order='RGB'), old)


def test_psnr_owners_are_the_old_copies_bit_for_bit():
    rng = np.random.default_rng(5)
    pred = [rng.integers(0, 256, (16 + i, 40, 3), dtype=np.uint8) for i in range(6)]
    ref = [np.clip(p.astype(int) + rng.integers(-9, 10, p.shape), 0, 255).astype(np.uint8) for p in pred]
    assert mean_psnr_y8(pred, ref) == old_mean_psnr_y8(pred, ref)
    for p, r in zip(pred, ref):  # the benchmark's route: BasicSR's BGR images straight into calculate_psnr
        assert psnr_y8(p, r) == calculate_psnr(p[..., ::-1].copy(), r[..., ::-1].copy(), 0, test_y_channel=True)
    assert psnr_y8(pred[0], pred[0]) == float('inf')
    a, b = torch.rand(2, 3, 8, 16), torch.rand(2, 3, 8, 16)
    assert float_psnr(a, b) == old_float_psnr(a, b) and float_psnr(a, a) == float('inf')


def test_written_images_and_figures_are_the_old_files(tmp_path):
    """write_image's file is BasicSR's imwrite(tensor2img(x)) byte for byte; figures keep their bytes; a failed
    write leaves nothing behind."""
    x = torch.rand(3, 16, 24)
    imwrite(tensor2img(x), str(tmp_path / 'old.png'))
    write_image(str(tmp_path / 'new' / 'new.png'), tensor_to_uint8(x), order='RGB')
    assert (tmp_path / 'old.png').read_bytes() == (tmp_path / 'new' / 'new.png').read_bytes()

    rgb = np.random.default_rng(6).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    palette = Image.fromarray(rgb).quantize(colors=16, method=Image.Quantize.MEDIANCUT)
    palette.save(tmp_path / 'old_fig.png', optimize=True)
    write_pil_image(str(tmp_path / 'new_fig.png'), palette, optimize=True)
    assert (tmp_path / 'old_fig.png').read_bytes() == (tmp_path / 'new_fig.png').read_bytes()
    with pytest.raises(ValueError, match=r'fig\.nope.*\.nope'):
        write_pil_image(str(tmp_path / 'fig.nope'), palette)

    from matplotlib.figure import Figure
    fig = Figure(figsize=(2, 1))
    fig.add_subplot().plot([0, 1], [1, 0])
    fig.savefig(tmp_path / 'old_plot.png', dpi=50)
    write_figure(str(tmp_path / 'new_plot.png'), fig, dpi=50)
    assert (tmp_path / 'old_plot.png').read_bytes() == (tmp_path / 'new_plot.png').read_bytes()
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ValueError, match='matplotlib cannot write .nope'):
        write_figure(str(tmp_path / 'plot.nope'), fig)
    with pytest.raises(TypeError):
        write_figure(str(tmp_path / 'plot.png'), fig, no_such_option=1)  # fails inside savefig
    assert sorted(os.listdir(tmp_path)) == before  # neither the file nor a temporary one


def tiny_reader(end_bias: float):
    """A tiny 7937-class TransOCR (seed 0) with its END logit raised by ``end_bias``: 1.5 makes it read two
    characters and stop, 0 makes it read 24 (measured)."""
    torch.manual_seed(0)
    model = TransOCR(embed_dim=16, pe_max_len=64, stem_channels=(8, 8), stage_channels=(8, 8, 8, 8),
                     stage_blocks=(1, 1, 1, 1), num_heads=2, ff_dim=32).eval()
    with torch.no_grad():
        model.generator_word.proj.bias[TRANSOCR_END] += end_bias
    return model


@pytest.mark.parametrize('end_bias, length', [(1.5, 2), (0.0, 24)])
def test_read_text_is_every_old_reader(end_bias, length):
    """ocr's read_text gives the strings of the three readers it replaced: TransOCR.recognize (TOLA's validation),
    TransOCRRecognizer's own loop (the evaluation) and the demo scores' full-length decode (no early stop)."""
    model = tiny_reader(end_bias)
    images = torch.rand(6, 3, 128, 512, generator=torch.Generator().manual_seed(7))
    read = read_text(model, images)
    with torch.no_grad():
        ids, probs = model.greedy_decode(images, max_steps=24, stop_at_end=True)
        full_ids, _ = model.greedy_decode(images, incremental=True)
    lengths = [row.index(TRANSOCR_END) if TRANSOCR_END in row else len(row) for row in ids.tolist()]
    assert lengths == [length] * len(images)  # with 2, the early stop cut the decoding short
    recognize = [decode_transocr(row) for row in ids.tolist()]
    recognizer = []
    for row, prob, length in zip(ids.tolist(), probs.tolist(), lengths):
        recognizer.append((decode_transocr(row), float(np.mean(prob[:length])) if length else float(prob[0])))
    demo_scores = [decode_transocr(row) for row in full_ids.tolist()]
    assert [r.text for r in read] == recognize == [t for t, _ in recognizer] == demo_scores
    assert [r.confidence for r in read] == [c for _, c in recognizer]
    uint8 = [np.ascontiguousarray(img) for img in tensor_to_uint8(images[:3])]
    expected = read_text(model, torch.from_numpy(np.stack(uint8).astype(np.float32) / 255.0).permute(0, 3, 1, 2))
    assert [r.text for r in TransOCRRecognizer(model=model)(uint8)] == [r.text for r in expected]


def test_copies_outside_the_owners_fail_the_lint(tmp_path):
    """lint/flake8_owners.py (make lint): the package, its command lines and tools pass; a copy of each owned concept
    outside its owner is flagged, the owners themselves are not."""
    fake = tmp_path / 'tola_plugin'
    for folder in ('demo', 'data', 'metrics', 'ocr'):
        (fake / folder).mkdir(parents=True)
    copies = [
        'import cv2', 'import numpy as np', 'from PIL import Image', 'from basicsr.utils import tensor2img',
        'from tola_plugin.text.alphabets import decode_transocr', '', '', 'def f(x, fig, ids, model):',
        '    a = (x * 255.0).round().astype(np.uint8)', '    b = np.clip(np.rint(x), 0, 255).astype(np.uint8)',
        '    c = x[..., ::-1]', '    d = x[:, :, ::-1]', '    e = cv2.cvtColor(x, cv2.COLOR_BGR2RGB)',
        "    cv2.imwrite('a.png', x)", "    fig.savefig('a.png')", "    Image.fromarray(x).save('a.png')",
        '    g = 10 * np.log10(1 / x)', '    h = decode_transocr(ids)', '    i = model.recognize(x)',
        '    k = kernel[::-1, ::-1] + x.view(np.uint8) + x.astype(np.uint8)  # not copies',
        '    return a, b, c, d, e, g, h, i, k', ''
    ]
    for where in ('demo/copies.py', 'data/image_io.py', 'metrics/psnr.py', 'ocr/reader.py'):
        (fake / where).write_text('\n'.join(copies), encoding='utf-8')
    out = lint_flags('OWN', fake, 'tola_plugin', 'tola_cli', 'tools', lines=True)
    demo = [(4, 'OWN001'), (9, 'OWN001'), (10, 'OWN001'), (11, 'OWN002'), (12, 'OWN002'), (13, 'OWN002'),
            (14, 'OWN003'), (15, 'OWN003'), (16, 'OWN003'), (17, 'OWN004'), (18, 'OWN005'), (19, 'OWN005')]
    own = {
        'data/image_io.py': ('OWN001', 'OWN002', 'OWN003'), 'metrics/psnr.py': ('OWN004', ),
        'ocr/reader.py': ('OWN005', )
    }
    expected = [('demo/copies.py', line, code) for line, code in demo]
    for where, exempt in own.items():
        expected += [(where, line, code) for line, code in demo if code not in exempt]
    assert out.returncode == 1 and out.places == sorted(expected), out.output
    assert 'use tola_plugin.data.image_io.to_uint8' in out.stdout


def test_speaking_precisions_and_proc_outside_their_owners_fail_the_lint(tmp_path):
    """lint/flake8_owners.py (make lint): one way to speak to the user (utils/user_text.say: OWN006), the precision
    choices written once (archs/precision.py, mirrored by tola_cli/defaults.py: OWN007), one reader of /proc and of
    a PID's liveness (utils/procfs.py: OWN008), the stages written once (archs/stages.py: OWN009). A copy anywhere
    else is flagged, the runtime and the pipeline included (nothing is pending since issue 44's two parts merged); the
    owners and the mirror are not; what only looks alike is not a copy (a progress bar on stderr, a print to stdout, a
    library's logger set quiet, per-precision or per-stage data, a default pair of precisions)."""
    copies = [
        'import logging', 'import os', 'import sys', 'import traceback', '', 'import torch', '', '', 'def say(m):',
        "    print(m, file=sys.stderr, flush=True)", "    sys.stderr.write(m)", '    traceback.print_exc()',
        'log = logging.getLogger(__name__)', "CHOICES = ('fp32', 'bf16', 'fp16', 'auto')",
        "DTYPES = {'bf16': torch.bfloat16, 'fp16': torch.float16}", "STAT = f'/proc/{os.getpid()}/stat'",
        'os.kill(1, 0)', "BOUNDS = {'fp16': {'psnr_db': 40.0}, 'bf16': {'psnr_db': 25.0}}  # not copies",
        "DEFAULT = ('fp32', 'bf16')", "print('a table row')", "logging.getLogger('matplotlib').setLevel(logging.ERROR)",
        'os.kill(1, 15)', "ORDER = ('vae_encoder', 'idm', 'vae_decoder')",
        "ROW = ['text prior', 'VAE encode', 'VAE decode']",
        "TIMED = {'vae_encoder': 'VAE encode', 'vae_decoder': 'VAE decode'}",
        "BOUND = {'vae_encoder': 0.2, 'vae_decoder': 0.1}  # per-stage data, not a copy", ''
    ]
    flagged_lines = {6: (9, 10, 11, 12, 13), 7: (14, 15), 8: (16, 17), 9: (23, 24, 25)}
    files = {
        'tola_plugin/demo/copies.py': (), 'tola_plugin/utils/user_text.py': ('OWN006', ),
        'tola_plugin/archs/precision.py': ('OWN007', ), 'tola_plugin/utils/procfs.py': ('OWN008', ),
        'tola_plugin/archs/stages.py': ('OWN009', ), 'tola_plugin/runtime/serving.py': (),
        'tola_plugin/inference/pipeline.py': (), 'tola_cli/defaults.py': ('OWN007', ), 'tola_cli/other.py': (),
        'tools/tool.py': ()
    }
    out = lint_flags('OWN', tmp_path, 'tola_plugin', 'tola_cli', 'tools', files=dict.fromkeys(files, '\n'.join(copies)),
                     lines=True)
    expected = sorted((where, line, f'OWN00{code}') for where, exempt in files.items()
                      for code, lines in flagged_lines.items() if f'OWN00{code}' not in exempt for line in lines)
    assert out.returncode == 1 and out.places == expected, out.output
    assert 'use tola_plugin.utils.user_text.say' in out.stdout and 'use tola_plugin.utils.procfs' in out.stdout
