"""``TOLAPipeline``: restore text images of any size and aspect, single lines or whole photos, with a TOLA model.

    from tola_plugin import TOLAPipeline
    pipe = TOLAPipeline.from_merged()          # the demo model; or the path of a merged model (tools/export_merged.py)
    result = pipe('photo.jpg', detect=True)   # result.image: restored RGB uint8; result.lines: text prior per line

A thin layer over ``TOLANet`` (which does all the restoring): geometry (``line_geometry``: aspect kept, narrow
lines padded, wide lines cut into overlapping windows and blended; ``photo_geometry``: detected lines rectified and
pasted back), batching of the 128x512 canvases, and assembly (``restoration.py``: what it returns). Loading and
placement are ``loaders.py``'s; every batch runs through the runtime, which serves it on its current path and falls
back by its own rules (``runtime/serving.Runtime.serve``). Images are RGB from entry to exit: inputs are read and
converted by ``tola_plugin.data.image_io`` (order 'RGB'), PP-OCRv4 takes RGB (``tola_plugin.ocr``, which converts at
its own boundary). docs/restore.md describes the behaviour.
"""
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import cv2
import numpy as np
import torch
from PIL import Image

from tola_plugin.archs.tola_arch import image_noise_seed
from tola_plugin.data.image_io import (DEFAULT_MAX_PIXELS, WHITE, budget_error, check_background, check_max_pixels,
                                       convert_array, convert_pil, read_image_file, to_uint8)
from tola_plugin.data.text_line_source import CANVAS_H
from tola_plugin.inference.batching import auto_batch_size
from tola_plugin.inference.color_fix import apply_color_fix, check_color_fix
from tola_plugin.inference.line_geometry import (PAD_MODES, blend_tiles, cut_tiles, line_width, plan_line, resize_rgb,
                                                 to_canvas_height)
from tola_plugin.inference.loaders import PipelineLoading
from tola_plugin.inference.paste_judge import check_colours
from tola_plugin.inference.photo_geometry import expand_quad, paste_strip, reading_quad, rectify, scale_quad
from tola_plugin.inference.restoration import ImageWork, LineResult, LineWork, Restoration, paste_refusal
from tola_plugin.inference.work_bounds import (DEFAULT_MAX_OUTPUT_PIXELS, DEFAULT_MAX_WINDOWS, check_outscale,
                                               check_positive, check_positive_int, check_windows, output_size)
from tola_plugin.ocr.ppocr import PPOCRv4Detector, PPOCRv4Recognizer, UndetectableShape
from tola_plugin.runtime.serving import NonFiniteOutput, Runtime

DEFAULT_COLOR_FIX = 'luma'  # of the user's tools (TOLAPipeline, tola-infer, tola-web); the paper's is 'none'
PASTE_POLICIES = ('checked', 'all')

# What one image's failure may raise (bad input, a bound, out of memory, a library refusing it): the image fails,
# its neighbours go on (``restore_each``). Anything else is a bug and propagates.
IMAGE_ERRORS = (ValueError, OSError, RuntimeError, MemoryError, cv2.error)

ImageInput = Union[str, os.PathLike, np.ndarray, Image.Image]
ImageInputs = Union[ImageInput, Sequence[ImageInput]]
# what a restoration is doing, as it does it: (what, 128x512 windows done, windows in all; 0 of 0 while unknown)
ProgressReport = Callable[[str, int, int], None]


def _silent(*_) -> None:
    pass


class TOLAPipeline(PipelineLoading):
    """Restore text images with a TOLA network: one image or a list, any size and aspect, optionally whole photos.

    net: a ``TOLANet`` (or any module with its inference contract: ``net(lq (B, 3, 128, 512) RGB in [0, 1],
        noise_seeds=[B ints], return_intermediates=True)`` -> dict with 'image' (B, 3, 128, 512) in [0, 1],
        'prior_texts' (B strings or None) and 'confidences' ((B, 24) or None)). Use ``from_merged`` or
        ``from_options`` to load one; ``set_switches`` changes its inference switches (precision, timestep, ...).
    overlap: minimum columns (at canvas height) shared by neighbouring windows of a wide line (0-511; 128).
    pad_mode: 'edge' or 'reflect', how a narrow line is padded to the canvas width.
    batch_size: canvases per step: the windows of all lines (a photo's detected lines, a list of images) are
        handed to the runtime in steps of this size (a path that fails runs the step again on the next; a folder
        run writes its outputs after each step), each window through the network alone, so that results never
        depend on it. None (default): ``runtime.auto_batch_size``, from the memory free on the device (1 to 8).
    color_fix: 'luma' (default: the input's colours, the network's strokes in luminance; on the demo model's 32
        held-out lines +0.46 dB PSNR-Y over 'none', and its photo lines keep their ink's colour, docs/restore.md),
        'wavelet' (StableSR's and OSEDiff's: the input's colours over areas of ~32 pixels), 'adain', or 'none' (the
        network's own colours: the paper's outputs; BasicSR's test pipeline and the evaluation keep them):
        ``color_fix.py``.
    paste: detect mode, which restored lines replace the original in the photo: 'checked' (default) those PP-OCRv4
        reads as well as the original (``reads_as_well``: some text, the same or at least as confidently) whose ink
        and background at the seam kept their colours (``paste_judge``), the others are left as they were and their
        record says why; 'all' every one. 'checked' needs the readings (``recognize``).
    margin: detect mode: each detected line is grown by this fraction of its height on every side before it is
        restored (context, and room for the feathered border; 0.15).
    feather: detect mode: width of the feathered border of a pasted line, as a fraction of its height (0.15: the
        whole margin, so the restored line fades into the photo around its text, never across it).
    background: RGB colour under transparent pixels of the inputs.
    max_pixels: the image budget: an input with more pixels is refused (a file before decoding; DEFAULT_MAX_PIXELS,
        64 megapixels; ``tola_plugin.data.image_io``).
    max_windows: 128x512 windows (network calls) one image may need: a line's windows, or all detected lines' of a
        photo (DEFAULT_MAX_WINDOWS, 256; ``work_bounds``).
    max_output_pixels: pixels of one output image: an output over it is refused (DEFAULT_MAX_OUTPUT_PIXELS, 100
        megapixels).
    Bounds are checked before any work on the image; an image over one is an error naming it, the limit and the
    option that raises it.
    """

    def __init__(self, net: torch.nn.Module, overlap: int = 128, pad_mode: str = 'edge',
                 batch_size: Optional[int] = None, margin: float = 0.15, feather: float = 0.15,
                 background: Sequence[int] = WHITE, max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
                 max_windows: int = DEFAULT_MAX_WINDOWS, max_output_pixels: float = DEFAULT_MAX_OUTPUT_PIXELS,
                 color_fix: str = DEFAULT_COLOR_FIX, paste: str = 'checked'):
        if pad_mode not in PAD_MODES:
            raise ValueError(f'pad_mode must be one of {PAD_MODES}, got {pad_mode!r}')
        plan_line(1, overlap)  # validates the overlap
        if batch_size is not None and (isinstance(batch_size, bool) or int(batch_size) < 1):
            raise ValueError(f'batch_size must be >= 1 (or None: from the free memory), got {batch_size}')
        self.color_fix = check_color_fix(color_fix)
        if paste not in PASTE_POLICIES:
            raise ValueError(f'paste must be one of {PASTE_POLICIES}, got {paste!r}')
        self.paste = paste
        if not 0.0 <= float(margin) <= 1.0:
            raise ValueError(f'margin must be a fraction of the line height in [0, 1], got {margin}')
        if not 0.0 <= float(feather) <= 0.5:
            raise ValueError(f'feather must be a fraction of the line height in [0, 0.5], got {feather}')
        check_background(background)
        self.net = net.eval().requires_grad_(False)
        self.overlap, self.pad_mode = int(overlap), pad_mode
        self._batch_size = None if batch_size is None else int(batch_size)
        self.margin, self.feather, self.background = float(margin), float(feather), tuple(int(c) for c in background)
        self.max_pixels = check_max_pixels(max_pixels)
        self.max_windows = check_positive_int(max_windows, 'max_windows')
        self.max_output_pixels = check_positive(max_output_pixels, 'max_output_pixels')
        self.device = next(iter(net.parameters()), torch.zeros(0)).device
        self.runtime: Optional[Runtime] = None  # the runtime decision of from_merged / from_options
        self.detector = None  # PP-OCRv4 models, built on first use (rapidocr + onnxruntime)
        self.recognizer = None

    @property
    def batch_size(self) -> int:
        """Canvases per step (each through the network alone: ``_run_windows``): the given one, else chosen from the
        memory free now on the device (``auto_batch_size``)."""
        if self._batch_size is not None:
            return self._batch_size
        return auto_batch_size(self.net, self.device)

    # ------------------------------------------------------------------------------------------ running
    def __call__(self, images: ImageInputs, detect: bool = False, outscale: Optional[float] = None, seed: int = 0,
                 recognize: Optional[bool] = None, names: Optional[Sequence[str]] = None,
                 value_range: Optional[Tuple[float, float]] = None,
                 progress: Optional[ProgressReport] = None) -> Union[Restoration, List[Restoration]]:
        """Restore one image (-> Restoration) or a list (-> list); the first image that fails raises its error.

        images: file paths (read with the package's reader: 8/16-bit, gray, alpha, CMYK, EXIF orientation), PIL
            images, or numpy arrays (H, W, 3) uint8 RGB (also gray, RGBA, 16-bit or float in [0, 1]).
        detect: find the text lines with PP-OCRv4 and restore each in place (a photo); else the image is one line.
        outscale: output size relative to the input (a finite number > 0). Default: one line -> height 128 (the
            canvas), aspect kept; detect -> 1, the photo's own size (its restored lines are resized to their place).
        seed: base of the noise seeds; image i draws from ``image_noise_seed(name_i, seed)`` (name: the file's
            base name, ``names[i]`` or ''), its k-th canvas from that seed + k: results do not depend on batching.
        recognize: also read every line with PP-OCRv4 before and after (default: with detect).
        value_range: (low, high) of float arrays and PIL 'F' images, mapped to [0, 1] (default: they must already be
            in [0, 1]; a float image in [0, 255] is an error that says so). NaN and inf are refused.
        progress: called with (what, windows done, windows in all) as the work goes: the detector started (0 of 0),
            the lines it found, each window restored ('3 of 12 line(s) restored'), the lines read before and after
            (tola-infer prints them for a photo, the web page shows them).
        """
        single = isinstance(images, (str, os.PathLike, np.ndarray, Image.Image))
        outcomes = self.restore_each([images] if single else list(images), detect, outscale, seed, recognize, names,
                                     value_range, progress)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return outcomes[0] if single else outcomes

    def restore_each(self, images: Sequence[ImageInput], detect: bool = False, outscale: Optional[float] = None,
                     seed: int = 0, recognize: Optional[bool] = None, names: Optional[Sequence[str]] = None,
                     value_range: Optional[Tuple[float, float]] = None,
                     progress: Optional[ProgressReport] = None) -> List[Union[Restoration, Exception]]:
        """``__call__`` for a list, each image on its own: one Restoration per image, or in its place the error
        (one of IMAGE_ERRORS) that image raised. A failing image never fails its neighbours: the images that had
        windows in a batch that failed are run again, each alone (results do not depend on batching). Arguments
        that are wrong for every image (names, outscale) raise."""
        # 1. Check what holds for every image (names, outscale), and whether to read the lines with PP-OCRv4
        items = list(images)
        if names is not None and len(names) != len(items):
            raise ValueError(f'got {len(names)} names for {len(items)} images')
        outscale = check_outscale(outscale)
        recognize = detect if recognize is None else bool(recognize)
        if detect and self.paste == 'checked' and not recognize:
            raise ValueError("paste 'checked' pastes the lines PP-OCRv4 reads as well restored: it needs recognize; "
                             "set recognize=True, or paste='all' to paste every restored line")
        progress = progress or _silent
        # 2. Read each image (RGB), check its bounds, find its lines (detect) and cut them into 128x512 canvases
        prepared: List[Union[ImageWork, Exception]] = []
        for index, item in enumerate(items):
            try:
                prepared.append(
                    self._prepare(item, index, None if names is None else names[index], seed, detect, outscale,
                                  value_range, progress))
            except IMAGE_ERRORS as err:
                prepared.append(err)
        # 3. Restore every canvas, batched across lines and images, on the runtime's path (a path that fails is left
        #    for the next; no non-finite output is kept); blend each line's windows back together
        work = [p for p in prepared if isinstance(p, ImageWork)]
        lines = sum(len(p.lines) for p in work)
        windows = sum(line.layout.num_tiles for p in work for line in p.lines)
        if detect:
            progress(f'{lines} text line(s) found ({windows} windows of 128x512)', 0, windows)
        self._restore_isolated(work, progress)
        # 4. Read the lines before and after (recognize), paste the lines into the output image (detect) or resize
        if recognize and lines:
            progress('reading the lines with PP-OCRv4, before and after', windows, windows)
        return [(p.error or self._finish(p, detect, recognize)) if isinstance(p, ImageWork) else p for p in prepared]

    def _finish(self, image: ImageWork, detect: bool, recognize: bool) -> Union[Restoration, Exception]:
        """PP-OCRv4's readings (``recognize``) and the output image of a restored image, or the error."""
        try:
            if recognize:
                self._recognize(image.lines)
            return self._assemble(image, detect)
        except IMAGE_ERRORS as err:
            return err

    def _read(self, item: ImageInput, index: int, value_range) -> Tuple[np.ndarray, str]:
        """-> (RGB uint8 (H, W, 3), name for the noise seed); the image budget applies to every kind of input."""
        if isinstance(item, (str, os.PathLike)):
            path = os.fspath(item)
            return read_image_file(path, self.background, self.max_pixels, order='RGB'), os.path.basename(path)
        what = f'image {index}'
        if isinstance(item, Image.Image):
            self._check_budget(what, item.size[1], item.size[0])  # before a lazy PIL image decodes its pixels
            return convert_pil(item, what, self.background, value_range), ''
        if isinstance(item, np.ndarray):
            if item.ndim in (2, 3):
                self._check_budget(what, item.shape[0], item.shape[1])
            return convert_array(item, what, self.background, order='RGB', value_range=value_range), ''
        raise ValueError(f'{what}: expected a file path, a PIL image or a numpy array, got {type(item).__name__}')

    def _check_budget(self, what: str, height: int, width: int) -> None:
        if self.max_pixels is not None and height * width > self.max_pixels:
            raise budget_error(what, width, height, self.max_pixels)

    def _prepare(self, item: ImageInput, index: int, name: Optional[str], seed: int, detect: bool,
                 outscale: Optional[float], value_range, progress: ProgressReport = _silent) -> ImageWork:
        """Read one image, check its bounds, find its lines and cut them into canvases: everything before the
        network, so that an image over a bound costs nothing but its reading."""
        rgb, own_name = self._read(item, index, value_range)
        name = own_name if name is None else name
        what = name or f'image {index}'
        height, width = rgb.shape[:2]
        base_seed = image_noise_seed(name, seed)
        if not detect:
            columns = line_width(height, width)
            windows = plan_line(columns, self.overlap).num_tiles
            check_windows(what, windows, self.max_windows, f'a {width}x{height} line ({columns} columns at height 128)')
            scale = CANVAS_H / height if outscale is None else outscale  # default: the canvas height
            size = output_size(what, height, width, scale, self.max_output_pixels)
            return ImageWork(rgb, name, self._cut([(rgb, None, None)], base_seed), scale, size)
        # a photo is the user's picture: its size times the scale asked for, never one the lines would suggest (the
        # restored lines are resized into it instead)
        scale = 1.0 if outscale is None else outscale
        size = output_size(what, height, width, scale, self.max_output_pixels)  # before the detector runs
        progress('finding the text lines (PP-OCRv4)', 0, 0)
        strips, note = self._detect(rgb)
        windows = sum(plan_line(line_width(*strip.shape[:2]), self.overlap).num_tiles for strip, _, _ in strips)
        check_windows(what, windows, self.max_windows, f'its {len(strips)} detected line(s)')
        return ImageWork(rgb, name, self._cut(strips, base_seed), scale, size, note)

    def _detect(self, rgb: np.ndarray) -> Tuple[List[Tuple[np.ndarray, np.ndarray, np.ndarray]], str]:
        """The detected lines of a photo as (strip, quad, polygon), rectified and turned the right way up; and a
        note when the detector cannot take the image (then no lines)."""
        if self.detector is None:
            self.detector = PPOCRv4Detector()
        try:
            polygons = self.detector(rgb)
        except UndetectableShape as err:
            return [], f'no lines: {err}'
        quads = [expand_quad(reading_quad(p), self.margin) for p in polygons]
        flips = self.detector.upside_down([rectify(rgb, q) for q in quads])
        quads = [np.roll(q, 2, axis=0) if flip else q for q, flip in zip(quads, flips)]  # read the right way up
        return [(rectify(rgb, q), q, p) for q, p in zip(quads, polygons)], ''

    def _cut(self, strips, base_seed: int) -> List[LineWork]:
        """Lines (strip, quad, polygon) -> ``LineWork``s with their canvases and noise seeds."""
        lines, tile_index = [], 0
        for strip, quad, polygon in strips:
            line = to_canvas_height(strip)
            layout = plan_line(line.shape[1], self.overlap)
            tiles = cut_tiles(line, layout, self.pad_mode).astype(np.float32) / 255.0
            seeds = [(base_seed + tile_index + k) % 2**63 for k in range(layout.num_tiles)]
            tile_index += layout.num_tiles
            lines.append(LineWork(strip, layout, tiles, seeds, quad, polygon))
        return lines

    def _restore_isolated(self, images: List[ImageWork], progress: ProgressReport = _silent) -> None:
        """Restore the lines of all ``images`` together (batched across images; ``progress``: the lines done after
        each window); the images that had a canvas in a batch that failed are restored again, each alone, so that only
        an image that fails on its own is marked failed (``error``); the others keep their result (the same: noise
        seeds are per image)."""
        failed = self._restore_lines([line for image in images for line in image.lines], progress)
        suspects = [image for image in images if any(id(line) in failed for line in image.lines)]
        for image in suspects:  # one suspect: every failed batch held only its canvases, the failure is its own
            errors = self._restore_lines(image.lines) if len(suspects) > 1 else failed
            if errors:
                image.error = next(iter(errors.values()))

    def _run_windows(self, lq: np.ndarray, seeds: List[int],
                     window_done: Callable[[int], None] = _silent) -> Tuple[np.ndarray, List[str], List[List[float]]]:
        """The one place the network runs: canvases (B, 128, 512, 3) float32 RGB in [0, 1] with their noise seeds
        -> (restored (B, 128, 512, 3) float32, B text priors, B lists of per-character confidences). Each canvas goes
        through the network alone (batch 1): a batch's arithmetic depends on its size (oneDNN, cuDNN and OpenVINO
        choose other kernels and reduction orders for another batch: up to 1 grey level and other confidences), so a
        window computed alone depends on nothing but itself, and an image's result never on how it was batched
        (docs/reliability.md). ``window_done(i)`` after window i (the progress)."""
        results = []
        for i in range(len(seeds)):
            results.append(self._run_window(lq[i:i + 1], seeds[i]))
            window_done(i)
        return (np.concatenate([r[0] for r in results]) if results else lq[:0], [r[1] for r in results],
                [r[2] for r in results])

    def _run_window(self, lq: np.ndarray, seed: int) -> Tuple[np.ndarray, str, List[float]]:
        """One canvas (1, 128, 512, 3) through the network -> (restored (1, 128, 512, 3) float32, its text prior,
        its per-character confidences)."""
        # contiguous NCHW, as BasicSR's data loader delivers it (a channels-last view runs other conv kernels)
        batch = torch.from_numpy(lq).permute(0, 3, 1, 2).contiguous()
        with torch.inference_mode():
            batch = batch.to(self.device)
            out = self.net(batch, noise_seeds=[seed], return_intermediates=True)
            where = self.runtime.running if self.runtime is not None else 'the network'  # the plain route judging
            if out['confidences'] is not None and not bool(torch.isfinite(out['confidences']).all()):
                raise NonFiniteOutput(f'{where} returned non-finite text prior confidences (NaN or infinity); '
                                      'nothing written')
            if not bool(torch.isfinite(out['image']).all()):
                raise NonFiniteOutput(f'{where} returned non-finite pixels (NaN or infinity); nothing written')
            restored = apply_color_fix(self.color_fix, out['image'].float(), batch)
        image = restored.permute(0, 2, 3, 1).cpu().numpy()
        text = out['prior_texts'][0] if out['prior_texts'] is not None else ''
        conf = out['confidences']
        confidences = conf[0, :len(text)].float().tolist() if conf is not None else [1.0] * len(text)
        return image, text, confidences

    def _run_batch(self, lq: np.ndarray, seeds: List[int], window_done: Callable[[int], None] = _silent):
        """``_run_windows`` on the runtime's current path (``Runtime.serve``: a path that fails is left for the next
        and the batch runs again there); on the network as given without a runtime."""
        if self.runtime is None:
            return self._run_windows(lq, seeds, window_done)
        return self.runtime.serve(lambda: self._run_windows(lq, seeds, window_done))

    def _restore_lines(self, lines: List[LineWork], progress: ProgressReport = _silent) -> Dict[int, BaseException]:
        """Run the network on every canvas of ``lines`` in steps of ``batch_size``; fill each line's restored
        strip (uint8, canvas height) and its windows' text priors. Returns {id(line): error} for the lines with a
        canvas in a batch that failed (those are left unrestored)."""
        owners = [(line, k) for line in lines for k in range(line.layout.num_tiles)]
        outputs: List[Optional[np.ndarray]] = [None] * len(owners)
        texts: List[str] = [''] * len(owners)
        confidences: List[List[float]] = [[] for _ in owners]
        failed: Dict[int, BaseException] = {}
        size = self.batch_size  # decided once per run of windows
        ends = np.cumsum([k == line.layout.num_tiles - 1 for line, k in owners])  # lines ended by each window

        def window_done(i: int) -> None:
            progress(f'{ends[i]} of {len(lines)} line(s) restored', i + 1, len(owners))

        for start in range(0, len(owners), size):
            batch = owners[start:start + size]
            try:
                images, batch_texts, batch_conf = self._run_batch(
                    np.stack([line.tiles[k] for line, k in batch]), [line.seeds[k] for line, k in batch],
                    lambda i, start=start: window_done(start + i))
            except IMAGE_ERRORS as err:
                failed.update((id(line), err) for line, _ in batch)
                continue
            outputs[start:start + len(batch)] = list(images)
            texts[start:start + len(batch)] = batch_texts
            confidences[start:start + len(batch)] = batch_conf
        position = 0
        for line in lines:
            count = line.layout.num_tiles
            if id(line) not in failed:
                line.restored = to_uint8(blend_tiles(np.stack(outputs[position:position + count]), line.layout))
                line.texts = texts[position:position + count]
                line.confidences = confidences[position:position + count]
            position += count
        return failed

    def _recognize(self, lines: List[LineWork]) -> None:
        """PP-OCRv4's reading of every line before (its strip) and after (its restored strip)."""
        if not lines:
            return
        if self.recognizer is None:
            self.recognizer = PPOCRv4Recognizer()
        readings = self.recognizer([img for line in lines for img in (line.strip, line.restored)])
        for i, line in enumerate(lines):
            line.before, line.after = readings[2 * i], readings[2 * i + 1]

    def _assemble(self, image: ImageWork, detect: bool) -> Restoration:
        height, width = image.rgb.shape[:2]
        out_h, out_w = image.out_size
        if not detect:
            restored = image.lines[0].restored
            output = restored if restored.shape[:2] == (out_h, out_w) else resize_rgb(restored, out_h, out_w)
        else:
            output = resize_rgb(image.rgb, out_h, out_w).copy()
            for line in image.lines:
                line.colours = check_colours(line.strip, line.restored, self.feather)
                if self.paste == 'checked':
                    line.refusal = paste_refusal(line.before, line.after, line.colours)
                line.pasted = not line.refusal
                if not line.pasted:
                    continue
                quad = scale_quad(line.quad, (out_w / width, out_h / height))
                feather = max(1.0, self.feather * line.strip.shape[0] * out_h / height)
                paste_strip(output, line.restored, quad, feather)
        return Restoration(image=output, lines=[LineResult.of(line) for line in image.lines],
                           input_size=(height, width), outscale=image.scale, name=image.name, detected=detect,
                           note=image.note)
