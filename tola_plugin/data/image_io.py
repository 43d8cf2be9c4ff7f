"""The package's image boundary: reading (encoded bytes or a file), converting (numpy arrays, PIL images, alpha) and
writing images, all to and from uint8 (H, W, 3) in the channel order the caller names (``order``: 'BGR', OpenCV's
and BasicSR's, the default; or 'RGB', the inference pipeline's); and the one image lister (``scan_image_folder`` /
``list_image_files``: which files of a folder are images, and what was left out).

Datasets, inference, evaluation and the tools all read through ``decode_image`` / ``read_image_file`` /
``convert_array`` / ``convert_pil`` and write through ``write_image`` (figures: ``write_pil_image``,
``write_figure``); this module is also the package's one float -> uint8 conversion (``to_uint8``,
``tensor_to_uint8``) and its one BGR <-> RGB swap (``convert_order``):
- one image budget: the size the file declares is read from its header first (Pillow, without decoding the
  pixels), and an image over ``max_pixels`` (DEFAULT_MAX_PIXELS, 64 megapixels) is refused by name before any
  decoding (``ImageTooLargeError``); a decompression bomb costs a few kilobytes of reading;
- 8-bit, 16-bit (scaled to 8 bits) and float images (values in [0, 1], checked), grayscale or colour, palette
  images, CMYK JPEGs (OpenCV converts them to BGR); GIF and multi-page TIFF: the first frame;
- an alpha channel is composited over ``background`` (white by default): a transparent background never turns
  black, and a half-transparent stroke keeps its shade;
- the EXIF orientation is applied (as PIL's ``ImageOps.exif_transpose``), so a phone photo is read upright;
- anything else (no bytes, truncated, not an image, an error of any decoding library) is the one ValueError
  "<file>: not a decodable image (...)";
- a written file appears whole or not at all (``atomic_write``); an error names it.
"""
import io
import os
import warnings
from dataclasses import dataclass, field
from typing import BinaryIO, List, Optional, Sequence, Tuple

import cv2
import numpy as np
from PIL import Image, ImageOps, TiffImagePlugin

from tola_plugin.utils.atomic_files import atomic_write
from tola_plugin.utils.user_paths import check_regular_file

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.webp', '.tif', '.tiff', '.gif')  # lower case
WHITE = (255, 255, 255)
DEFAULT_MAX_PIXELS = 64_000_000  # the image budget: 64 megapixels (a 48 MP phone photo fits; 192 MB as 8-bit BGR)
CV_MAX_PIXELS = 1 << 30  # OpenCV's own ceiling (CV_IO_MAX_IMAGE_PIXELS), above which imdecode raises
FLOAT_SLACK = 0.5 / 255  # floats this far outside [0, 1] still round to 0 or 255: accepted (and clipped)
ORDERS = ('BGR', 'RGB')  # channel orders of the arrays going in and out
ROUNDINGS = ('half_even', 'half_up')  # of to_uint8
PEAKS = (1.0, 255.0)  # the float values to_uint8 maps to 255
JPEG_QUALITY = 95  # of write_image's JPEG files
_EXIF_ORIENTATION = 0x0112


class ImageTooLargeError(ValueError):
    """An image whose header declares more pixels than the budget (refused before decoding); ``width``, ``height``
    and ``max_pixels`` say by how much (None when only Pillow's bomb check knows)."""

    def __init__(self, message: str, width: Optional[int] = None, height: Optional[int] = None,
                 max_pixels: Optional[int] = None):
        super().__init__(message)
        self.width, self.height, self.max_pixels = width, height, max_pixels


def pixel_ceiling() -> int:
    """The largest budget the reader can honour: Pillow's decompression-bomb error threshold (2 x
    ``Image.MAX_IMAGE_PIXELS``, 178,956,970 pixels by default; it refuses to read larger headers) and OpenCV's
    ``CV_IO_MAX_IMAGE_PIXELS`` (2^30), whichever is lower."""
    pil = Image.MAX_IMAGE_PIXELS
    return CV_MAX_PIXELS if pil is None else min(CV_MAX_PIXELS, 2 * int(pil))


def check_max_pixels(max_pixels, what: str = 'max_pixels') -> Optional[int]:
    """A validated image budget (pixels): a positive number up to ``pixel_ceiling()``; None: no budget of ours
    (the libraries' ceilings still apply)."""
    if max_pixels is None:
        return None
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, (int, float, np.integer, np.floating)) \
            or not 0 < max_pixels <= pixel_ceiling():
        raise ValueError(f'{what} (the image budget; --max-megapixels x 1e6) must be a number of pixels in (0, '
                         f'{pixel_ceiling():,}] (the ceiling is Pillow\'s own decompression-bomb limit), got '
                         f'{short_number(max_pixels)}')
    return int(max_pixels)


def short_number(value) -> str:
    """``value`` as an error shows it: a number in at most 6 significant digits (``1e+306``, not 307 digits)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return repr(value)
    if isinstance(value, (int, np.integer)) and abs(value) < 10**15:
        return f'{value:,}'
    try:
        return f'{float(value):.6g}'
    except OverflowError:  # an int beyond float's range
        return f'an integer of {len(str(abs(int(value))))} digits'


def megapixels(pixels: float) -> str:
    return f'{pixels / 1e6:.3g} megapixels'


def budget_error(what: str, width: int, height: int, max_pixels: int) -> ImageTooLargeError:
    return ImageTooLargeError(
        f'{what}: {width}x{height} pixels ({megapixels(width * height)}) is over the image budget of '
        f'{megapixels(max_pixels)}; refused before decoding (raise the limit with --max-megapixels, or max_pixels= '
        f'in Python)', width, height, max_pixels)


def not_decodable(what: str, size: int, detail: str = '') -> ValueError:
    """The one error of a file no library could decode."""
    detail = f'; {detail}' if detail else ''
    return ValueError(f'{what}: not a decodable image ({size} bytes; empty, truncated or not an image file{detail})')


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f'{type(err).__name__}: {lines[-1] if lines else ""}'.rstrip(': ')


def _tiff_size(fp: BinaryIO) -> Optional[Tuple[int, int]]:
    """(width, height) from the first directory of a TIFF whose pixel layout Pillow does not support (e.g. 3-channel
    float, which OpenCV decodes), read with Pillow's own TIFF tag reader."""
    fp.seek(0)
    head = fp.read(16)
    if head[:4] not in TiffImagePlugin.PREFIXES:
        return None
    try:
        ifd = TiffImagePlugin.ImageFileDirectory_v2(head[:16] if 43 in head[2:4] else head[:8])  # BigTIFF: 16 bytes
        fp.seek(ifd.next)
        ifd.load(fp)
        return int(ifd[256]), int(ifd[257])
    except Exception:  # noqa: BLE001  Pillow raises many types for broken tag directories
        return None


def declared_size(fp: BinaryIO, what: str, size: int) -> Tuple[int, int]:
    """(width, height) that the image in ``fp`` declares, read from its header without decoding the pixels
    (Pillow's lazy open; TIFF tags when Pillow does not support the layout). A header no library understands is
    "not a decodable image"; one beyond Pillow's bomb limit is an ImageTooLargeError."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # DecompressionBombWarning and format warnings: we judge the size ourselves
        try:
            fp.seek(0)
            with Image.open(fp) as im:
                return im.size
        except Image.DecompressionBombError:
            raise ImageTooLargeError(
                f'{what}: its header declares more than {pixel_ceiling():,} pixels (Pillow\'s '
                f'decompression-bomb limit, above any image budget); refused before decoding',
                max_pixels=pixel_ceiling()) from None
        except Exception as err:  # noqa: BLE001  UnidentifiedImageError, SyntaxError, OSError, struct.error, ...
            found = _tiff_size(fp)
            if found is None:
                raise not_decodable(what, size, f'no image header: {_first_line(err)}') from None
            return found


def _exif_orientation(data: bytes) -> int:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            with Image.open(io.BytesIO(data)) as im:
                return int(im.getexif().get(_EXIF_ORIENTATION, 1))
    except Exception:  # no EXIF block or a format PIL does not parse: nothing to rotate
        return 1


def _header_size(f, path: str) -> Tuple[int, int]:
    """(width, height) an open image file declares in its header; an empty file is not decodable."""
    size = os.fstat(f.fileno()).st_size
    if size == 0:
        raise not_decodable(path, 0)
    return declared_size(f, path, size)


def upright_size(path: str) -> Tuple[int, int]:
    """(height, width) of the image ``read_image_file`` reads from ``path``, from its header without decoding: the
    declared size, turned by the EXIF orientation. A PNG's EXIF is taken from before its pixels only (Pillow would
    decode them to look behind): a PNG whose EXIF follows its pixels counts as upright here. Raises as
    ``read_image_file`` does for a file it cannot read."""
    check_regular_file(path, 'image file', 'an image file')
    with open(path, 'rb') as f:
        width, height = _header_size(f, path)
        orientation = 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                f.seek(0)
                with Image.open(f) as im:
                    if im.format != 'PNG' or 'exif' in im.info:
                        orientation = int(im.getexif().get(_EXIF_ORIENTATION, 1))
        except Exception:  # noqa: BLE001  no EXIF block, or one Pillow does not parse: nothing to turn
            pass
    return (width, height) if orientation in (5, 6, 7, 8) else (height, width)


def _orient(img: np.ndarray, orientation: int) -> np.ndarray:
    """Apply an EXIF orientation (1-8), as PIL's ``ImageOps.exif_transpose``."""
    ops = {
        2: lambda x: x[:, ::-1], 3: lambda x: x[::-1, ::-1], 4: lambda x: x[::-1], 5: lambda x: x.swapaxes(0, 1),
        6: lambda x: np.rot90(x, -1), 7: lambda x: x[::-1, ::-1].swapaxes(0, 1), 8: lambda x: np.rot90(x, 1)
    }
    return np.ascontiguousarray(ops[orientation](img)) if orientation in ops else img


def _float_to_unit(img: np.ndarray, what: str, value_range) -> np.ndarray:
    """A float image -> float in [0, 1]: NaN/inf refused; ``value_range`` (low, high) maps that range to [0, 1];
    values outside [0, 1] by more than FLOAT_SLACK are an error (one that says so when they look like 0-255)."""
    img = img.astype(np.float32, copy=False)
    if value_range is not None:
        low, high = (float(v) for v in value_range)
        if not (np.isfinite(low) and np.isfinite(high) and high > low):
            raise ValueError(f'value_range must be (low, high) with finite low < high, got {value_range!r}')
        img = (img - np.float32(low)) * np.float32(1.0 / (high - low))
    finite = np.isfinite(img)
    if not finite.all():
        raise ValueError(f'{what}: {int(finite.size - finite.sum())} NaN or infinite pixel value(s); float images '
                         f'must hold finite values in [0, 1]')
    low, high = float(img.min()), float(img.max())
    if low >= -FLOAT_SLACK and high <= 1.0 + FLOAT_SLACK:
        return img
    if value_range is not None:
        raise ValueError(f'{what}: float pixels in [{low:.4g}, {high:.4g}] after mapping value_range {value_range}; '
                         f'the image holds values outside that range')
    if low >= -FLOAT_SLACK and high <= 255.0 + FLOAT_SLACK:
        raise ValueError(f'{what}: float pixels in [{low:.4g}, {high:.4g}] look like the 0-255 range; float images '
                         f'must be in [0, 1] (divide by 255, or pass value_range=(0, 255))')
    raise ValueError(f'{what}: float pixels in [{low:.4g}, {high:.4g}], outside [0, 1] (pass value_range=(low, high) '
                     f'to map your range to [0, 1])')


def to_uint8(img: np.ndarray, rounding: str = 'half_even', peak: float = 1.0) -> np.ndarray:
    """Float pixels -> uint8 of the same shape: the package's one float -> 8-bit conversion.

    Values are clipped to [0, ``peak``] (1.0, or 255.0 for images computed on the 0-255 scale), scaled by 255 / peak
    and rounded, in the array's own precision (float64 stays float64; any other type is computed in float32).
    rounding: 'half_even' (numpy's ``rint``; BasicSR's ``tensor2img``: network outputs, metrics, the datasets' JPEG
    step, rendered lines) or 'half_up' (+0.5, then truncation: the reader's float images, alpha composites). The
    two differ only where x * 255 rounds to a half level in float32 (130 of the 1.07e9 float32 values in [0, 1]),
    and each call site keeps the rounding it has always had. NaN is not checked here: the reader refuses it first
    (``convert_array``) and the network's outputs are checked finite where they are made.
    """
    if rounding not in ROUNDINGS:
        raise ValueError(f'rounding must be one of {ROUNDINGS}, got {rounding!r}')
    if peak not in PEAKS:
        raise ValueError(f'peak must be one of {PEAKS}, got {peak!r}')
    img = np.asarray(img)
    img = img if img.dtype == np.float64 else img.astype(np.float32, copy=False)
    scaled = np.clip(img, 0.0, peak)
    if peak == 1.0:
        scaled = scaled * img.dtype.type(255.0)
    if rounding == 'half_even':
        return np.rint(scaled).astype(np.uint8)
    return (scaled + img.dtype.type(0.5)).astype(np.uint8)


def tensor_to_uint8(x, rounding: str = 'half_even') -> np.ndarray:
    """A torch tensor (..., 3, H, W) of RGB values in [0, 1] (a batch or one image) -> uint8 (..., H, W, 3) RGB,
    C-contiguous, computed in float32 (``to_uint8``; 'half_even' is BasicSR's ``tensor2img`` without its BGR swap)."""
    if x.dim() < 3 or x.shape[-3] != 3:
        raise ValueError(f'expected a (..., 3, H, W) image tensor, got shape {tuple(x.shape)}')
    return np.ascontiguousarray(to_uint8(np.moveaxis(x.detach().float().cpu().numpy(), -3, -1), rounding))


def _to_uint8(img: np.ndarray, what: str, value_range=None) -> np.ndarray:
    if np.issubdtype(img.dtype, np.floating):
        return to_uint8(_float_to_unit(img, what, value_range), 'half_up')
    if value_range is not None:
        raise ValueError(f'{what}: value_range applies to float images, got {img.dtype} pixels')
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:
        return ((img.astype(np.uint32) + 128) // 257).astype(np.uint8)  # 65535 -> 255, rounded
    raise ValueError(f'{what}: unsupported pixel type {img.dtype} (expected 8-bit, 16-bit or float in [0, 1])')


def _composite(colour_alpha: np.ndarray, back: Sequence[int]) -> np.ndarray:
    """(H, W, 4) uint8 colour + alpha -> (H, W, 3) uint8 over the colour ``back``, given in the array's own channel
    order."""
    alpha = colour_alpha[..., 3:4].astype(np.float32) / 255.0
    out = colour_alpha[..., :3].astype(np.float32) * alpha + np.array(back, np.float32).reshape(1, 1, 3) * (1.0 - alpha)
    return to_uint8(out, 'half_up', peak=255.0)


def check_background(background: Sequence[int]) -> None:
    """``background`` must be an RGB colour: three values in [0, 255]."""
    if len(background) != 3 or not all(0 <= int(c) <= 255 for c in background):
        raise ValueError(f'background must be an RGB colour of three values in [0, 255], got {background!r}')


def _check_order(order: str) -> str:
    if order not in ORDERS:
        raise ValueError(f"channel order must be 'BGR' or 'RGB', got {order!r}")
    return order


def convert_order(img: np.ndarray, source: str, target: str) -> np.ndarray:
    """(..., 3) pixels in channel order ``source`` -> ``target`` ('BGR' or 'RGB'): the same array when the two are
    equal, else the channels reversed (a contiguous copy; any dtype). The package's one channel swap."""
    if _check_order(source) == _check_order(target):
        return img
    if img.ndim < 1 or img.shape[-1] != 3:
        raise ValueError(f'{source} -> {target}: expected (..., 3) pixels, got shape {img.shape}')
    return np.ascontiguousarray(img[..., ::-1])


def _bgr_swap(img: np.ndarray, order: str) -> np.ndarray:
    """OpenCV's BGR <-> ``order`` (the reversal is its own inverse, so this serves both ways)."""
    return convert_order(img, 'BGR', order)


def convert_array(img: np.ndarray, what: str, background: Sequence[int] = WHITE, order: str = 'BGR',
                  value_range: Optional[Tuple[float, float]] = None) -> np.ndarray:
    """An in-memory image -> uint8 (H, W, 3) in the same channel order, by the rules of ``decode_image`` (no EXIF:
    arrays have none).

    img: (H, W) gray, (H, W, 2) gray + alpha, (H, W, 3) colour or (H, W, 4) colour + alpha; uint8, uint16 or float
    in [0, 1] (NaN/inf and values outside [0, 1] are errors; ``value_range=(low, high)`` maps another float range,
    e.g. (0, 255), to [0, 1]). order: 'BGR' (OpenCV's) or 'RGB' (PIL's, numpy users') channel order of ``img``
    and of the result. background: RGB colour under transparent pixels.
    """
    check_background(background)
    back = tuple(background) if _check_order(order) == 'RGB' else tuple(background[::-1])
    if not isinstance(img, np.ndarray) or img.ndim not in (2, 3) or img.size == 0:
        raise ValueError(f'{what}: expected an (H, W) or (H, W, C) image array, got {type(img).__name__} '
                         f'{getattr(img, "shape", "")}')
    img = _to_uint8(img, what, value_range)
    if img.ndim == 2:
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)  # gray to three equal channels: the same in either order
    elif img.shape[2] == 1:
        img = cv2.cvtColor(img[..., 0], cv2.COLOR_GRAY2BGR)
    elif img.shape[2] == 2:  # gray + alpha
        img = _composite(np.dstack([img[..., :1].repeat(3, 2), img[..., 1:]]), back)
    elif img.shape[2] == 4:
        img = _composite(img, back)
    elif img.shape[2] != 3:
        raise ValueError(f'{what}: {img.shape[2]} channels (expected gray, colour or colour + alpha)')
    return np.ascontiguousarray(img)


def convert_pil(image: Image.Image, what: str, background: Sequence[int] = WHITE,
                value_range: Optional[Tuple[float, float]] = None) -> np.ndarray:
    """A PIL image (any mode; its EXIF orientation applied) -> RGB uint8 (H, W, 3), by the rules of
    ``convert_array`` (16-bit gray, float 'F' with ``value_range``, palette and premultiplied alpha, CMYK, YCbCr,
    LAB, HSV). Pixels a lazy PIL image cannot load (truncated, corrupt) are "not a decodable image"."""
    try:
        image = ImageOps.exif_transpose(image)
        if image.mode in ('P', 'PA'):
            image = image.convert('RGBA' if image.mode == 'PA' or 'transparency' in image.info else 'RGB')
        elif image.mode in ('1', ):
            image = image.convert('L')
        elif image.mode in ('La', 'RGBa'):  # premultiplied alpha
            image = image.convert(image.mode.upper())
        elif image.mode not in ('L', 'LA', 'RGB', 'RGBA', 'I', 'F') and not image.mode.startswith('I;16'):
            image = image.convert('RGB')  # CMYK, YCbCr, LAB, HSV
        array = np.asarray(image)
    except (OSError, SyntaxError, Image.DecompressionBombError) as err:  # PIL's errors while loading pixels
        raise not_decodable(what, 0, f'{type(err).__name__}: {err}') from None
    if image.mode == 'I' or image.mode.startswith('I;16'):  # 16-bit gray (PIL opens some as 32-bit 'I')
        if array.min() < 0 or array.max() > 65535:
            raise ValueError(f'{what}: 32-bit integer pixels outside the 16-bit range')
        array = array.astype(np.uint16)
    return convert_array(array, what, background, order='RGB', value_range=value_range)


def _decode(data: bytes, what: str, background: Sequence[int], max_pixels: Optional[int], order: str) -> np.ndarray:
    try:
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as err:  # OpenCV's own size ceiling, codec failures
        raise not_decodable(what, len(data), f'OpenCV: {_first_line(err)}') from None
    if img is None or img.size == 0:
        raise not_decodable(what, len(data))
    if max_pixels is not None and img.shape[0] * img.shape[1] > max_pixels:  # a header that understated the size
        raise budget_error(what, img.shape[1], img.shape[0], max_pixels)
    return _bgr_swap(_orient(convert_array(img, what, background), _exif_orientation(data)), order)


def decode_image(data: bytes, what: str, background: Sequence[int] = WHITE,
                 max_pixels: Optional[int] = DEFAULT_MAX_PIXELS, order: str = 'BGR') -> np.ndarray:
    """Encoded bytes -> uint8 (H, W, 3) in channel ``order`` ('BGR' or 'RGB'). ``what`` names the source in errors;
    ``background``: RGB colour under transparent pixels; ``max_pixels``: the image budget, checked on the header
    before decoding (None: only the libraries' own ceilings)."""
    check_background(background)
    _check_order(order)
    max_pixels = check_max_pixels(max_pixels)
    if not data:
        raise not_decodable(what, 0)
    width, height = declared_size(io.BytesIO(data), what, len(data))
    if max_pixels is not None and width * height > max_pixels:
        raise budget_error(what, width, height, max_pixels)
    return _decode(data, what, background, max_pixels, order)


def read_image_file(path: str, background: Sequence[int] = WHITE, max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
                    order: str = 'BGR') -> np.ndarray:
    """uint8 (H, W, 3) in channel ``order`` from a file (see ``decode_image``): the header is read first, so a file
    over the budget is refused after reading a few kilobytes of it; a missing or unreadable file names its path, a
    path that is not a regular file (a folder, a FIFO, a device, a symlink loop) says what it is, before it is
    opened."""
    check_background(background)
    _check_order(order)
    max_pixels = check_max_pixels(max_pixels)
    check_regular_file(path, 'image file', 'an image file')
    with open(path, 'rb') as f:
        width, height = _header_size(f, path)
        if max_pixels is not None and width * height > max_pixels:
            raise budget_error(path, width, height, max_pixels)
        f.seek(0)
        data = f.read()
    return _decode(data, path, background, max_pixels, order)


def encode_image(img: np.ndarray, ext: str, what: str, order: str = 'BGR') -> bytes:
    """uint8 (H, W, 3) in channel ``order`` -> the bytes of an ``ext`` file ('.png'; '.jpg' at quality
    JPEG_QUALITY; any other format OpenCV writes). ``what`` names the image in errors (ValueError)."""
    ext = ext.lower()
    if not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f'{what}: expected an (H, W, 3) uint8 image to write, got {getattr(img, "dtype", type(img))} '
                         f'{getattr(img, "shape", "")}')
    params = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if ext in ('.jpg', '.jpeg') else []
    try:
        ok, data = cv2.imencode(ext, _bgr_swap(img, order), params)
    except cv2.error as err:
        raise ValueError(f'{what}: could not encode the image as {ext or "(none)"}: {_first_line(err)}') from None
    if not ok:
        raise ValueError(f'{what}: could not encode the image as {ext}')
    return data.tobytes()


def jpeg_round_trip(img: np.ndarray, quality: int, order: str = 'BGR') -> np.ndarray:
    """uint8 (H, W, 3) in channel ``order`` -> the same image after JPEG compression at ``quality`` (OpenCV's
    encoder and decoder, in memory): the degradation chains' JPEG step."""
    ok, buf = cv2.imencode('.jpg', _bgr_swap(img, order), [int(cv2.IMWRITE_JPEG_QUALITY), int(quality)])
    if not ok:
        raise RuntimeError('cv2.imencode failed')
    return _bgr_swap(cv2.imdecode(buf, cv2.IMREAD_COLOR), order)


def write_file_bytes(path: str, data: bytes) -> None:
    """The encoded bytes of an image or figure -> the file ``path``, written atomically (``atomic_write``: whole or
    not at all), its folder made if needed."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)

    def fill(tmp):
        with open(tmp, 'wb') as f:
            f.write(data)

    atomic_write(path, fill)


def write_image(path: str, img: np.ndarray, order: str = 'BGR') -> None:
    """uint8 (H, W, 3) in channel ``order`` -> the file ``path``, its format from the extension (``encode_image``),
    written atomically, its folder made if needed; errors name the file."""
    write_file_bytes(path, encode_image(img, os.path.splitext(path)[1], path, order))


def _file_format(path: str, formats, what: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in formats:
        raise ValueError(f'{path}: {what} cannot write {ext or "a file without an extension"} files')
    return formats[ext]


def write_pil_image(path: str, image: Image.Image, **params) -> None:
    """A PIL image -> the file ``path`` in the format its extension names, with Pillow's save ``params`` (e.g. a
    palette PNG with ``optimize=True``), written as ``write_image`` writes."""
    buf = io.BytesIO()
    image.save(buf, format=_file_format(path, Image.registered_extensions(), 'Pillow'), **params)
    write_file_bytes(path, buf.getvalue())


def write_figure(path: str, figure, **params) -> None:
    """A matplotlib figure -> the file ``path`` in the format its extension names ('.png', '.pdf', ...), with
    ``savefig``'s ``params``, written as ``write_image`` writes."""
    formats = {f'.{ext}': ext for ext in figure.canvas.get_supported_filetypes()}
    buf = io.BytesIO()
    figure.savefig(buf, format=_file_format(path, formats, 'matplotlib'), **params)
    write_file_bytes(path, buf.getvalue())


@dataclass
class FolderScan:
    """What a folder holds: ``images`` (paths relative to the folder, sorted: every entry with an image's name that
    is not a folder, so that a FIFO or a broken link among them fails by name when it is read), ``unsupported`` (other
    files, not hidden ones, relative paths, sorted), ``unreadable`` (subfolders that could not be listed, with the
    reason) and ``folders`` (without ``recursive``: subfolders named like images, e.g. ``x.png/``, which are not
    read)."""
    images: List[str] = field(default_factory=list)
    unsupported: List[str] = field(default_factory=list)
    unreadable: List[str] = field(default_factory=list)
    folders: List[str] = field(default_factory=list)  # subfolders named like images, not read (not recursive)


def scan_image_folder(folder: str, recursive: bool = False, skip_dir: str = '') -> FolderScan:
    """The files of ``folder`` with an image extension (``IMAGE_EXTENSIONS``, any case) directly in it, or with
    ``recursive`` also in its subfolders (``skip_dir``, e.g. an output folder inside the input folder, is left
    out), and what was left out: other files, and subfolders that cannot be listed. A missing folder is a
    FileNotFoundError, one that cannot be listed a PermissionError (OSError) naming it."""
    if not os.path.isdir(folder):
        raise FileNotFoundError(f'image folder not found: {folder}')
    try:
        os.listdir(folder)
    except OSError as err:
        unlisted = type(err)(f'cannot list the image folder {folder}: {err.strerror}')
        unlisted.errno = err.errno
        raise unlisted from None
    skip = os.path.realpath(skip_dir) if skip_dir else ''
    scan = FolderScan()

    def unreadable(err: OSError) -> None:
        scan.unreadable.append(f'{err.filename}: {err.strerror}')

    for root, dirs, files in os.walk(folder, onerror=unreadable):
        if not recursive:
            scan.folders.extend(d + '/' for d in dirs if d.lower().endswith(IMAGE_EXTENSIONS))
        dirs[:] = sorted(d for d in dirs if os.path.realpath(os.path.join(root, d)) != skip) if recursive else []
        rel = os.path.relpath(root, folder)
        for name in files:
            path = name if rel == '.' else os.path.join(rel, name)
            if name.lower().endswith(IMAGE_EXTENSIONS):
                scan.images.append(path)
            elif not name.startswith('.'):
                scan.unsupported.append(path)
    scan.images.sort()
    scan.unsupported.sort()
    scan.unreadable.sort()
    scan.folders.sort()
    return scan


def list_image_files(folder: str, recursive: bool = False, skip_dir: str = '') -> List[str]:
    """Sorted paths, relative to ``folder``, of its image files (``scan_image_folder``; what was left out is not
    reported here). An empty list is the caller's to judge."""
    return scan_image_folder(folder, recursive, skip_dir).images
