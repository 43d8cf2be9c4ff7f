"""Evaluate restored folders against references and labels (tools/evaluate.py is the command line).

For each method folder: exact filename matching with the reference folder and the labels manifest, then per
image PSNR/SSIM/LPIPS/DISTS and TransOCR/PP-OCRv4 ACC and NED, FID once over the two folders. Writes
``per_image/<method>.csv``, ``summary.json`` and ``summary.md`` into the output folder. With ``upscale``, a method
whose images are smaller than the references by a whole factor (an LR folder: the bicubic row) is first resized to
them, PIL bicubic as TOLA's input (``data/text_line_source.canvas_rgb8``), into ``upscaled/<method>/``.
"""
import os
import sys
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from tola_plugin import metric_weights as W
from tola_plugin.checkpoints.demo_backbone import DEMO, transocr_file
from tola_plugin.commands.evaluation import records as R
from tola_plugin.data.image_io import DEFAULT_MAX_PIXELS, WHITE, check_max_pixels, read_image_file, write_image
from tola_plugin.data.text_line_source import canvas_rgb8
from tola_plugin.metrics.image_metrics import (DEFAULT_COLOR_SPACE, PAIRED_METRICS, PairedImageMetrics,
                                               fid_between_dirs, images_to_tensor)
from tola_plugin.metrics.text_metrics import ned, normalize
from tola_plugin.ocr.ppocr import ppocrv4_unavailable
from tola_plugin.ocr.recognizers import RECOGNIZERS, build_recognizer
from tola_plugin.utils.atomic_files import write_json, write_text
from tola_plugin.utils.checkpoint_io import require_file
from tola_plugin.utils.user_paths import path_inside
from tola_plugin.utils.user_text import say

ALL_METRICS = PAIRED_METRICS + ('fid', ) + RECOGNIZERS


def resolve_metrics(requested: Optional[Sequence[str]], has_reference: bool, has_labels: bool,
                    has_transocr: bool) -> List[str]:
    """The metrics to compute. None = every metric the inputs allow (see ``unavailable_metrics`` for the ones
    then left out because their weight files are absent); an explicit request the inputs cannot satisfy is an
    error saying what is missing."""
    if requested is None:
        return [
            m for m in ALL_METRICS if (m not in PAIRED_METRICS + ('fid', ) or has_reference) and (
                m not in RECOGNIZERS or has_labels) and (m != 'transocr' or has_transocr)
        ]
    unknown = [m for m in requested if m not in ALL_METRICS]
    if unknown:
        raise ValueError(f'unknown metric(s) {unknown}; choose from {list(ALL_METRICS)}')
    for m in requested:
        if m in PAIRED_METRICS + ('fid', ) and not has_reference:
            raise ValueError(f'metric {m!r} needs a reference folder (--reference)')
        if m in RECOGNIZERS and not has_labels:
            raise ValueError(f'metric {m!r} needs a labels manifest (--labels)')
        if m == 'transocr' and not has_transocr:
            raise ValueError("metric 'transocr' needs the official TransOCR checkpoint (--transocr-checkpoint)")
    return [m for m in ALL_METRICS if m in requested]


def unavailable_metrics(metrics: Sequence[str]) -> Dict[str, str]:
    """{metric: why it cannot run offline} for the learned metrics whose weight files are absent (LPIPS, DISTS,
    FID: see ``weights``) and PP-OCRv4 when rapidocr or its model file is missing."""
    reasons = {}
    for m in metrics:
        reason = ppocrv4_unavailable() if m == 'ppocrv4' else W.missing_metric_weights(m)
        if reason:
            reasons[m] = reason
    return reasons


def _recognition_columns(prefix: str, pred: str, conf: float, gt: str, lower: bool) -> Dict[str, object]:
    p, g = normalize(pred, lower), normalize(gt, lower)
    return {f'{prefix}pred': pred, f'{prefix}conf': conf, f'{prefix}acc': float(p == g), f'{prefix}ned': ned(p, g)}


def evaluate_methods(methods: Mapping[str, str], out_dir: str, reference_dir: Optional[str] = None,
                     labels_path: Optional[str] = None, metrics: Optional[Sequence[str]] = None, device: str = 'cpu',
                     color_space: str = DEFAULT_COLOR_SPACE, lower: bool = False,
                     transocr_checkpoint: Optional[str] = None, transocr_preprocess: str = 'difftsr',
                     transocr_model=None, batch_size: int = 8, num_workers: int = 0, progress: bool = True,
                     ppocr_lower: bool = True, log=say, background: Sequence[int] = WHITE,
                     max_pixels: Optional[int] = DEFAULT_MAX_PIXELS,
                     upscale: bool = False) -> Dict[str, Dict[str, float]]:
    """Evaluate every ``{method name: restored folder}``; returns {method: {metric: value}} (also written).

    Set-level values: mean of per-image PSNR/SSIM/LPIPS/DISTS, ACC (fraction of exact matches), NED (mean);
    FID over the folders. ``transocr_model`` (an in-memory TransOCR) may replace ``transocr_checkpoint``.
    Case: TransOCR texts keep their case unless ``lower`` (the paper); PP-OCRv4 texts are lower-cased unless
    ``ppocr_lower`` is False (PP-OCRv4 reads case, TransOCR and the CTR labels do not; docs/evaluation.md).
    With ``metrics`` None, metrics whose weight files are absent are left out and ``log`` (default: ``say``, stderr)
    says which and why; the summary records them under ``protocol.skipped``.
    Every image (restored and reference, FID included) is read through ``data/image_io.py``; transparent
    pixels are composited over ``background`` (RGB, white by default); an image over the budget ``max_pixels``
    (64 megapixels) or one no library can decode is an error naming it (an evaluation never leaves an image out).
    ``upscale``: see the module docstring; the summary records each upscaled method's factor (``protocol.upscaled``).
    Every output file is written atomically.
    """
    if not methods:
        raise ValueError('no method folders given')
    max_pixels = check_max_pixels(max_pixels)
    demo_transocr = transocr_checkpoint == DEMO and transocr_model is None  # its T- columns say so
    if transocr_checkpoint is not None and transocr_model is None:  # before any work: a missing file is said at once
        transocr_checkpoint = require_file(
            transocr_file(transocr_checkpoint), 'TransOCR checkpoint (--transocr-checkpoint)',
            'Give the official transocr.pth of the DiffTSR release (README, "Official checkpoints"), or demo: the demo '
            "backbone's TransOCR (it reads letters, digits and 100 frequent Chinese characters, lower case).")
    labels = R.read_labels(labels_path) if labels_path else None
    chosen = resolve_metrics(metrics, reference_dir is not None, labels is not None, transocr_checkpoint is not None
                             or transocr_model is not None)
    skipped = unavailable_metrics(chosen) if metrics is None else {}
    for m, reason in skipped.items():
        log(f'evaluate: skipping {m} (its files are absent): {reason}')
    chosen = [m for m in chosen if m not in skipped]
    if not chosen:
        raise ValueError('no metric can be computed: give --reference and/or --labels' +
                         (f' (skipped for missing files: {sorted(skipped)})' if skipped else ''))

    stems = [_safe(m) for m in methods]
    for method in methods:  # names that would leave the output folder or not fit it: refused before any work
        _method_path(out_dir, 'upscaled', method, '')
        _method_path(out_dir, 'per_image', method, '.csv')
    if len(set(stems)) != len(stems):
        raise ValueError(f'method names {list(methods)} collide as file names {stems}; rename them')
    sets = {}
    if reference_dir is not None:
        sets[f'reference ({reference_dir})'] = R.list_images(reference_dir)
    if labels is not None:
        sets[f'labels ({labels_path})'] = list(labels)
    expected = next(iter(sets.values()), [])
    files, suffixes = {}, {}  # {method: {name: its file}}; BasicSR's test launchers add a suffix to every name
    for name, folder in methods.items():
        files[name], suffix = R.basicsr_output_names(R.list_images(folder), expected)
        sets[f'method {name!r} ({folder})'] = list(files[name])
        if suffix is not None:
            suffixes[name] = suffix
            log(f'evaluate: {name}: BasicSR test-launcher names <name>_{suffix}.png matched to <name>')
    names = R.match_filenames(sets)
    upscaled = {}
    if upscale:
        if reference_dir is None:
            raise ValueError('--upscale resizes methods to the references: give --reference')
        methods = dict(methods)
        for name in methods:
            factor = upscale_folder(methods[name], files[name], names, reference_dir,
                                    _method_path(out_dir, 'upscaled', name, ''), background, max_pixels)
            if factor > 1:
                upscaled[name] = factor
                methods[name] = _method_path(out_dir, 'upscaled', name, '')
                files[name] = {n: upscaled_name(n) for n in names}
                log(f'evaluate: {name}: images upscaled x{factor} (PIL bicubic) to the references\' size, in '
                    f'{methods[name]}')

    paired = [m for m in chosen if m in PAIRED_METRICS]
    image_metrics = PairedImageMetrics(paired, device, color_space) if paired else None
    recognizers = {}
    for m in chosen:
        if m == 'transocr':
            opts = {'model': transocr_model} if transocr_model is not None else {'checkpoint': transocr_checkpoint}
            recognizers[m] = build_recognizer('transocr', device=device, preprocess=transocr_preprocess, **opts)
        elif m == 'ppocrv4':
            recognizers[m] = build_recognizer('ppocrv4')

    summary: Dict[str, Dict[str, float]] = {}
    per_image_files = {}
    for method, folder in methods.items():
        rows = score_folder(folder, names, reference_dir, labels, image_metrics, recognizers, lower, batch_size,
                            desc=f'evaluate {method}', progress=progress, ppocr_lower=ppocr_lower,
                            background=background, files=files[method], max_pixels=max_pixels)
        csv_path = _method_path(out_dir, 'per_image', method, '.csv')
        R.write_per_image_csv(csv_path, rows)
        per_image_files[method] = os.path.relpath(csv_path, out_dir)
        values = {}
        for key, _, _ in R.SUMMARY_METRICS:  # paper order
            if key == 'fid' and 'fid' in chosen:
                restored_names = [files[method][n] for n in names]
                values['fid'] = fid_between_dirs(folder, reference_dir, device=device, num_workers=num_workers,
                                                 names=names, background=background, restored_names=restored_names,
                                                 max_pixels=max_pixels)
            elif key in rows[0]:
                values[key] = float(np.mean([r[key] for r in rows]))
        summary[method] = values

    protocol = {
        'n_images': len(names), 'metrics': chosen, 'luma_color_space': color_space, 'border_crop': 0,
        'background': list(background), 'lpips_net': 'alex', 'lower_case': lower, 'ppocr_lower_case': lower
        or ppocr_lower, 'skipped': skipped, 'transocr_preprocess': transocr_preprocess, 'reference_dir': reference_dir,
        'labels': labels_path, 'methods': dict(methods), 'name_suffixes': suffixes, 'upscaled': upscaled,
        'transocr': 'demo' if demo_transocr else transocr_checkpoint
    }
    write_json(
        os.path.join(out_dir, 'summary.json'), {'protocol': protocol, 'summary': summary, 'per_image': per_image_files})
    markdown = R.summary_markdown(summary, f'Evaluation on {len(names)} images', 'demo' if demo_transocr else '')
    if skipped:
        markdown += (f'\nNot computed (weight files absent, see summary.json protocol.skipped): '
                     f'{", ".join(skipped)}\n')
    write_text(os.path.join(out_dir, 'summary.md'), markdown)
    return summary


def score_folder(folder: str, names: Sequence[str], reference_dir: Optional[str], labels: Optional[Mapping[str, str]],
                 image_metrics: Optional[PairedImageMetrics], recognizers: Mapping[str, object], lower: bool,
                 batch_size: int = 8, desc: str = 'evaluate', progress: bool = True, ppocr_lower: bool = True,
                 background: Sequence[int] = WHITE, files: Optional[Mapping[str, str]] = None,
                 max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> List[Dict[str, object]]:
    """Per-image rows (see records.PER_IMAGE_COLUMNS) of one restored folder, in ``names`` order (case: see
    ``evaluate_methods``); transparent pixels over ``background`` (RGB); ``files``: the folder's file of each name
    (default: the name itself); images over ``max_pixels`` refused."""
    from tqdm import tqdm
    rows: List[Dict[str, object]] = []
    bar = tqdm(total=len(names), desc=desc, unit='img', disable=not progress, file=sys.stderr)
    for start in range(0, len(names), batch_size):
        batch = names[start:start + batch_size]
        restored = [
            read_image_file(os.path.join(folder, files[n] if files else n), background, max_pixels, order='RGB')
            for n in batch
        ]
        batch_rows = [{'filename': n} for n in batch]
        if labels is not None:
            for row, n in zip(batch_rows, batch):
                row['gt'] = labels[n]
        if image_metrics is not None:
            reference = [
                read_image_file(os.path.join(reference_dir, n), background, max_pixels, order='RGB') for n in batch
            ]
            for n, x, y in zip(batch, restored, reference):
                if x.shape != y.shape:
                    raise ValueError(f'{n}: restored image {x.shape[1]}x{x.shape[0]} and reference '
                                     f'{y.shape[1]}x{y.shape[0]} differ in size (W x H); no resizing is done '
                                     f'(for a folder of LR images, the bicubic row: add --upscale)')
            scores = _paired_scores(image_metrics, restored, reference)
            for i, row in enumerate(batch_rows):
                row.update({k: float(v[i]) for k, v in scores.items()})
        for name, recognizer in recognizers.items():
            for row, n, rec in zip(batch_rows, batch, recognizer(restored)):
                row.update(
                    _recognition_columns(R.PREFIX[name], rec.text, rec.confidence, labels[n], lower
                                         or (name == 'ppocrv4' and ppocr_lower)))
        rows.extend(batch_rows)
        bar.update(len(batch))
    bar.close()
    return rows


def upscaled_name(name: str) -> str:
    """The file an upscaled image of reference ``name`` is written to: PNG, whatever the reference's format."""
    return name if name.lower().endswith('.png') else f'{name}.png'


def upscale_folder(folder: str, files: Mapping[str, str], names: Sequence[str], reference_dir: str, out: str,
                   background: Sequence[int] = WHITE, max_pixels: Optional[int] = DEFAULT_MAX_PIXELS) -> int:
    """The whole factor by which the images of ``folder`` (``files``: its file of each name) are smaller than their
    references; when above 1, each is resized to its reference (PIL bicubic, ``canvas_rgb8``) and written to
    ``out``/``upscaled_name(name)`` (PNG: lossless). 1 when every image has its reference's size; another size, or
    two factors in one folder, is an error naming the image."""
    factors = {}
    for n in names:
        img = read_image_file(os.path.join(folder, files[n]), background, max_pixels, order='RGB')
        ref = read_image_file(os.path.join(reference_dir, n), background, max_pixels, order='RGB')
        (h, w), (rh, rw) = img.shape[:2], ref.shape[:2]
        factor = rh // h if rh % h == 0 and rw % w == 0 and rh // h == rw // w else None
        if factor is None:
            raise ValueError(
                f'{os.path.join(folder, files[n])}: {w}x{h} is not the reference\'s {rw}x{rh} divided by a '
                f'whole factor (W x H); --upscale resizes such images only')
        factors.setdefault(factor, n)
        if len(factors) > 1:
            raise ValueError(f'{folder}: images at two sizes relative to the references (x{min(factors)} for '
                             f'{factors[min(factors)]}, x{max(factors)} for {factors[max(factors)]})')
        if factor > 1:
            write_image(os.path.join(out, upscaled_name(n)), canvas_rgb8(img, rw, rh, order='RGB'), order='RGB')
    return next(iter(factors), 1)


def _paired_scores(image_metrics: PairedImageMetrics, restored_rgb, reference_rgb) -> Dict[str, np.ndarray]:
    """Group the batch (RGB uint8 images) by image size (a tensor batch needs one size) and score each group."""
    out = {n: np.zeros(len(restored_rgb)) for n in image_metrics.names}
    shapes = {}
    for i, img in enumerate(restored_rgb):
        shapes.setdefault(img.shape, []).append(i)
    for idx in shapes.values():
        x = images_to_tensor([restored_rgb[i] for i in idx])
        y = images_to_tensor([reference_rgb[i] for i in idx])
        for name, values in image_metrics(x, y).items():
            out[name][idx] = values
    return out


def _safe(name: str) -> str:
    """Method name -> file name stem."""
    return ''.join(c if c.isalnum() or c in '-_.' else '_' for c in name)


def _method_path(out_dir: str, folder: str, method: str, ext: str) -> str:
    """``out_dir/folder/<method as a file name><ext>``, kept inside ``out_dir/folder`` and within the file system's
    limits (a method named '..' or 300 characters long is an error naming it)."""
    return path_inside(os.path.join(out_dir, folder), _safe(method) + ext, f'method {method!r}')
