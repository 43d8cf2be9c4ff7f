"""Which restored lines of a photo should replace the originals: rendered photos with known texts, restored in detect
mode, every line read by PP-OCRv4 before and after, and the accuracy of the photo's lines under each rule
(tools/measure_photo_lines.py; docs/restore.md, "Which lines are pasted").

Photos: ``render_photo`` (dark ink on a light gradient with noise) at 960x720 with four lines of random texts of the
demo character set (categories as the training data's), 36-63 pixels high, turned by -15..15 degrees, then
bicubic-downsampled x3 to 320x240 (as the bundled example photo). A detected line is matched to the rendered line
whose centre is nearest (within 20 pixels of the photo); its label is that line's text. Accuracy: PP-OCRv4's reading
equals the label after the paper's normalisation, lower-cased (docs/evaluation.md).
"""
import json
import os
import time
from typing import Dict, List, Optional

import cv2
import numpy as np

from tola_plugin.data.text_render import CATEGORIES, DEFAULT_CATEGORY_PROBS, chinese_pool, random_text
from tola_plugin.data_preparation.photo_render import PhotoLine, render_photo
from tola_plugin.inference.pipeline import TOLAPipeline, reads_as_well
from tola_plugin.metrics.text_metrics import normalize
from tola_plugin.ocr.recognition import Recognition
from tola_plugin.utils.atomic_files import write_json

LINE_ROWS = (120, 300, 480, 640)  # the rendered lines' centres, rows of the 960x720 photo


def labelled_photo(index: int, seed: int):
    """(the 320x240 photo RGB uint8, its PhotoLines, their quadrilaterals in the 960x720 photo) of ``index``."""
    rng = np.random.default_rng([seed, index])
    lines = []
    for row in LINE_ROWS:
        category = CATEGORIES[rng.choice(len(CATEGORIES), p=DEFAULT_CATEGORY_PROBS)]
        text = random_text(rng, category, chinese_pool('demo'))
        centre = (int(rng.integers(330, 630)), row)
        lines.append(PhotoLine(text, float(rng.uniform(-15, 15)), centre, int(rng.integers(36, 64))))
    photo, quads, _ = render_photo(lines, height=720, width=960, seed=index)
    return cv2.resize(photo, (320, 240), interpolation=cv2.INTER_CUBIC), lines, quads


def measure_photo_lines(out: str, photos: int = 25, seed: int = 0, model: Optional[str] = None,
                        color_fix: str = 'wavelet') -> Dict:
    """Restore ``photos`` labelled photos with ``model`` (None: the demo model), every line read before and after;
    write ``out`` (JSON: each line's readings, and the accuracy of the originals, of the restored lines and of the
    rule ``reads_as_well``) and print the summary."""
    pipe = TOLAPipeline.from_merged(model, color_fix=color_fix, paste='all')
    rows: List[Dict] = []
    start = time.perf_counter()
    for index in range(photos):
        photo, lines, quads = labelled_photo(index, seed)
        result = pipe(photo, detect=True, recognize=True, outscale=1, names=[f'photo_{index}.png'])
        centres = np.array([q.mean(0) / 3.0 for q in quads])
        for line in result.lines:
            distance = np.linalg.norm(centres - np.mean(line.polygon, 0), axis=1)
            if distance.min() > 20:
                continue  # not one of the rendered lines (a split or merged detection)
            label = normalize(lines[int(distance.argmin())].text, True)
            rows.append(
                dict(photo=index, label=lines[int(distance.argmin())].text, before=line.text_before,
                     confidence_before=line.confidence_before, after=line.text_after,
                     confidence_after=line.confidence_after, right_before=normalize(line.text_before, True) == label,
                     right_after=normalize(line.text_after, True) == label))
    pipe.close()
    kept = [
        reads_as_well(Recognition(r['before'], r['confidence_before']), Recognition(r['after'], r['confidence_after']))
        for r in rows
    ]
    summary = {
        'lines': len(rows), 'photos': photos, 'seed': seed, 'color_fix': color_fix, 'model': model or 'demo',
        'accuracy_original': float(np.mean([r['right_before'] for r in rows])),
        'accuracy_restored': float(np.mean([r['right_after'] for r in rows])), 'accuracy_reads_as_well': float(
            np.mean([r['right_after'] if k else r['right_before']
                     for r, k in zip(rows, kept)])), 'pasted_fraction': float(np.mean(kept)),
        'restored_right_original_wrong': sum(r['right_after'] and not r['right_before'] for r in rows),
        'restored_wrong_original_right': sum(r['right_before'] and not r['right_after']
                                             for r in rows), 'seconds': round(time.perf_counter() - start, 1)
    }
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_json(out, {'summary': summary, 'lines': rows})
    print(json.dumps(summary, indent=1))
    return summary
