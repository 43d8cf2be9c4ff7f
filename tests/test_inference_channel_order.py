"""The image boundary: the pipeline is RGB from its entry to its exit (paths, PIL images and arrays in, the network's
canvases, the restored image and the written file out), and PP-OCR's BGR appears only inside ``tola_plugin.ocr``.
A pure colour per channel shows any swap: red read or written as BGR comes back blue."""
import io

import numpy as np
import pytest
from PIL import Image

from tola_plugin import TOLAPipeline
from tola_plugin.commands.data_preparation.photo_render import render_photo
from tola_plugin.data.image_io import convert_array, convert_pil, decode_image, read_image_file, write_image
from tola_plugin.ocr.ppocr import PPOCRv4Detector
from inference_testing import PHOTO_LINES, StandInRestorer

RED = (230, 20, 10)  # RGB


class ChannelSpy(StandInRestorer):
    """The identity restorer, recording the mean of each channel of the canvases it is given."""

    def forward(self, lq, noise_seeds=None, return_intermediates=False):
        self.means = lq.mean((0, 2, 3)).tolist()
        return super().forward(lq, noise_seeds, return_intermediates)


def red_line(height=32, width=128):
    return np.tile(np.array(RED, np.uint8), (height, width, 1))


@pytest.mark.parametrize('kind', ['path', 'pil', 'array', 'rgba-array'])
def test_the_pipeline_is_rgb_from_entry_to_exit(tmp_path, kind):
    rgb = red_line()
    path = str(tmp_path / 'red.png')
    write_image(path, rgb, order='RGB')
    item = {
        'path': path, 'pil': Image.fromarray(rgb), 'array': rgb,
        'rgba-array': np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)])
    }[kind]
    spy = ChannelSpy()
    result = TOLAPipeline(spy, batch_size=1)(item, outscale=1)
    assert spy.means[0] > 0.85 and spy.means[2] < 0.1  # the network saw red in channel 0
    assert result.image.shape == rgb.shape and (np.abs(result.image.astype(int) - RED).max() <= 1)
    out = str(tmp_path / 'out.png')
    write_image(out, result.image, order='RGB')
    assert np.array_equal(read_image_file(out, order='RGB'), result.image)
    assert np.array_equal(read_image_file(out)[..., ::-1], result.image)  # the default order is OpenCV's BGR


def test_image_io_keeps_the_order_it_is_given():
    rgb = red_line(4, 4)
    bgr = np.ascontiguousarray(rgb[..., ::-1])
    assert np.array_equal(convert_array(rgb, 'x', order='RGB'), rgb)
    assert np.array_equal(convert_array(bgr, 'x'), bgr)
    # transparent pixels take the background colour, given as RGB, in the array's own order
    clear = np.zeros((2, 2, 4), np.uint8)
    assert (convert_array(clear, 'x', background=RED, order='RGB') == RED).all()
    assert (convert_array(clear, 'x', background=RED) == RED[::-1]).all()
    assert np.array_equal(convert_pil(Image.fromarray(rgb), 'x'), rgb)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, 'PNG')
    assert np.array_equal(decode_image(buf.getvalue(), 'x', order='RGB'), rgb)
    assert np.array_equal(decode_image(buf.getvalue(), 'x'), bgr)
    with pytest.raises(ValueError, match="channel order must be 'BGR' or 'RGB'"):
        decode_image(buf.getvalue(), 'x', order='rgb')


def test_write_image_is_whole_or_names_the_file(tmp_path):
    with pytest.raises(ValueError, match='out.png: expected an \\(H, W, 3\\) uint8 image'):
        write_image(str(tmp_path / 'out.png'), np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match='out.xyz: could not encode'):
        write_image(str(tmp_path / 'out.xyz'), red_line(4, 4))
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written


def test_the_detector_takes_rgb_and_converts_once():
    photo, _, _ = render_photo(PHOTO_LINES, height=480, width=640)
    detector = PPOCRv4Detector()
    quads = detector(photo)
    raw, _ = detector.engine(np.ascontiguousarray(photo[..., ::-1]), use_det=True, use_cls=False, use_rec=False)
    assert len(quads) == len(PHOTO_LINES) and np.array_equal(quads, np.float32(raw).reshape(-1, 4, 2))
    with pytest.raises(ValueError, match='detector input 0: expected an HxWx3 uint8 RGB array'):
        detector(photo.astype(np.float32))
