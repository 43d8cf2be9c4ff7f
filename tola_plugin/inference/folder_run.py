"""The body of ``tola-infer`` (``tola_cli/infer.py`` parses the arguments): list the inputs, plan the outputs
(refusing to replace inputs, or existing outputs without --overwrite), restore with ``TOLAPipeline``, write images,
``prior.csv`` (line mode) or one JSON per photo (--detect), and end with a summary.

A file that cannot be read or restored is reported with its path and skipped; the rest go on, and the run returns
1. Problems with the run as a whole (no input, a missing model, clashing outputs) raise before anything is written.
"""
import os
import sys
import time
from dataclasses import dataclass
from typing import List

import cv2
import numpy as np

from tola_plugin.data.image_io import IMAGE_EXTENSIONS, list_image_files, read_image_file
from tola_plugin.evaluation.records import write_json, write_prior_csv

PRIOR_CSV = 'prior.csv'
JPEG_QUALITY = 95
MAX_LISTED = 5


@dataclass
class Job:
    """One input file and where its outputs go (``name``: the output image path relative to the output folder)."""
    input: str
    output: str
    name: str
    json: str


def list_inputs(source: str, recursive: bool, skip_dir: str = '') -> List[str]:
    """The image files of ``source``: itself if it is a file, else the images in the folder (sorted; subfolders
    with ``recursive``, except ``skip_dir``, the output folder)."""
    if os.path.isfile(source):
        return [source]
    if not os.path.isdir(source):
        raise FileNotFoundError(f'input not found: {source} (expected an image file or a folder)')
    found = [os.path.join(source, n) for n in list_image_files(source, recursive, skip_dir)]
    if not found:
        where = 'or its subfolders ' if recursive else ''
        raise ValueError(f'no images ({", ".join(IMAGE_EXTENSIONS)}) in {source} {where}'
                         f'{"" if recursive else "(use --recursive for subfolders)"}'.rstrip())
    return found


def _listing(items: List[str]) -> str:
    shown = ', '.join(items[:MAX_LISTED])
    return shown + (f', ... ({len(items)} in all)' if len(items) > MAX_LISTED else '')


def plan_outputs(inputs: List[str], source: str, out_dir: str, suffix: str, ext: str, overwrite: bool,
                 detect: bool) -> List[Job]:
    """Output paths of ``inputs``; raises ValueError when two inputs would share an output, an output would
    replace an input, or (without ``overwrite``) outputs already exist."""
    root = source if os.path.isdir(source) else os.path.dirname(source)
    jobs, seen = [], {}
    for path in inputs:
        rel = os.path.relpath(path, root) if os.path.isdir(source) else os.path.basename(path)
        stem, in_ext = os.path.splitext(rel)
        out_ext = ext if ext != 'auto' else ('jpg' if in_ext.lower() in ('.jpg', '.jpeg') else 'png')
        name = f'{stem}{suffix}.{out_ext}'
        job = Job(path, os.path.join(out_dir, name), name.replace(os.sep, '/'),
                  os.path.join(out_dir, f'{stem}{suffix}.json'))
        if name in seen:
            raise ValueError(f'{seen[name]} and {path} would both be written to {job.output}; rename one or use '
                             f'--ext/--suffix')
        seen[name] = path
        jobs.append(job)
    written = [p for job in jobs for p in ((job.output, job.json) if detect else (job.output, ))]
    if not detect:
        written.append(os.path.join(out_dir, PRIOR_CSV))
    sources = {os.path.realpath(p) for p in inputs}
    on_inputs = [p for p in written if os.path.realpath(p) in sources]
    if on_inputs:
        raise ValueError(f'outputs would replace inputs ({_listing(on_inputs)}); choose another -o or a --suffix')
    existing = [p for p in written if os.path.exists(p)]
    if existing and not overwrite:
        raise ValueError(f'{len(existing)} output(s) already exist ({_listing(existing)}); pass --overwrite to '
                         f'replace them or choose another -o')
    return jobs


def write_image(path: str, rgb: np.ndarray) -> None:
    """uint8 RGB -> the file ``path`` (PNG, or JPEG quality 95 by extension); errors name the file."""
    ext = os.path.splitext(path)[1].lower()
    params = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if ext in ('.jpg', '.jpeg') else []
    ok, data = cv2.imencode(ext, np.ascontiguousarray(rgb[..., ::-1]), params)
    if not ok:
        raise ValueError(f'{path}: could not encode the image as {ext}')
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, 'wb') as f:
        f.write(data.tobytes())


def resolve_device(name, backend='torch'):
    """torch.device of --device (default: cuda when available, else cpu; always cpu for the onnxruntime backend,
    whose stages run on the CPU); CUDA without a GPU, or with onnxruntime, is a ValueError."""
    import torch
    default = 'cuda' if torch.cuda.is_available() and backend == 'torch' else 'cpu'
    try:
        device = torch.device(name or default)
    except RuntimeError as err:
        raise ValueError(f'--device {name!r}: {err}') from None
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise ValueError(f'--device {name}: CUDA is not available on this machine (use --device cpu)')
    if device.type != 'cpu' and backend != 'torch':
        raise ValueError(f'--device {name}: the {backend} backend runs on the CPU (use --backend torch on a GPU)')
    return device


def load_pipeline(args, device):
    """TOLAPipeline from --model / -opt (default: the demo model) with --backend and --precision, on ``device``."""
    from tola_plugin.inference.pipeline import TOLAPipeline
    overrides = {k: v for k, v in (('timestep', args.timestep), ('noise', args.noise)) if v is not None}
    options = dict(overlap=args.overlap, pad_mode=args.pad_mode, batch_size=args.batch_size,
                   background=args.alpha_background)
    if args.opt:
        pipe = TOLAPipeline.from_options(args.opt, args.checkpoint, network_overrides=overrides, **options)
    else:
        pipe = TOLAPipeline.from_merged(args.model, network_overrides=overrides, backend=args.backend, **options)
    if args.precision:
        pipe.set_precision(args.precision)
    if device.type == 'cuda':
        from tola_plugin.utils.cuda_math import set_tf32
        set_tf32(False)  # fp32 is IEEE fp32 on GPUs too, as the launchers' default (docs/training_gpus.md)
    return pipe.to(device)


def run(args) -> int:
    """Restore every input of ``args`` (see tola_cli/infer.py); 0 when all succeeded, 1 when some failed."""
    from tqdm import tqdm
    device = resolve_device(args.device, args.backend)  # before minutes of loading
    inputs = list_inputs(args.input, args.recursive, skip_dir=args.output)
    jobs = plan_outputs(inputs, args.input, args.output, args.suffix, args.ext, args.overwrite, args.detect)
    start = time.perf_counter()
    pipe = load_pipeline(args, device)
    loaded = time.perf_counter()
    failures, rows, done = [], [], 0

    def fail(job: Job, err: BaseException) -> None:
        message = str(err) if job.input in str(err) else f'{job.input}: {err}'
        failures.append(message)
        tqdm.write(f'failed: {message}', file=sys.stderr)

    chunk = 1 if args.detect else args.batch_size  # photos batch their own lines
    bar = tqdm(total=len(jobs), unit='img', desc='tola-infer', file=sys.stderr, disable=None)
    for first in range(0, len(jobs), chunk):
        ready = []
        for job in jobs[first:first + chunk]:
            try:
                ready.append((job, read_image_file(job.input, args.alpha_background)[..., ::-1]))
            except (ValueError, OSError) as err:
                fail(job, err)
        if ready:
            try:
                results = pipe([rgb for _, rgb in ready], detect=args.detect, outscale=args.outscale, seed=args.seed,
                               names=[os.path.basename(job.input) for job, _ in ready])
            except (ValueError, RuntimeError, MemoryError) as err:  # e.g. out of memory on one huge image
                for job, _ in ready:
                    fail(job, err)
                results = []
            for (job, _), result in zip(ready, results):
                try:
                    write_image(job.output, result.image)
                    if args.detect:
                        write_json(job.json, dict(input=job.input, output=job.output, **result.to_dict()))
                        if not result.lines:
                            tqdm.write(f'note: no text lines found in {job.input}', file=sys.stderr)
                    else:
                        line = result.lines[0]
                        rows.append(
                            dict(filename=job.name, prior_text=line.prior_text, prior_confidence=line.prior_confidence,
                                 prior_token_confidences=line.token_confidences))
                    done += 1
                except (ValueError, OSError) as err:
                    fail(job, err)
        bar.update(len(jobs[first:first + chunk]))
    bar.close()
    if rows:
        write_prior_csv(os.path.join(args.output, PRIOR_CSV), rows)
    elapsed = time.perf_counter() - loaded
    per_image = f', {elapsed / done:.2f} s per image' if done else ''
    print(f'restored {done} of {len(jobs)} image(s) into {args.output} (model loaded in {loaded - start:.1f} s, '
          f'restored in {elapsed:.1f} s{per_image})')
    if failures:
        print(f'{len(failures)} image(s) failed:\n  ' + '\n  '.join(failures), file=sys.stderr)
        return 1
    return 0
