"""``TOLAPipeline``: restore text images of any size and aspect, single lines or whole photos, with a TOLA model.

    from tola_plugin import TOLAPipeline
    pipe = TOLAPipeline.from_merged('experiments/demo_TOLA/TOLA_demo_merged.safetensors')
    result = pipe('photo.jpg', detect=True)   # result.image: restored RGB uint8; result.lines: text prior per line

A thin layer over ``TOLANet`` (which does all the restoring): geometry (``line_geometry``: aspect kept, narrow
lines padded, wide lines cut into overlapping windows and blended; ``photo_geometry``: detected lines rectified and
pasted back), batching of the 128x512 canvases, and input conversion (paths through the package's one image
reader, ``tola_plugin.data.image_io``). docs/restore.md describes the behaviour.
"""
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from PIL import Image, ImageOps

from tola_plugin.archs.tola_arch import image_noise_seed
from tola_plugin.data.image_io import WHITE, convert_array, read_image_file
from tola_plugin.data.text_line_source import CANVAS_H
from tola_plugin.inference.line_geometry import (PAD_MODES, LineLayout, blend_tiles, cut_tiles, plan_line, resize_rgb,
                                                 to_canvas_height, to_uint8)
from tola_plugin.inference.photo_geometry import expand_quad, paste_strip, reading_quad, rectify, scale_quad

# The merged model that `make demo` exports (relative to the working directory, like the demo's experiments/).
DEMO_MODEL = os.path.join('experiments', 'demo_TOLA', 'TOLA_demo_merged.safetensors')
WINDOW_SEPARATOR = ' | '  # between the text priors of the windows of one wide line
AUTO_OUTSCALE_RANGE = (1.0, 4.0)  # detect mode without outscale: lines to the canvas height, within this range

ImageInput = Union[str, os.PathLike, np.ndarray, Image.Image]


@dataclass
class LineResult:
    """One restored text line.

    prior_text: the text prior TransOCR read from the line (the windows' texts of a wide line joined by
        WINDOW_SEPARATOR); window_texts: one per window; token_confidences: the prior's per-character
        confidences, all windows in order; prior_confidence: their mean (0.0 for an empty prior).
    polygon: with detect, the line's quadrilateral in input pixel coordinates ([x, y] top-left, top-right,
        bottom-right, bottom-left), else None.
    text_before / text_after (+ confidences): PP-OCRv4's reading of the line before and after restoring (when
        recognition was asked for), else None.
    """
    prior_text: str
    prior_confidence: float
    token_confidences: List[float]
    window_texts: List[str]
    polygon: Optional[List[List[float]]] = None
    text_before: Optional[str] = None
    confidence_before: Optional[float] = None
    text_after: Optional[str] = None
    confidence_after: Optional[float] = None

    def to_dict(self) -> Dict:
        return asdict(self)


@dataclass
class Restoration:
    """The restored image (RGB uint8, (H, W, 3)) and its lines; input_size = (H, W) of the input as read;
    outscale = output size / input size (per axis up to rounding)."""
    image: np.ndarray
    lines: List[LineResult]
    input_size: Tuple[int, int]
    outscale: float
    name: str = ''
    detected: bool = False

    def to_dict(self) -> Dict:
        """JSON-ready summary (no pixels): sizes, outscale and the lines."""
        return dict(name=self.name, input_size=list(self.input_size), output_size=list(self.image.shape[:2]),
                    outscale=self.outscale, detected=self.detected, lines=[line.to_dict() for line in self.lines])


@dataclass
class _Line:
    """A line being restored: its strip (uint8 RGB, native resolution), canvases and, after the network, priors."""
    image_index: int
    strip: np.ndarray
    layout: LineLayout
    tiles: np.ndarray
    seeds: List[int]
    quad: Optional[np.ndarray] = None
    polygon: Optional[np.ndarray] = None
    restored: Optional[np.ndarray] = None
    texts: List[str] = field(default_factory=list)
    confidences: List[List[float]] = field(default_factory=list)
    before: Optional[object] = None  # PP-OCRv4 Recognition of the strip and of the restored strip
    after: Optional[object] = None


def _pil_to_bgr(image: Image.Image, what: str, background) -> np.ndarray:
    """PIL image (any mode; EXIF orientation applied) -> BGR uint8 through ``convert_array``."""
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
    if image.mode == 'I' or image.mode.startswith('I;16'):  # 16-bit gray (PIL opens some as 32-bit 'I')
        if array.min() < 0 or array.max() > 65535:
            raise ValueError(f'{what}: 32-bit integer pixels outside the 16-bit range')
        array = array.astype(np.uint16)
    return convert_array(array, what, background, order='RGB')


class TOLAPipeline:
    """Restore text images with a TOLA network: one image or a list, any size and aspect, optionally whole photos.

    net: a ``TOLANet`` (or any module with its inference contract: ``net(lq (B, 3, 128, 512) RGB in [0, 1],
        noise_seeds=[B ints], return_intermediates=True)`` -> dict with 'image' (B, 3, 128, 512) in [0, 1],
        'prior_texts' (B strings or None) and 'confidences' ((B, 24) or None)). Use ``from_merged`` or
        ``from_options`` to load one.
    overlap: minimum columns (at canvas height) shared by neighbouring windows of a wide line (0-511; 128).
    pad_mode: 'edge' or 'reflect', how a narrow line is padded to the canvas width.
    batch_size: canvases per network call.
    margin: detect mode: each detected line is grown by this fraction of its height on every side before it is
        restored (context, and room for the feathered border; 0.15).
    feather: detect mode: width of the feathered border of a pasted line, as a fraction of its height (0.1).
    background: RGB colour under transparent pixels of the inputs.
    """

    def __init__(self, net: torch.nn.Module, overlap: int = 128, pad_mode: str = 'edge', batch_size: int = 1,
                 margin: float = 0.15, feather: float = 0.1, background: Sequence[int] = WHITE,
                 precision: Optional[str] = None):
        if pad_mode not in PAD_MODES:
            raise ValueError(f'pad_mode must be one of {PAD_MODES}, got {pad_mode!r}')
        plan_line(1, overlap)  # validates the overlap
        if int(batch_size) < 1:
            raise ValueError(f'batch_size must be >= 1, got {batch_size}')
        if not 0.0 <= float(margin) <= 1.0:
            raise ValueError(f'margin must be a fraction of the line height in [0, 1], got {margin}')
        if not 0.0 <= float(feather) <= 0.5:
            raise ValueError(f'feather must be a fraction of the line height in [0, 0.5], got {feather}')
        convert_array(np.zeros((1, 1, 3), np.uint8), 'background check', background)  # validates the colour
        self.net = net.eval().requires_grad_(False)
        self.overlap, self.pad_mode, self.batch_size = int(overlap), pad_mode, int(batch_size)
        self.margin, self.feather, self.background = float(margin), float(feather), tuple(int(c) for c in background)
        self.device = next(iter(net.parameters()), torch.zeros(0)).device
        self.detector = None  # PP-OCRv4 models, built on first use (rapidocr + onnxruntime)
        self.recognizer = None
        if precision is not None:
            self.set_precision(precision)

    # ------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_merged(cls, path: Optional[str] = None, network_overrides: Optional[Dict] = None, backend: str = 'torch',
                    **options) -> 'TOLAPipeline':
        """From a merged model (``tools/export_merged.py``) through ``TOLANet.load_for_inference`` (memory-mapped,
        inference-only); ``path`` None: the demo model (DEMO_MODEL, written by ``make demo``). network_overrides:
        TOLANet inference switches (timestep, noise, ...). backend: 'torch' or 'onnxruntime' (IDM and VAE on ONNX
        Runtime; needs ``export_merged.py --onnx``, docs/inference.md). options: see the class."""
        from tola_plugin.archs.tola_arch import TOLANet
        if path is None:
            if not os.path.isfile(DEMO_MODEL):
                raise FileNotFoundError(f'no model given and the demo model {DEMO_MODEL} does not exist (relative to '
                                        f'{os.getcwd()}); run `make demo` first, or give a merged model')
            path = DEMO_MODEL
        return cls(TOLANet.load_for_inference(path, backend=backend, **dict(network_overrides or {})), **options)

    @classmethod
    def from_options(cls, option_file: str, checkpoint: Optional[str] = None, network_overrides: Optional[Dict] = None,
                     **options) -> 'TOLAPipeline':
        """From a TOLA option file (its ``network_g``) and adaptation checkpoint (default: its
        ``path.pretrain_network_g``), made inference-only (``TOLANet.prepare_for_inference``: LoRA merged, same
        outputs, no adapter overhead)."""
        from tola_plugin.checkpoints.tola import build_tola_from_options
        net = build_tola_from_options(option_file, checkpoint)
        from tola_plugin.archs.tola_arch import LATENT_MODES, NOISE_MODES
        for name, value in dict(network_overrides or {}).items():
            allowed = {'noise': NOISE_MODES, 'latent': LATENT_MODES}.get(name)
            if name == 'timestep':
                net.set_timestep(value)
            elif allowed is None:
                raise ValueError(f'TOLAPipeline.from_options: cannot override {name!r} (timestep, noise, latent)')
            elif value not in allowed:
                raise ValueError(f'TOLAPipeline.from_options: {name} must be one of {allowed}, got {value!r}')
            else:
                setattr(net, name, value)
        return cls(net.prepare_for_inference(), **options)

    def to(self, device) -> 'TOLAPipeline':
        """Move the network to ``device`` ('cpu', 'cuda', 'cuda:1', ...); CUDA without a GPU is a ValueError."""
        device = torch.device(device)
        if device.type == 'cuda' and not torch.cuda.is_available():
            raise ValueError(f'device {str(device)!r}: CUDA is not available on this machine (use cpu)')
        self.net.to(device)
        self.device = device
        return self

    def set_precision(self, precision: str) -> 'TOLAPipeline':
        """Compute precision of the network: 'fp32', 'bf16', 'fp16' or 'auto' (``TOLANet.set_precision``)."""
        self.net.set_precision(precision)
        return self

    # ------------------------------------------------------------------------------------------ running
    def __call__(self, images: Union[ImageInput, Sequence[ImageInput]], detect: bool = False,
                 outscale: Optional[float] = None, seed: int = 0, recognize: Optional[bool] = None,
                 names: Optional[Sequence[str]] = None) -> Union[Restoration, List[Restoration]]:
        """Restore one image (-> Restoration) or a list (-> list).

        images: file paths (read with the package's reader: 8/16-bit, gray, alpha, CMYK, EXIF orientation), PIL
            images, or numpy arrays (H, W, 3) uint8 RGB (also gray, RGBA, 16-bit or float in [0, 1]).
        detect: find the text lines with PP-OCRv4 and restore each in place (a photo); else the image is one line.
        outscale: output size relative to the input. Default: one line -> height 128 (the canvas), aspect kept;
            detect -> the scale that brings the median line to 128 rows, within AUTO_OUTSCALE_RANGE.
        seed: base of the noise seeds; image i draws from ``image_noise_seed(name_i, seed)`` (name: the file's
            base name, ``names[i]`` or ''), its k-th canvas from that seed + k: results do not depend on batching.
        recognize: also read every line with PP-OCRv4 before and after (default: with detect).
        """
        single = isinstance(images, (str, os.PathLike, np.ndarray, Image.Image))
        items = [images] if single else list(images)
        if names is not None and len(names) != len(items):
            raise ValueError(f'got {len(names)} names for {len(items)} images')
        if outscale is not None and not float(outscale) > 0:
            raise ValueError(f'outscale must be > 0, got {outscale}')
        recognize = detect if recognize is None else bool(recognize)
        loaded = [self._read(item, i) for i, item in enumerate(items)]
        if names is not None:
            loaded = [(rgb, name) for (rgb, _), name in zip(loaded, names)]
        lines = []
        for index, (rgb, name) in enumerate(loaded):
            lines.extend(self._plan(index, rgb, image_noise_seed(name, seed), detect))
        self._restore_lines(lines)
        if recognize:
            self._recognize(lines)
        results = []
        for index, (rgb, name) in enumerate(loaded):
            own = [line for line in lines if line.image_index == index]
            results.append(self._assemble(rgb, name, own, detect, outscale))
        return results[0] if single else results

    def _read(self, item: ImageInput, index: int) -> Tuple[np.ndarray, str]:
        """-> (RGB uint8 (H, W, 3), name for the noise seed)."""
        if isinstance(item, (str, os.PathLike)):
            path = os.fspath(item)
            return read_image_file(path, self.background)[..., ::-1].copy(), os.path.basename(path)
        if isinstance(item, Image.Image):
            return _pil_to_bgr(item, f'image {index}', self.background)[..., ::-1].copy(), ''
        if isinstance(item, np.ndarray):
            return convert_array(item, f'image {index}', self.background, order='RGB')[..., ::-1].copy(), ''
        raise ValueError(f'image {index}: expected a file path, a PIL image or a numpy array, got '
                         f'{type(item).__name__}')

    def _plan(self, index: int, rgb: np.ndarray, base_seed: int, detect: bool) -> List[_Line]:
        """The lines of one image (the whole image, or its detected lines rectified), cut into canvases."""
        if detect:
            if self.detector is None:
                from tola_plugin.inference.text_detection import PPOCRv4Detector
                self.detector = PPOCRv4Detector()
            polygons = self.detector(np.ascontiguousarray(rgb[..., ::-1]))
            quads = [expand_quad(reading_quad(p), self.margin) for p in polygons]
            flips = self.detector.upside_down([np.ascontiguousarray(rectify(rgb, q)[..., ::-1]) for q in quads])
            quads = [np.roll(q, 2, axis=0) if flip else q for q, flip in zip(quads, flips)]  # read the right way up
            strips = [(rectify(rgb, q), q, p) for q, p in zip(quads, polygons)]
        else:
            strips = [(rgb, None, None)]
        lines, tile_index = [], 0
        for strip, quad, polygon in strips:
            line = to_canvas_height(strip)
            layout = plan_line(line.shape[1], self.overlap)
            tiles = cut_tiles(line, layout, self.pad_mode).astype(np.float32) / 255.0
            seeds = [(base_seed + tile_index + k) % 2**63 for k in range(layout.num_tiles)]
            tile_index += layout.num_tiles
            lines.append(_Line(index, strip, layout, tiles, seeds, quad, polygon))
        return lines

    def _restore_lines(self, lines: List[_Line]) -> None:
        """Run the network on every canvas of ``lines`` in batches; fill each line's restored strip (uint8, canvas
        height) and its windows' text priors."""
        owners = [(line, k) for line in lines for k in range(line.layout.num_tiles)]
        outputs, texts, confidences = [], [], []
        for start in range(0, len(owners), self.batch_size):
            batch = owners[start:start + self.batch_size]
            # contiguous NCHW, as BasicSR's data loader delivers it (a channels-last view runs other conv kernels)
            lq = torch.from_numpy(np.stack([line.tiles[k] for line, k in batch])).permute(0, 3, 1, 2).contiguous()
            with torch.inference_mode():
                out = self.net(
                    lq.to(self.device), noise_seeds=[line.seeds[k] for line, k in batch], return_intermediates=True)
            outputs.append(out['image'].float().permute(0, 2, 3, 1).cpu().numpy())
            batch_texts = out['prior_texts'] if out['prior_texts'] is not None else [''] * len(batch)
            conf = out['confidences']
            for i, text in enumerate(batch_texts):
                texts.append(text)
                confidences.append(conf[i, :len(text)].float().tolist() if conf is not None else [1.0] * len(text))
        restored = np.concatenate(outputs) if outputs else np.zeros((0, ))
        position = 0
        for line in lines:
            count = line.layout.num_tiles
            line.restored = to_uint8(blend_tiles(restored[position:position + count], line.layout))
            line.texts, line.confidences = texts[position:position + count], confidences[position:position + count]
            position += count

    def _recognize(self, lines: List[_Line]) -> None:
        """PP-OCRv4's reading of every line before (its strip) and after (its restored strip)."""
        if not lines:
            return
        if self.recognizer is None:
            from tola_plugin.evaluation.recognizers import PPOCRv4Recognizer
            self.recognizer = PPOCRv4Recognizer()
        bgr = [np.ascontiguousarray(img[..., ::-1]) for line in lines for img in (line.strip, line.restored)]
        readings = self.recognizer(bgr)
        for i, line in enumerate(lines):
            line.before, line.after = readings[2 * i], readings[2 * i + 1]

    def _assemble(self, rgb: np.ndarray, name: str, lines: List[_Line], detect: bool,
                  outscale: Optional[float]) -> Restoration:
        height, width = rgb.shape[:2]
        if not detect:
            restored = lines[0].restored
            if outscale is None:
                image, scale = restored, CANVAS_H / height
            else:
                scale = float(outscale)
                image = resize_rgb(restored, max(1, round(height * scale)), max(1, round(width * scale)))
        else:
            if outscale is not None:
                scale = float(outscale)
            elif lines:
                median = float(np.median([line.strip.shape[0] for line in lines]))
                scale = float(np.clip(CANVAS_H / median, *AUTO_OUTSCALE_RANGE))
            else:
                scale = 1.0
            out_h, out_w = max(1, round(height * scale)), max(1, round(width * scale))
            image = resize_rgb(rgb, out_h, out_w).copy()
            for line in lines:
                quad = scale_quad(line.quad, (out_w / width, out_h / height))
                feather = max(1.0, self.feather * line.strip.shape[0] * out_h / height)
                paste_strip(image, line.restored, quad, feather)
        return Restoration(image=image, lines=[self._line_result(line) for line in lines], input_size=(height, width),
                           outscale=scale, name=name, detected=detect)

    @staticmethod
    def _line_result(line: _Line) -> LineResult:
        tokens = [c for window in line.confidences for c in window]
        result = LineResult(
            prior_text=WINDOW_SEPARATOR.join(line.texts), prior_confidence=float(np.mean(tokens)) if tokens else 0.0,
            token_confidences=[float(c) for c in tokens], window_texts=list(line.texts))
        if line.polygon is not None:
            result.polygon = [[round(float(x), 2), round(float(y), 2)] for x, y in line.polygon]
        if line.before is not None:
            result.text_before, result.confidence_before = line.before.text, line.before.confidence
            result.text_after, result.confidence_after = line.after.text, line.after.confidence
        return result
