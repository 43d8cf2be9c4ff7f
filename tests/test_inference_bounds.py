"""Issue "Bounded inputs, outputs that never lie", the library side: one image budget read from the header before
decoding (problems 1-2), every decoding error one "not a decodable image" failure (1), bounds of the work checked
before it (3-4, also on the web page and in the evaluation), photos of any shape with --detect (5), one image's
failure isolated from its batch (6), float ranges (10). The folder runs are in test_inference_folder_run.py.

Bombs are PNGs written with zlib (tests/reliability_testing.py): 3000x3000 black pixels in 9 KB, decodable, and a
header of 40000x40000 (1.6 gigapixels) over a few rows.
"""
import io
import os
import sys

import cv2
import numpy as np
import pytest
from PIL import Image
from reliability_testing import write_png_bomb

from tola_plugin.data import image_io
from tola_plugin.data.image_io import (DEFAULT_MAX_PIXELS, ImageTooLargeError, decode_image, pixel_ceiling,
                                       read_image_file, scan_image_folder)
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.inference.work_bounds import DEFAULT_MAX_OUTPUT_PIXELS, DEFAULT_MAX_WINDOWS, BoundError
from inference_testing import StandInRestorer
from tola_testing import one_thread  # noqa: F401

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tools'))
pytestmark = pytest.mark.usefixtures('one_thread')
RNG = np.random.default_rng(25)


def line(height=32, width=128):
    return RNG.integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.fixture
def decodes(monkeypatch):
    """Records every cv2.imdecode call of the image reader (a refused file must never reach it)."""
    calls, real = [], cv2.imdecode
    monkeypatch.setattr(image_io.cv2, 'imdecode', lambda *args: calls.append(1) or real(*args))
    return calls


# ------------------------------------------------------------------------------------------ image budget (1-2)
def test_a_bomb_is_refused_from_its_header_before_decoding(tmp_path, decodes):
    bomb = write_png_bomb(tmp_path / 'bomb.png', 3000, 3000)
    assert os.path.getsize(bomb) < 20_000  # 9 megapixels in a few kilobytes
    with pytest.raises(
            ImageTooLargeError, match=r'bomb\.png: 3000x3000 pixels \(9 megapixels\) is over the image '
            r'budget of 4 megapixels; refused before decoding \(raise the limit with --max-megapixels'):
        read_image_file(bomb, max_pixels=4_000_000)
    with open(bomb, 'rb') as f:
        data = f.read()
    with pytest.raises(ImageTooLargeError, match='lmdb key 7: 3000x3000'):  # bytes (LMDB datasets) too
        decode_image(data, 'lmdb key 7', max_pixels=4_000_000)
    huge = write_png_bomb(tmp_path / 'huge.png', 40000, 40000, rows=4)  # 1.6 gigapixels declared
    with pytest.raises(ImageTooLargeError, match=r'huge\.png: its header declares more than 178,956,970 pixels'):
        read_image_file(huge)
    assert not decodes  # nothing was decoded
    assert read_image_file(bomb).shape == (3000, 3000, 3)  # under the default budget (64 megapixels) it reads
    assert DEFAULT_MAX_PIXELS == 64_000_000 and pixel_ceiling() == 178_956_970
    for bad in (0, -1, pixel_ceiling() + 1, float('nan'), True):
        with pytest.raises(ValueError, match=r'max_pixels \(the image budget; --max-megapixels x 1e6\) must be'):
            read_image_file(bomb, max_pixels=bad)


def test_every_decoding_error_is_one_not_decodable_failure(tmp_path, monkeypatch):
    path = tmp_path / 'x.png'
    Image.fromarray(line(8, 8)).save(path)

    def opencv_fails(*args):
        raise cv2.error('OpenCV(5.0.0) loadsave.cpp:79: error: (-215:Assertion failed) in function imdecode_')

    monkeypatch.setattr(image_io.cv2, 'imdecode', opencv_fails)
    with pytest.raises(ValueError, match=r'x\.png: not a decodable image \(\d+ bytes; .*OpenCV: error'):
        read_image_file(str(path))
    monkeypatch.undo()
    # a lazy PIL image whose pixels cannot be loaded (truncated after its header): the pipeline names it
    buf = io.BytesIO()
    Image.fromarray(line(64, 64)).save(buf, 'PNG')
    truncated = Image.open(io.BytesIO(buf.getvalue()[:200]))
    with pytest.raises(ValueError, match='image 0: not a decodable image'):
        TOLAPipeline(StandInRestorer())(truncated)


def test_gif_and_layouts_pillow_cannot_open_are_read(tmp_path):
    rgb = line(12, 20)
    Image.fromarray(rgb).save(tmp_path / 'a.gif')
    (tmp_path / 'notes.txt').write_text('not an image')
    scan = scan_image_folder(str(tmp_path))
    assert scan.images == ['a.gif'] and scan.unsupported == ['notes.txt']
    assert read_image_file(str(tmp_path / 'a.gif')).shape == (12, 20, 3)
    # a 3-channel float TIFF (Pillow cannot open it; OpenCV decodes it): its size comes from the TIFF tags
    ok, data = cv2.imencode('.tiff', rgb[..., ::-1].astype(np.float32) / 255.0)
    assert ok
    with pytest.raises(Exception):
        Image.open(io.BytesIO(data.tobytes()))
    assert np.array_equal(decode_image(data.tobytes(), 'float.tif'), rgb[..., ::-1])
    with pytest.raises(ImageTooLargeError, match=r'float\.tif: 20x12'):
        decode_image(data.tobytes(), 'float.tif', max_pixels=100)


# ------------------------------------------------------------------------------------------------ floats (10)
def test_float_images_must_be_finite_and_in_0_1(tmp_path):
    pipe = TOLAPipeline(StandInRestorer())  # identity: the output is the input as the pipeline read it
    eight_bit = line()
    floats = eight_bit.astype(np.float64)
    expected = pipe(eight_bit).image
    with pytest.raises(
            ValueError, match=r'image 0: float pixels in \[0, 255\] look like the 0-255 range; float '
            r'images must be in \[0, 1\] \(divide by 255, or pass value_range=\(0, 255\)\)'):
        pipe(floats)
    with pytest.raises(ValueError, match='look like the 0-255 range'):
        pipe(Image.fromarray(floats[..., 0].astype(np.float32), 'F'))
    for bad in (np.nan, np.inf, -np.inf):
        spoiled = floats / 255.0
        spoiled[3, 4, 1] = bad
        with pytest.raises(ValueError, match=r'image 0: 1 NaN or infinite pixel value\(s\)'):
            pipe(spoiled)
    with pytest.raises(ValueError, match=r'float pixels in \[-3, 2\], outside \[0, 1\]'):
        pipe(np.linspace(-3, 2, 32 * 128 * 3).reshape(32, 128, 3))
    assert np.array_equal(pipe(floats / 255.0).image, expected)
    assert np.array_equal(pipe(floats, value_range=(0, 255)).image, expected)
    assert np.array_equal(pipe(floats / 255.0 * (1 + 1e-4)).image, expected)  # a hair over 1 still rounds to 255
    with pytest.raises(ValueError, match='value_range applies to float images'):
        pipe(eight_bit, value_range=(0, 255))
    with pytest.raises(ValueError, match='value_range must be'):
        pipe(floats, value_range=(1, 1))
    cv2.imwrite(str(tmp_path / 'float255.tif'), floats.astype(np.float32))  # a float TIFF in 0-255
    with pytest.raises(ValueError, match=r'float255\.tif: float pixels in \[0, 255\] look like the 0-255 range'):
        read_image_file(str(tmp_path / 'float255.tif'))


# ------------------------------------------------------------------------------------ bounds of the work (3-4)
def test_windows_and_output_size_are_bounded_before_any_work():
    net = StandInRestorer()
    pipe = TOLAPipeline(net)
    assert (pipe.max_windows, pipe.max_output_pixels) == (DEFAULT_MAX_WINDOWS, DEFAULT_MAX_OUTPUT_PIXELS)
    with pytest.raises(
            BoundError, match=r'image 0: 556 windows of 128x512 needed for a 5000x3 line \(213333 columns '
            r'at height 128\), over the limit of 256 per image \(raise it with --max-windows'):
        pipe(np.zeros((3, 5000, 3), np.uint8))
    with pytest.raises(
            BoundError, match=r'outscale 5000 makes a 640000x160000 output \(1.02e\+05 megapixels\), over '
            r'the limit of 100 megapixels per image \(lower --outscale, or raise the limit with '
            r'--max-output-megapixels'):
        pipe(line(), outscale=5000)
    for bad in (float('inf'), float('nan'), 0, -1, 'x'):
        with pytest.raises(ValueError, match='outscale must be a finite number > 0'):
            pipe(line(), outscale=bad)
    assert not net.calls  # refused before the network ran
    small = TOLAPipeline(net, max_windows=3, max_output_pixels=128 * 1280)
    assert small(line(32, 320)).image.shape == (128, 1280, 3)  # 1280 columns: exactly 3 windows, at both limits
    with pytest.raises(BoundError, match='4 windows'):
        small(line(32, 321))
    for name, value in (('max_windows', 0), ('max_windows', 2.5), ('max_output_pixels', float('inf'))):
        with pytest.raises(ValueError, match=name):
            TOLAPipeline(net, **{name: value})


class FixedDetector:
    """The detector's contract without PP-OCRv4: the given quadrilaterals, none upside down; counts its calls."""

    def __init__(self, quads):
        self.quads, self.calls = np.float32(quads).reshape(-1, 4, 2), 0

    def __call__(self, image_bgr):
        self.calls += 1
        return self.quads

    def upside_down(self, strips):
        return [False] * len(strips)


def test_photo_bounds_windows_of_all_lines_and_the_output_size():
    pipe = TOLAPipeline(StandInRestorer(), max_windows=12, max_output_pixels=300_000)
    photo = np.full((200, 400, 3), 255, np.uint8)
    # two lines 16 rows high: the photo keeps its size (no scale of its own, issue 49), whatever its lines' height
    two_lines = [[[20, 20], [180, 20], [180, 36], [20, 36]], [[20, 60], [380, 60], [380, 76], [20, 76]]]
    pipe.detector = FixedDetector(two_lines)
    own = pipe(photo, detect=True)
    assert own.outscale == 1.0 and own.image.shape == photo.shape
    with pytest.raises(BoundError, match='outscale 4 makes a 1600x800 output'):  # over the output bound: refused
        pipe(photo, detect=True, outscale=4)
    assert pipe.detector.calls == 1  # ... before the detector ran
    small = TOLAPipeline(StandInRestorer(), max_output_pixels=50_000)
    small.detector = FixedDetector(two_lines)
    with pytest.raises(BoundError, match='outscale 1 makes a 400x200 output'):  # the photo's own size: never shrunk
        small(photo, detect=True)
    assert small.detector.calls == 0
    pipe.detector = FixedDetector([[[0, 0], [399, 0], [399, 4], [0, 4]]])  # a line 5 rows high, 400 long
    with pytest.raises(BoundError, match=r'needed for its 1 detected line\(s\), over the limit of 12'):
        pipe(photo, detect=True, outscale=1)


def test_detect_takes_any_shape_too_thin_photos_have_no_lines_with_the_reason():
    pipe = TOLAPipeline(StandInRestorer())
    for shape in ((16, 2600, 3), (3000, 12, 3)):  # rapidocr raised ResizeImgError on both
        result = pipe(np.full(shape, 255, np.uint8), detect=True, outscale=1)
        assert result.lines == [] and result.image.shape == shape
        assert 'no lines: PP-OCRv4\'s detector cannot take' in result.note and 'too thin' in result.note
        assert result.to_dict()['note'] == result.note
    assert 'note' not in pipe(np.full((64, 256, 3), 255, np.uint8), detect=True).to_dict()


# ------------------------------------------------------------------------------------------------ isolation (6)
class OneBad(StandInRestorer):
    """Fails (as an allocation failure would) on any batch holding an all-black canvas."""

    def forward(self, lq, noise_seeds=None, return_intermediates=False):
        if bool((lq.flatten(1).amax(1) == 0).any()):
            raise RuntimeError('DefaultCPUAllocator: not enough memory')
        return super().forward(lq, noise_seeds, return_intermediates)


def test_a_failing_image_never_fails_its_neighbours():
    images = [line(), line(24, 200), np.zeros((32, 128, 3), np.uint8), line(40, 90)]
    names = ['a.png', 'b.png', 'black.png', 'd.png']
    net = OneBad()
    outcomes = TOLAPipeline(net, batch_size=4).restore_each(images, names=names)
    assert isinstance(outcomes[2], RuntimeError) and 'not enough memory' in str(outcomes[2])
    alone = TOLAPipeline(StandInRestorer(), batch_size=1)
    for i in (0, 1, 3):
        expected = alone(images[i], names=[names[i]])
        assert np.array_equal(outcomes[i].image, expected.image)
        assert outcomes[i].lines[0].window_texts == expected.lines[0].window_texts  # the same noise seeds
    # steps a, b, b, b | black, d, each window through the network alone: the first step is kept, the second failed
    # at black; black and d again, each image alone
    assert net.calls == [1] * 5
    with pytest.raises(RuntimeError, match='not enough memory'):
        TOLAPipeline(OneBad(), batch_size=4)(images, names=names)
    outcomes = TOLAPipeline(StandInRestorer()).restore_each([line(), np.zeros((0, 5, 3), np.uint8), 'missing.png'])
    assert outcomes[0].image.shape == (128, 512, 3)
    assert isinstance(outcomes[1], ValueError) and isinstance(outcomes[2], FileNotFoundError)


# ------------------------------------------------------------------------------- the web page and the evaluation
def test_the_web_page_applies_the_same_budget_and_bounds(tmp_path, decodes):
    from tola_plugin.web import page as web_page
    net = StandInRestorer()
    pipe = TOLAPipeline(net)
    bomb = write_png_bomb(tmp_path / 'bomb.png', 3000, 3000)
    with pytest.raises(
            ValueError, match=r'upload\.png is too large: 3000x3000 pixels = 9\.0 megapixels, the limit is '
            r'4 \(the --max-megapixels option of tola-web\); refused before decoding'):
        web_page.restore_upload(pipe, bomb, 'upload.png')
    assert not decodes
    cv2.imwrite(str(tmp_path / 'thin.png'), np.zeros((3, 5000, 3), np.uint8))
    with pytest.raises(ValueError, match=r'thin\.png: 556 windows of 128x512 needed.*--max-windows'):
        web_page.restore_upload(pipe, str(tmp_path / 'thin.png'), 'thin.png')
    assert not net.calls


def test_evaluation_names_a_bomb_and_writes_atomically(tmp_path, capsys):
    import evaluate
    for folder in ('method', 'reference'):
        (tmp_path / folder).mkdir()
        cv2.imwrite(str(tmp_path / folder / 'a.png'), line())
    write_png_bomb(tmp_path / 'method' / 'b.png', 40000, 40000, rows=4)
    cv2.imwrite(str(tmp_path / 'reference' / 'b.png'), line())
    argv = [
        '--method', f'm={tmp_path / "method"}', '--reference',
        str(tmp_path / 'reference'), '--metrics', 'psnr', '--out',
        str(tmp_path / 'eval'), '--no-progress'
    ]
    with pytest.raises(ImageTooLargeError, match=r'method/b\.png: its header declares more than'):
        evaluate.main(argv)
    os.remove(tmp_path / 'method' / 'b.png')
    cv2.imwrite(str(tmp_path / 'method' / 'b.png'), line(40, 40))  # 40x40 vs 128x32: a size error, named
    with pytest.raises(ValueError, match='b.png: restored image 40x40 and reference 128x32 differ'):
        evaluate.main(argv + ['--max-megapixels', '0.01'])
    cv2.imwrite(str(tmp_path / 'method' / 'b.png'), line())
    with pytest.raises(
            ValueError, match=r'a\.png: 128x32 pixels \(0\.0041 megapixels\) is over the image budget of '
            r'0\.001 megapixels'):
        evaluate.main(argv + ['--max-megapixels', '0.001'])
    assert evaluate.main(argv) == 0
    written = sorted(
        os.path.relpath(os.path.join(r, n), tmp_path / 'eval') for r, _, f in os.walk(tmp_path / 'eval') for n in f)
    assert written == ['per_image/m.csv', 'summary.json', 'summary.md']  # no temporary file left


def test_the_command_lines_default_to_the_library_bounds():
    from tola_cli import evaluate, infer, web
    args = infer.parse_args(['-i', 'x'])
    assert args.max_megapixels * 1e6 == DEFAULT_MAX_PIXELS and args.max_windows == DEFAULT_MAX_WINDOWS
    assert args.max_output_megapixels * 1e6 == DEFAULT_MAX_OUTPUT_PIXELS
    web_args = web.parse_args([])
    assert (web_args.max_windows, web_args.max_output_megapixels * 1e6) == (DEFAULT_MAX_WINDOWS,
                                                                            DEFAULT_MAX_OUTPUT_PIXELS)
    assert evaluate.build_parser().parse_args(['--method', 'x', '--out', 'o']).max_megapixels * 1e6 == \
        DEFAULT_MAX_PIXELS
    for bad in (['--outscale', 'inf'], ['--outscale', 'nan'], ['--max-megapixels', '0'], ['--max-windows', '-2']):
        with pytest.raises(SystemExit):
            infer.parse_args(['-i', 'x'] + bad)
