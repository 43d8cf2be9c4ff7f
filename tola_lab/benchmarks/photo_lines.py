"""Which restored lines of a photo should replace the originals: rendered photos with known texts, restored in detect
mode, every line read by PP-OCRv4 before and after, and the accuracy of the photo's lines under each rule
(tools/measure_photo_lines.py; docs/restore.md, "Which lines are pasted").

Photos: ``render_photo`` (dark ink on a light gradient with noise) at 960x720 with four lines of random texts of the
demo character set (categories as the training data's), 36-63 pixels high, turned by -15..15 degrees, then
bicubic-downsampled x3 to 320x240 (as the bundled example photo). A detected line is matched to the rendered line
whose centre is nearest (within 20 pixels of the photo); its label is that line's text. Accuracy: PP-OCRv4's reading
equals the label after the paper's normalisation, lower-cased (docs/evaluation.md). Each line's colours are judged as
``paste='checked'`` judges them (``paste_judge``: ink and seam ΔE76), and so is the rendered 960x720 line, as a perfect
restorer would return it (sharper, so its ink is darker than the blurred original's: a ΔE a threshold must allow);
the rule is tried at other ink thresholds.
"""
import json
import os
import time
from typing import Dict, List, Optional

import cv2
import numpy as np

from tola_plugin.commands.data_preparation.photo_render import PhotoLine, render_photo
from tola_plugin.data.text_render import CATEGORIES, DEFAULT_CATEGORY_PROBS, chinese_pool, random_text
from tola_plugin.inference.line_geometry import to_canvas_height
from tola_plugin.inference.paste_judge import INK_MAX_DELTA_E, SEAM_MAX_DELTA_E, ColourCheck, check_colours
from tola_plugin.inference.photo_geometry import expand_quad, reading_quad, rectify, scale_quad
from tola_plugin.inference.pipeline import DEFAULT_COLOR_FIX, TOLAPipeline
from tola_plugin.inference.restoration import paste_refusal, reads_as_well
from tola_plugin.metrics.text_metrics import normalize
from tola_plugin.ocr.recognition import Recognition
from tola_plugin.utils.atomic_files import write_json

LINE_ROWS = (120, 300, 480, 640)  # the rendered lines' centres, rows of the 960x720 photo


def labelled_photo(index: int, seed: int):
    """(the 320x240 photo RGB uint8, its PhotoLines, their quadrilaterals in the 960x720 photo, the 960x720 photo) of
    ``index``."""
    rng = np.random.default_rng([seed, index])
    lines = []
    for row in LINE_ROWS:
        category = CATEGORIES[rng.choice(len(CATEGORIES), p=DEFAULT_CATEGORY_PROBS)]
        text = random_text(rng, category, chinese_pool('demo'))
        centre = (int(rng.integers(330, 630)), row)
        lines.append(PhotoLine(text, float(rng.uniform(-15, 15)), centre, int(rng.integers(36, 64))))
    photo, quads, _ = render_photo(lines, height=720, width=960, seed=index)
    return cv2.resize(photo, (320, 240), interpolation=cv2.INTER_CUBIC), lines, quads, photo


INK_SWEEP = (5, 10, 12, 14, 16, 18, 20, 25, 30, 40)  # ink thresholds (ΔE76) tried against the rule's, the seam's kept


def _accuracy(rows: List[Dict], pasted: List[bool]) -> float:
    """PP-OCRv4's accuracy on the photo's lines: the restored line's reading where pasted, else the original's."""
    return float(np.mean([r['right_after'] if k else r['right_before'] for r, k in zip(rows, pasted)]))


def summarise(rows: List[Dict]) -> Dict:
    """The accuracy of the originals, of the restored lines, of the old rule (``reads_as_well``) and of the rule
    ``paste='checked'`` applies (``paste_refusal``: reads as well, ink and seam colours held; its thresholds, and the
    accuracy at other ink thresholds), and the ΔEs' quartiles."""
    reads = np.array([r['reads_as_well'] for r in rows])
    checked = [not r['refusal'] for r in rows]
    ink, seam = (np.array([r[k] for r in rows]) for k in ('ink_delta_e', 'seam_delta_e'))
    sweep = {f'{t:g}': list(reads & (ink <= t) & (seam <= SEAM_MAX_DELTA_E)) for t in INK_SWEEP}
    summary = {
        'lines': len(rows), 'accuracy_original': float(np.mean([r['right_before'] for r in rows])),
        'accuracy_restored': float(np.mean([r['right_after'] for r in rows])),
        'accuracy_reads_as_well': _accuracy(rows, reads), 'pasted_fraction_reads_as_well': float(np.mean(reads)),
        'accuracy_checked': _accuracy(rows, checked), 'pasted_fraction_checked': float(np.mean(checked)),
        'refused_for_colour': int(sum(k and not c for k, c in zip(reads, checked))), 'ink_max_delta_e': INK_MAX_DELTA_E,
        'seam_max_delta_e': SEAM_MAX_DELTA_E
    }
    for key in ('ink_delta_e', 'seam_delta_e', 'ink_delta_e_rendered', 'seam_delta_e_rendered'):
        summary[f'{key}_quartiles'] = np.percentile([r[key] for r in rows], [0, 25, 50, 75, 100]).round(1).tolist()
    summary['accuracy_and_pasted_fraction_by_ink_threshold'] = {
        t: [_accuracy(rows, k), float(np.mean(k))]
        for t, k in sweep.items()
    }
    summary['restored_right_original_wrong'] = sum(r['right_after'] and not r['right_before'] for r in rows)
    summary['restored_wrong_original_right'] = sum(r['right_before'] and not r['right_after'] for r in rows)
    return summary


def measure_photo_lines(out: str, photos: int = 25, seed: int = 0, model: Optional[str] = None,
                        color_fix: str = DEFAULT_COLOR_FIX) -> Dict:
    """Restore ``photos`` labelled photos with ``model`` (None: the demo model), every line read before and after and
    its colours judged (``paste_judge``); write ``out`` (JSON: each line's readings, ΔEs and why ``paste='checked'``
    would leave it out, and ``summarise``'s summary) and print the summary."""
    pipe = TOLAPipeline.from_merged(model, color_fix=color_fix, paste='all')
    rows: List[Dict] = []
    start = time.perf_counter()
    for index in range(photos):
        photo, lines, quads, rendered = labelled_photo(index, seed)
        result = pipe(photo, detect=True, recognize=True, outscale=1, names=[f'photo_{index}.png'])
        centres = np.array([q.mean(0) / 3.0 for q in quads])
        for line in result.lines:
            distance = np.linalg.norm(centres - np.mean(line.polygon, 0), axis=1)
            if distance.min() > 20:
                continue  # not one of the rendered lines (a split or merged detection)
            label = lines[int(distance.argmin())].text
            # a perfect restorer: the rendered line itself (the strip of the 960x720 photo), judged as the restored
            quad = expand_quad(reading_quad(np.float32(line.polygon)), pipe.margin)
            perfect = check_colours(
                rectify(photo, quad), to_canvas_height(rectify(rendered, scale_quad(quad, 3))), pipe.feather)
            colours = ColourCheck(line.ink_delta_e, line.seam_delta_e)
            before = Recognition(line.text_before, line.confidence_before)
            after = Recognition(line.text_after, line.confidence_after)
            rows.append(
                dict(photo=index, label=label, before=before.text, confidence_before=before.confidence,
                     after=after.text, confidence_after=after.confidence,
                     right_before=normalize(before.text, True) == normalize(label, True),
                     right_after=normalize(after.text, True) == normalize(label, True), ink_delta_e=line.ink_delta_e,
                     seam_delta_e=line.seam_delta_e, refusal=paste_refusal(before, after, colours),
                     reads_as_well=reads_as_well(before, after), ink_delta_e_rendered=round(perfect.ink_delta_e, 2),
                     seam_delta_e_rendered=round(perfect.seam_delta_e, 2)))
    pipe.close()
    summary = dict(photos=photos, seed=seed, color_fix=color_fix, model=model or 'demo', **summarise(rows),
                   seconds=round(time.perf_counter() - start, 1))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    write_json(out, {'summary': summary, 'lines': rows})
    print(json.dumps(summary, indent=1, ensure_ascii=False))
    return summary
