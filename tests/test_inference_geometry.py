"""TOLAPipeline's geometry with a stand-in identity restorer: output = input resized (aspect kept, pads removed, no
seams) at aspects 1:1 to 1:20, windows with their own priors, linear blending, input kinds, seeds."""
import io

import numpy as np
import pytest
from PIL import Image

from tola_plugin.inference.line_geometry import (blend_tiles, cut_tiles, line_width, plan_line, resize_rgb,
                                                 to_canvas_height, window_weights)
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.inference.restoration import WINDOW_SEPARATOR
from inference_testing import StandInRestorer

# (height, width): aspects 1:1 to 1:20, a tall one, odd sizes, a line exactly one canvas wide at 128 rows
SIZES = [(32, 32), (64, 20), (30, 90), (25, 100), (128, 512), (37, 301), (40, 400), (24, 360), (20, 400), (13, 260)]


def random_image(height, width, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


@pytest.mark.parametrize('pad_mode,overlap', [('edge', 128), ('reflect', 0), ('edge', 300)])
def test_identity_restorer_gives_the_input_resized_at_every_aspect(pad_mode, overlap):
    pipe = TOLAPipeline(StandInRestorer(), overlap=overlap, pad_mode=pad_mode, batch_size=3)
    for height, width in SIZES:
        img = random_image(height, width)
        result = pipe(img)
        expected = to_canvas_height(img)
        assert expected.shape == (128, line_width(height, width), 3)
        # exact: pads cropped off at the right offset, windows blended without seams
        assert np.array_equal(result.image, expected), (height, width)
        layout = plan_line(expected.shape[1], overlap)
        assert len(result.lines) == 1 and len(result.lines[0].window_texts) == layout.num_tiles
        scaled = pipe(img, outscale=2.5)
        assert np.array_equal(scaled.image, resize_rgb(expected, round(height * 2.5), round(width * 2.5)))
        assert scaled.outscale == 2.5 and result.outscale == 128 / height


def test_wide_lines_get_overlapping_windows_each_with_its_own_prior():
    pipe = TOLAPipeline(StandInRestorer(), overlap=128)
    result = pipe(random_image(20, 400), seed=5, names=['line.png'])  # 128 x 2560
    layout = plan_line(2560, 128)
    assert layout.num_tiles == 7 and layout.starts[0] == 0 and layout.starts[-1] == 2560 - 512
    assert min(a + 512 - b for a, b in zip(layout.starts, layout.starts[1:])) >= 128
    line = result.lines[0]
    assert len(set(line.window_texts)) == 7  # one prior per window (the stand-in writes each window's seed)
    assert line.prior_text == WINDOW_SEPARATOR.join(line.window_texts)
    assert len(line.token_confidences) == sum(len(t) for t in line.window_texts)
    assert line.prior_confidence == 0.5


def test_windows_blend_with_linear_ramps():
    width = 1100
    layout = plan_line(width, 200)
    weights = window_weights(layout)
    tiles = np.stack([np.full((2, 512, 1), float(k)) for k in range(layout.num_tiles)])
    line = blend_tiles(tiles, layout)[0, :, 0]
    for k in range(layout.num_tiles - 1):
        a, b = layout.starts[k + 1], layout.starts[k] + 512  # the overlap of windows k and k + 1
        assert b - a >= 200
        # only two windows there: their weights are complementary ramps, and the blend goes k -> k + 1 linearly
        assert np.allclose(weights[k, a - layout.starts[k]:] + weights[k + 1, :b - a], 1.0)
        ramp = line[a:b]
        assert np.allclose(ramp, k + (np.arange(b - a) + 0.5) / (b - a))
    assert np.all(line[:layout.starts[1]] == 0) and np.all(line[layout.starts[-2] + 512:] == layout.num_tiles - 1)


def test_narrow_line_is_padded_not_stretched():
    line = random_image(128, 100)
    for mode in ('edge', 'reflect'):
        layout = plan_line(100, 128)
        tiles = cut_tiles(line, layout, mode)
        assert tiles.shape == (1, 128, 512, 3) and layout.pad_left == 206
        assert np.array_equal(tiles[0, :, 206:306], line)  # the line itself, unscaled, in the middle
        assert np.array_equal(blend_tiles(tiles.astype(np.float32), layout), line)
    with pytest.raises(ValueError, match='overlap'):
        plan_line(600, 512)


def test_inputs_paths_pil_numpy_alpha_gray_16bit(tmp_path):
    pipe = TOLAPipeline(StandInRestorer())
    rgba = np.zeros((32, 64, 4), np.uint8)
    rgba[8:24, 8:56] = (10, 20, 30, 255)  # opaque ink on a fully transparent background
    white = pipe(rgba).image
    assert white.shape == (128, 256, 3) and (white[0, 0] == 255).all()  # transparent -> white, never black
    assert (TOLAPipeline(StandInRestorer(), background=(0, 128, 0))(rgba).image[0, 0] == (0, 128, 0)).all()
    gray16 = (np.arange(32 * 64, dtype=np.uint16).reshape(32, 64) * 31)
    assert pipe(gray16).image.shape == (128, 256, 3)
    assert np.array_equal(pipe(Image.fromarray(rgba)).image, white)
    path = tmp_path / 'line.png'
    Image.fromarray(rgba).save(path)
    from_file = pipe(str(path))
    assert np.array_equal(from_file.image, white) and from_file.name == 'line.png'
    # an EXIF-rotated JPEG as PIL image: read upright (orientation 6 = rotate 90 degrees clockwise)
    buf = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(random_image(20, 100)).save(buf, format='JPEG', exif=exif)
    assert pipe(Image.open(buf)).image.shape == (128, 26, 3)
    with pytest.raises(ValueError, match='image 1: expected a file path'):
        pipe([rgba, 3.0])


def test_noise_seeds_do_not_depend_on_batching_or_position():
    a, b = random_image(30, 90, 1), random_image(20, 400, 2)
    alone = TOLAPipeline(StandInRestorer(), batch_size=1)(b, names=['b.png'])
    together = TOLAPipeline(StandInRestorer(), batch_size=4)([a, b], names=['a.png', 'b.png'])
    assert together[1].lines[0].window_texts == alone.lines[0].window_texts
    assert together[0].lines[0].window_texts != together[1].lines[0].window_texts[:1]
