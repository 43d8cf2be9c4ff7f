"""TOLAPipeline with a real (tiny, random) TOLA network, and whole photos with the PP-OCRv4 detector."""
import json
import os

import cv2
import numpy as np
import pytest
import torch

from tola_plugin import TOLAPipeline
from tola_plugin.commands.data_preparation.photo_render import render_photo
from tola_plugin.inference.demo_model import demo_model_path, is_demo_model
from tola_plugin.inference.photo_geometry import expand_quad, reading_quad
from tola_plugin.inference.restoration import reads_as_well
from tola_plugin.ocr.recognition import Recognition
from tola_plugin.utils.user_cache import cache_root
from inference_testing import PHOTO_LINES, StandInRestorer, write_tiny_merged
from tola_testing import one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def tiny_model(tmp_path_factory):
    return write_tiny_merged(tmp_path_factory.mktemp('pipeline') / 'tiny_merged.safetensors')


def test_tiny_network_restores_lines_of_any_size(tiny_model):
    pipe = TOLAPipeline.from_merged(tiny_model, batch_size=3)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size, dtype=np.uint8) for size in ((40, 40, 3), (32, 160, 3), (20, 200, 3))]
    names = ['a.png', 'b.png', 'c.png']
    results = pipe(images, names=names)
    assert [r.image.shape for r in results] == [(128, 128, 3), (128, 640, 3), (128, 1280, 3)]
    for r in results:
        assert r.image.dtype == np.uint8 and r.image.std() > 0  # a restored image, not a constant
        line = r.lines[0]
        assert all(0.0 <= c <= 1.0 for c in line.token_confidences) and 0.0 <= line.prior_confidence <= 1.0
        assert line.prior_text and line.polygon is None and line.text_before is None
    assert len(results[2].lines[0].window_texts) == 3  # 1280 columns: 3 windows of 512 overlapping >= 128
    single = TOLAPipeline.from_merged(tiny_model, batch_size=1)
    one_by_one = single(images, names=names)
    for a, b in zip(one_by_one, results):
        # same code, same machine, batch 1 vs 3 (docs/testing.md): at most one grey level after rounding to 8 bits
        assert np.abs(a.image.astype(int) - b.image.astype(int)).max() <= 1
        assert a.lines[0].window_texts == b.lines[0].window_texts
    assert np.array_equal(single(images[0], names=['a.png']).image, one_by_one[0].image)  # deterministic


def test_a_canvas_shaped_line_is_restored_as_the_test_launcher_does(tiny_model):
    """A 1:4 line: one window, no pad; the network sees the datasets' canvas (to_canvas) with the launcher's seed; with
    the paper's colours (color_fix 'none', the test launcher's) the output is the launcher's."""
    from tola_plugin.archs.tola_arch import TOLANet, image_noise_seed
    from tola_plugin.data.text_line_source import to_canvas
    bgr = np.random.default_rng(3).integers(0, 256, (32, 128, 3), dtype=np.uint8)
    ours = TOLAPipeline.from_merged(tiny_model, color_fix='none')(np.ascontiguousarray(bgr[..., ::-1]), names=['x.png'],
                                                                  seed=7)
    net = TOLANet.from_merged(tiny_model)
    lq = torch.from_numpy(to_canvas(bgr)).permute(2, 0, 1)[None].contiguous()  # as BasicSR's data loader stacks it
    with torch.no_grad():
        out = net(lq, noise_seeds=[image_noise_seed('x.png', 7)])
    expected = (out[0].permute(1, 2, 0).numpy() * 255.0).round().astype(np.uint8)  # BasicSR's tensor2img rounding
    # the same function on the same weights; another copy of them may make a kernel sum in another order (float32,
    # ~1e-6 of a grey level's 4e-3), which can still cross one rounding boundary: at most one level, and most equal
    diff = np.abs(ours.image.astype(int) - expected.astype(int))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99


def test_loading_errors(tiny_model, tmp_path, monkeypatch):
    pipe = TOLAPipeline.from_merged(tiny_model)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match='CUDA is not available'):
            pipe.to('cuda')
    monkeypatch.chdir(tmp_path)  # no model given, from a folder that is not the clone: the shipped demo model
    demo = TOLAPipeline.from_merged(backend='torch')
    assert is_demo_model(demo.runtime.source.merged) and demo.runtime.source.merged == demo_model_path()
    assert os.path.dirname(demo_model_path()) == os.path.join(cache_root(), 'demo') and not os.listdir(tmp_path)
    demo.close()
    assert not is_demo_model(tiny_model)  # by its weights: a model of another backbone is not the demo's
    with pytest.raises(ValueError, match='overlap'):
        TOLAPipeline(StandInRestorer(), overlap=512)
    with pytest.raises(ValueError, match='outscale'):
        TOLAPipeline(StandInRestorer())(np.zeros((8, 8, 3), np.uint8), outscale=0)


def test_photo_lines_are_found_restored_and_pasted_back_in_place():
    photo, quads, ink = render_photo(PHOTO_LINES, height=480, width=640)
    # every restored line comes back inverted, and is pasted with the network's colours (the geometry under test)
    pipe = TOLAPipeline(StandInRestorer(invert=True), color_fix='none', paste='all')
    result = pipe(photo, detect=True, outscale=1)
    assert result.image.shape == photo.shape and len(result.lines) == len(PHOTO_LINES)
    pasted = np.zeros(photo.shape[:2], np.uint8)
    for line in result.lines:
        cv2.fillConvexPoly(pasted,
                           np.round(expand_quad(reading_quad(np.float32(line.polygon)), pipe.margin)).astype(np.int32),
                           1)
    # every line found: each rendered line's centre lies in exactly one detected polygon
    found = []
    for quad, truth in zip(quads, PHOTO_LINES):
        inside = [
            cv2.pointPolygonTest(np.float32(line.polygon), tuple(map(float, quad.mean(0))), False) > 0
            for line in result.lines
        ]
        assert sum(inside) == 1, truth.text
        found.append(result.lines[inside.index(True)])
    assert len({id(line) for line in found}) == len(PHOTO_LINES)
    assert not (ink & (pasted == 0)).any()  # every ink pixel lies in a pasted region
    # in place: nothing changes outside the pasted regions (plus the 2-pixel reach of bilinear warping) ...
    reach = cv2.dilate(pasted, np.ones((5, 5), np.uint8)).astype(bool)
    assert np.array_equal(result.image[~reach], photo[~reach])
    # ... and each ink pixel's core comes back inverted where it was (measured at most 22 grey levels from
    # 255 - input, interpolation of the warps; a misplaced line is ~150 levels off)
    core = cv2.erode(ink.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)
    assert np.abs(result.image.astype(int) - (255 - photo.astype(int))).max(-1)[core].max() <= 64
    # PP-OCRv4 read the lines before and after (the upside-down line turned the right way up first)
    for line, truth in zip(found, PHOTO_LINES):
        assert line.text_before.replace(' ', '') == truth.text.replace(' ', '')
        assert isinstance(line.text_after, str) and 0.0 <= line.confidence_after <= 1.0
    summary = json.loads(json.dumps(result.to_dict()))
    assert summary['detected'] and len(summary['lines']) == len(PHOTO_LINES)
    assert len(summary['lines'][0]['polygon']) == 4
    # default scale: 1, the photo's own size (not one its lines suggest; issue 49)
    own = pipe(photo, detect=True, recognize=False)
    assert own.outscale == 1.0 and own.image.shape == photo.shape
    assert own.lines[0].text_before is None


def test_photo_without_text_is_returned_resized():
    blank = np.full((96, 128, 3), 200, np.uint8)
    result = TOLAPipeline(StandInRestorer())(blank, detect=True, outscale=2)
    assert result.lines == [] and result.image.shape == (192, 256, 3) and (result.image == 200).all()


def test_frozen_route_needs_no_adaptation_checkpoint(tmp_path, one_thread):  # noqa: F811
    """The no-training route (options/ablations/test_frozen_one_step.yml: no LoRA, no LRC) loads from its option file
    alone; a network with adapters and no checkpoint is refused."""
    import yaml

    from tola_testing import REPO, load_yaml, tiny_backbone
    opt = load_yaml(os.path.join(REPO, 'options', 'ablations', 'test_frozen_one_step.yml'))
    assert opt['network_g']['idm_lora'] is False and opt['network_g']['lrc'] is None
    for key in ('difftsr_checkpoint', 'transocr_checkpoint'):
        opt['network_g'].pop(key, None)
    opt['network_g'].update(tiny_backbone())
    path = tmp_path / 'frozen.yml'
    path.write_text(yaml.safe_dump(opt), encoding='utf-8')
    result = TOLAPipeline.from_options(str(path))(np.full((40, 200, 3), 200, np.uint8))
    assert result.image.shape == (128, 640, 3) and result.image.dtype == np.uint8
    opt['network_g']['idm_lora'] = True
    path.write_text(yaml.safe_dump(opt), encoding='utf-8')
    with pytest.raises(ValueError, match='no adaptation checkpoint'):
        TOLAPipeline.from_options(str(path))


def test_user_tools_align_colours_and_paste_only_lines_that_read_as_well():
    """TOLAPipeline (tola-infer, tola-web) keeps the input's colours by default (luma; the paper's 'none' stays in
    BasicSR's test pipeline), and in a photo puts back only the restored lines PP-OCRv4 reads as well as the
    originals; the others stay as they were, and the record says which."""
    from tola_cli import infer as infer_cli
    from tola_cli import web as web_cli
    assert TOLAPipeline(StandInRestorer()).color_fix == 'luma' == infer_cli.parse_args(['-i', 'x']).color_fix
    assert web_cli.parse_args([]).color_fix == 'luma' and infer_cli.parse_args(['-i', 'x']).paste == 'checked'
    photo, _, _ = render_photo(PHOTO_LINES, height=480, width=640)
    blank = TOLAPipeline(StandInRestorer(blank=True), color_fix='none')  # every line restored empty: unreadable
    kept = blank(photo, detect=True, outscale=1)
    assert kept.lines and not any(line.pasted for line in kept.lines)
    assert np.array_equal(kept.image, photo)  # nothing pasted: the photo as it was
    assert all(line.text_after == '' and line.text_before for line in kept.lines)
    assert all(line.not_pasted_because == 'PP-OCRv4 reads no text in the restored line' for line in kept.lines)
    pasted = TOLAPipeline(StandInRestorer(blank=True), color_fix='none', paste='all')(photo, detect=True, outscale=1)
    assert all(line.pasted for line in pasted.lines) and not np.array_equal(pasted.image, photo)
    assert json.loads(json.dumps(kept.to_dict()))['lines'][0]['pasted'] is False
    same = TOLAPipeline(StandInRestorer())(photo, detect=True, outscale=1)  # reads the same: every line pasted
    assert all(line.pasted for line in same.lines)
    with pytest.raises(ValueError, match="paste 'checked' .* needs recognize"):
        blank(photo, detect=True, recognize=False)
    assert TOLAPipeline(StandInRestorer())(photo).lines[0].pasted is None  # one line: nothing pasted into a photo
    read = lambda text, confidence: Recognition(text, confidence)  # noqa: E731
    assert reads_as_well(read('ab', 0.9), read('ab', 0.5)) and reads_as_well(read('ab', 0.5), read('xy', 0.6))
    assert not reads_as_well(read('ab', 0.9), read('xy', 0.8)) and not reads_as_well(read('', 0.0), read(' ', 0.0))
