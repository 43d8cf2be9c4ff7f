"""Images per second of a folder run: ``restore_folder`` (tola-infer's body) on a folder of ``lines`` rendered lines,
OpenVINO fp32, in each of ``SETTINGS``: the pipeline's own batch (from the free memory) and one window per call
(what batching brings). One setting at a time, a warm-up batch, the median of ``repeats`` runs. Each setting's output
images and text priors are compared with the first's. docs/inference.md, "Folders: one stream".
"""
import contextlib
import io
import os
import statistics
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np

from tola_lab.benchmarks.inference_inputs import rendered_lines
from tola_plugin.data.image_io import read_image_file, tensor_to_uint8, write_image
from tola_plugin.inference.folder_run import PRIOR_CSV, restore_folder
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.inference.prior_csv import read_prior_rows
from tola_plugin.runtime.serving import NoPathLeft

#: (name, batch size; None: the pipeline's own, from the free memory)
SETTINGS = (('batch auto', None), ('batch 1', 1))


def write_lines(folder: str, count: int) -> List[str]:
    """``count`` rendered, x4-degraded lines (``rendered_lines``, 128x512) as PNG files in ``folder`` -> names."""
    os.makedirs(folder, exist_ok=True)
    names = [f'line_{i:03d}.png' for i in range(count)]
    for name, image in zip(names, tensor_to_uint8(rendered_lines(count))):
        write_image(os.path.join(folder, name), image, order='RGB')
    return names


def _run_setting(merged: str, batch: Optional[int], source: str, out: str, repeats: int) -> Dict:
    pipe = TOLAPipeline.from_merged(merged, switches={'precision': 'fp32'}, backend='openvino', batch_size=batch)
    try:
        size = pipe.batch_size
        files = sorted(os.listdir(source))[:size]
        pipe.restore_each([os.path.join(source, f) for f in files])  # warm-up: the first batch
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):  # the run's summary lines
                status = restore_folder(source, out, pipe, overwrite=True)
            seconds.append(time.perf_counter() - start)
            if status != 0:
                raise RuntimeError(f'the folder run of {source} ended with status {status}')
        if pipe.backend != 'openvino':  # OpenVINO failed while serving: not this setting's speed
            raise RuntimeError(f'batch {size}: the run left OpenVINO ({pipe.describe_runtime()})')
        return {'batch': size, 'seconds': statistics.median(seconds), 'all_seconds': seconds}
    finally:
        pipe.close()


def _compare(first: str, other: str, names: List[str]) -> Dict:
    """The largest 8-bit difference between two runs' images, and whether their text priors are the same."""
    diff = max(
        int(
            np.abs(
                read_image_file(os.path.join(first, n)).astype(np.int16) -
                read_image_file(os.path.join(other, n)).astype(np.int16)).max()) for n in names)
    priors = [{r['filename']: r['prior_text']
               for r in read_prior_rows(os.path.join(f, PRIOR_CSV))} for f in (first, other)]
    return {'max_diff_u8': diff, 'same_text_prior': priors[0] == priors[1]}


def folder_throughput(merged: str, lines: int = 32, repeats: int = 1, settings=SETTINGS,
                      workdir: Optional[str] = None) -> Dict:
    """The folder measurement (module docstring) of the merged model ``merged`` -> {'lines', 'rows': {setting:
    {'batch', 'seconds', 'all_seconds', 'images_per_s', 'max_diff_u8', 'same_text_prior'}}, 'passed_over': {setting:
    why}}."""
    with tempfile.TemporaryDirectory(prefix='tola_folder_', dir=workdir) as folder:
        source = os.path.join(folder, 'lines')
        names = write_lines(source, lines)
        rows, passed_over, first = {}, {}, None
        for name, batch in settings:
            out = os.path.join(folder, f'out_{len(rows)}')
            try:
                row = _run_setting(merged, batch, source, out, repeats)
            except NoPathLeft as err:  # OpenVINO fp32 does not qualify here
                passed_over[name] = str(err)
                continue
            row['images_per_s'] = lines / row['seconds']
            first = first or out
            rows[name] = dict(row, **_compare(first, out, names))
    return {'lines': lines, 'repeats': repeats, 'rows': rows, 'passed_over': passed_over}


def folder_markdown(folder: Dict) -> List[str]:
    """The report's lines of the folder measurement."""
    lines = [
        '', f"Folder of {folder['lines']} lines (tola-infer's folder run, OpenVINO fp32, median of "
        f"{folder['repeats']}):", '',
        '| setting | batch | images / s | vs the first | max 8-bit diff | same text prior |',
        '|---|---:|---:|---:|---:|---:|'
    ]
    base = next(iter(folder['rows'].values()), {}).get('images_per_s')
    for name, row in folder['rows'].items():
        ratio = f"{row['images_per_s'] / base:.2f}x" if base else '-'
        lines.append(f"| {name} | {row['batch']} | {row['images_per_s']:.3f} | {ratio} | {row['max_diff_u8']} | "
                     f"{row['same_text_prior']} |")
    for name, why in folder['passed_over'].items():
        lines.append(f'| {name} | not run: {why} |')
    return lines
