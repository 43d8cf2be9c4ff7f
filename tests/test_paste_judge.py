"""Issue 49, item 2: a restored line of a photo is pasted (``paste='checked'``) only when PP-OCRv4 reads it as well
AND its ink and the background at its seam kept their colours (``inference/paste_judge.py``); the record says why
not. And the before/after figure of docs/restore.md runs as the page says."""
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from tola_lab.demo.restore_figure import GAP, SAMPLE_W
from tola_plugin import TOLAPipeline
from tola_plugin.assets.samples import sample_paths
from tola_plugin.commands.data_preparation.photo_render import render_photo
from tola_plugin.inference.paste_judge import INK_MAX_DELTA_E, SEAM_MAX_DELTA_E, ColourCheck, check_colours
from inference_testing import PHOTO_LINES, StandInRestorer
from launcher_testing import doc_commands, run_doc_command

PURPLE = (0.45, 0.1, 0.55)


def reference_lab(rgb) -> np.ndarray:
    """CIELAB of an 8-bit sRGB colour by the textbook formulas, float64 (sRGB companding, D65 white)."""
    c = np.asarray(rgb, np.float64) / 255.0
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055)**2.4)
    xyz = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                    [0.0193339, 0.1191920, 0.9503041]]) @ c / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29)**3, np.cbrt(xyz), xyz / (3 * (6 / 29)**2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def strip(ink, paper, box=None) -> np.ndarray:
    """A 40x200 strip: ``paper``, a 10x100 block of ``ink`` in the middle, the outer 6 pixels ``box`` if given."""
    out = np.empty((40, 200, 3), np.uint8)
    out[:] = paper if box is None else box
    out[6:34, 6:194] = paper
    out[15:25, 50:150] = ink
    return out


def test_delta_e_of_known_colours():
    original = strip((40, 35, 60), (215, 207, 195))
    same = check_colours(original, original)
    assert same == ColourCheck(0.0, 0.0) and same.refusal() == ''
    moved = check_colours(original, strip((120, 20, 140), (215, 207, 195), box=(250, 250, 250)))
    ink = np.linalg.norm(reference_lab((40, 35, 60)) - reference_lab((120, 20, 140)))
    seam = np.linalg.norm(reference_lab((215, 207, 195)) - reference_lab((250, 250, 250)))
    # cv2's float conversion interpolates its tables: within 0.1 of the formulas (measured 0.04 and 0.06 here)
    assert moved.ink_delta_e == pytest.approx(ink, abs=0.1) and moved.seam_delta_e == pytest.approx(seam, abs=0.1)
    assert ink > INK_MAX_DELTA_E and seam > SEAM_MAX_DELTA_E
    assert moved.refusal() == f'ink colour moved: ΔE {moved.ink_delta_e:.1f} > {INK_MAX_DELTA_E:g}'
    boxed = check_colours(original, strip((40, 35, 60), (215, 207, 195), box=(250, 250, 250)))
    assert boxed.ink_delta_e == 0.0 and boxed.refusal().startswith('background at the seam moved')
    # a light line (more dark than light pixels): the ink is the smaller, light side; the original is resized first
    light = check_colours(strip((230, 230, 230), (20, 20, 20))[:, ::2], strip((230, 200, 230), (20, 20, 20)))
    assert light.ink_delta_e == pytest.approx(
        np.linalg.norm(reference_lab((230, 230, 230)) - reference_lab((230, 200, 230))), abs=0.5)


class Recolouring(StandInRestorer):
    """Reads as the input (the identity), but turns its dark ink purple, or its light background white (a box)."""

    def __init__(self, ink=False, box=False):
        super().__init__()
        self.ink, self.box = ink, box

    def forward(self, lq, noise_seeds=None, return_intermediates=False):
        out = super().forward(lq, noise_seeds, return_intermediates)
        lum = lq.mean(1, keepdim=True)
        if self.ink:
            dark = ((0.6 - lum) / 0.3).clamp(0, 1)
            out['image'] = lq * (1 - dark) + torch.tensor(PURPLE).view(1, 3, 1, 1) * dark
        if self.box:
            light = ((lum - 0.4) / 0.3).clamp(0, 1)
            out['image'] = lq * (1 - light) + light
        return out


@pytest.mark.parametrize('restorer, why', [(Recolouring(ink=True), 'ink colour moved: ΔE'),
                                           (Recolouring(box=True), 'background at the seam moved')])
def test_a_line_read_the_same_but_recoloured_is_not_pasted(restorer, why):
    photo, _, _ = render_photo(PHOTO_LINES, height=480, width=640)
    result = TOLAPipeline(restorer, color_fix='none')(photo, detect=True, outscale=1)
    assert len(result.lines) == len(PHOTO_LINES)
    read = [line for line in result.lines if line.text_after == line.text_before]
    assert len(read) >= 3  # PP-OCRv4 reads them the same: the old rule (reads_as_well) pasted them
    assert not any(line.pasted for line in result.lines) and np.array_equal(result.image, photo)
    for line in read:
        assert line.not_pasted_because.startswith(why), line.not_pasted_because
    record = json.loads(json.dumps(result.to_dict()))['lines'][0]
    assert record['pasted'] is False and record['not_pasted_because'] and record['ink_delta_e'] >= 0
    # paste='all' puts them in regardless, and still records how far their colours moved
    every = TOLAPipeline(restorer, color_fix='none', paste='all')(photo, detect=True, outscale=1)
    assert all(line.pasted and line.not_pasted_because is None for line in every.lines)
    assert [line.ink_delta_e for line in every.lines] == [line.ink_delta_e for line in result.lines]


def test_a_faithful_line_is_pasted():
    photo, _, _ = render_photo(PHOTO_LINES, height=480, width=640)
    result = TOLAPipeline(StandInRestorer())(photo, detect=True, outscale=1)  # the defaults: luma, checked
    assert result.lines and all(line.pasted and line.not_pasted_because is None for line in result.lines)
    assert all(line.ink_delta_e == 0.0 and line.seam_delta_e == 0.0 for line in result.lines)
    assert TOLAPipeline(StandInRestorer())(photo).lines[0].ink_delta_e is None  # one line: no paste, no judge


@pytest.mark.end_to_end  # a docs page's command, run whole
def test_the_before_after_figure_runs_as_docs_restore_md_says(tmp_path, monkeypatch):
    """docs/restore.md's commands that make docs/images/samples_before_after.png, run literally (the demo model
    replaced by the identity, for speed): the figure is written, small, and holds what the page shows (the six
    sample lines before | after, then the photo's three panels)."""
    commands = doc_commands('docs/restore.md')
    samples = [c for c in commands if c[0] == 'tools/make_restore_samples.py']
    figure = [c for c in commands if c[0] == 'tools/plot_restore_figure.py' and '--before-after' in c]
    assert len(samples) == 1 and len(figure) == 1
    monkeypatch.setattr(TOLAPipeline, 'from_merged', classmethod(lambda cls, model=None: cls(StandInRestorer())))
    monkeypatch.setattr(TOLAPipeline, 'to', lambda self, device: self)
    for command in samples + figure:
        run_doc_command(command, str(tmp_path), monkeypatch)
    out = tmp_path / figure[0][figure[0].index('--out') + 1]
    assert out.is_file() and os.path.getsize(out) < 400 * 1024
    width, height = Image.open(out).size
    assert width == 2 * SAMPLE_W + GAP and height > len(sample_paths()) * 128 + (width - 2 * GAP) // 3 * 3 // 4
