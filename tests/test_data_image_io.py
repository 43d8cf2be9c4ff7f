"""The one image reader: every kind of file a user has reads as the picture a viewer shows, or fails naming it."""
import io

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

from tola_plugin.data.image_io import decode_image, list_image_files, read_image_file


def encode(pil_image, fmt, **kwargs):
    buf = io.BytesIO()
    pil_image.save(buf, fmt, **kwargs)
    return buf.getvalue()


@pytest.fixture(scope='module')
def rgb():
    """A small RGB picture with a horizontal gradient (orientation-sensitive)."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (12, 20, 3)).astype(np.uint8)
    img[:, :, 0] = np.linspace(0, 255, 20, dtype=np.uint8)[None]
    return img


def test_rgb_png_and_jpeg_read_as_bgr(rgb):
    assert np.array_equal(decode_image(encode(Image.fromarray(rgb), 'PNG'), 'x'), rgb[..., ::-1])
    jpeg = decode_image(encode(Image.fromarray(rgb), 'JPEG', quality=95), 'x')
    assert jpeg.shape == rgb.shape and jpeg.dtype == np.uint8


def test_transparent_background_is_white_not_black(rgb):
    rgba = np.dstack([rgb, np.zeros(rgb.shape[:2], np.uint8)])
    rgba[4:8, 5:15, 3] = 255  # an opaque stroke on a transparent background
    rgba[0, 0, 3] = 128  # a half-transparent pixel
    data = encode(Image.fromarray(rgba, 'RGBA'), 'PNG')
    out = decode_image(data, 'x')
    assert out.shape == rgb.shape
    assert (out[8:, :, :] == 255).all()  # transparent -> white
    assert np.array_equal(out[4:8, 5:15], rgb[4:8, 5:15, ::-1])  # opaque -> unchanged
    expected = np.round(rgb[0, 0, ::-1] * (128 / 255) + 255 * (1 - 128 / 255)).astype(np.uint8)
    assert np.abs(out[0, 0].astype(int) - expected).max() <= 1  # blended (one rounding step)
    grey = decode_image(data, 'x', background=(10, 20, 30))
    assert (grey[8:, :] == (30, 20, 10)).all()  # RGB option, BGR result
    with pytest.raises(ValueError, match='background'):
        decode_image(data, 'x', background=(0, 0))


def test_gray_palette_and_gray_alpha(rgb):
    gray = rgb[..., 1]
    out = decode_image(encode(Image.fromarray(gray, 'L'), 'PNG'), 'x')
    assert out.shape == (12, 20, 3) and all(np.array_equal(out[..., c], gray) for c in range(3))
    la = np.dstack([gray, np.full_like(gray, 0)])
    assert (decode_image(encode(Image.fromarray(la, 'LA'), 'PNG'), 'x') == 255).all()
    palette = Image.fromarray(rgb).convert('P')
    assert np.array_equal(decode_image(encode(palette, 'PNG'), 'x'), np.asarray(palette.convert('RGB'))[..., ::-1])
    bilevel = decode_image(encode(Image.fromarray(gray).convert('1'), 'PNG'), 'x')
    assert set(np.unique(bilevel)) <= {0, 255}


def test_16_bit_and_float_scale_to_8_bit(rgb):
    ok, png16 = cv2.imencode('.png', rgb[..., ::-1].astype(np.uint16) * 257)
    assert np.array_equal(decode_image(png16.tobytes(), 'x'), rgb[..., ::-1])
    float_tiff = encode(Image.fromarray(rgb[..., 0].astype(np.float32) / 255), 'TIFF')
    assert np.array_equal(decode_image(float_tiff, 'x')[..., 0], rgb[..., 0])


def test_cmyk_jpeg_reads_as_pil_shows_it(rgb):
    cmyk = Image.fromarray(rgb).convert('CMYK')
    data = encode(cmyk, 'JPEG', quality=95)
    pil = np.asarray(Image.open(io.BytesIO(data)).convert('RGB'))[..., ::-1].astype(int)
    assert np.abs(decode_image(data, 'x').astype(int) - pil).mean() < 2  # two CMYK converters, same picture


@pytest.mark.parametrize('orientation', range(1, 9))
def test_exif_orientation_is_applied_as_pil_does(rgb, orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(Image.fromarray(rgb), 'PNG', exif=exif)
    upright = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert('RGB'))[..., ::-1]
    assert np.array_equal(decode_image(data, 'x'), upright)


def test_broken_files_name_themselves(tmp_path, rgb):
    good = encode(Image.fromarray(rgb), 'PNG')
    jpeg = encode(Image.fromarray(rgb), 'JPEG')
    for name, data in (('empty.png', b''), ('cut.png', good[:len(good) // 2]), ('cut.jpg', jpeg[:len(jpeg) // 2]),
                       ('text.png', b'not an image at all')):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(ValueError, match=name):
            read_image_file(str(path))
    with pytest.raises(FileNotFoundError, match='missing.png'):
        read_image_file(str(tmp_path / 'missing.png'))


def test_list_image_files_flat_recursive_and_skip(tmp_path):
    for rel in ('b.PNG', 'a.jpg', 'notes.txt', 'sub/c.webp', 'out/d.png'):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b'')
    assert list_image_files(str(tmp_path)) == ['a.jpg', 'b.PNG']
    assert list_image_files(str(tmp_path), recursive=True) == ['a.jpg', 'b.PNG', 'out/d.png', 'sub/c.webp']
    assert list_image_files(str(tmp_path), recursive=True,
                            skip_dir=str(tmp_path / 'out')) == ['a.jpg', 'b.PNG', 'sub/c.webp']
    with pytest.raises(FileNotFoundError, match='image folder not found'):
        list_image_files(str(tmp_path / 'missing'))
