"""tola-infer (tola_cli/infer.py): odd files, output safety, flags, whole photos, a photo or a line decided per image,
fast --help."""
import json
import os
import subprocess
import sys

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from tola_cli import infer
from tola_plugin.commands.data_preparation.photo_render import render_photo
from tola_plugin.inference.prior_csv import read_prior_csv
from inference_testing import PHOTO_LINES, InkDetector, InkReader, write_tiny_merged
from tola_testing import one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def tiny_model(tmp_path_factory):
    return write_tiny_merged(tmp_path_factory.mktemp('cli') / 'tiny_merged.safetensors')


def odd_folder(root):
    """Lines stored every awkward way, plus three files that cannot be read. -> (folder, {name: expected shape})"""
    folder = root / 'odd'
    folder.mkdir()
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (32, 96, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(folder / 'plain.png')
    Image.fromarray(rgb[..., 0]).save(folder / 'gray.png')
    cv2.imwrite(str(folder / 'deep16.png'), (rgb.astype(np.uint16) * 257))
    rgba = np.dstack([rgb, np.where(rng.random((32, 96)) > 0.5, 255, 0).astype(np.uint8)])
    Image.fromarray(rgba).save(folder / 'alpha.png')
    Image.fromarray(rgb).convert('CMYK').save(folder / 'cmyk.jpg')
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: shown rotated 90 degrees clockwise -> 96 x 32 upright
    Image.fromarray(rgb).save(folder / 'rotated.jpg', exif=exif)
    (folder / 'empty.png').write_bytes(b'')
    (folder / 'text.png').write_text('not an image')
    data = (folder / 'plain.png').read_bytes()
    (folder / 'truncated.png').write_bytes(data[:len(data) // 2])
    expected = {
        'plain.png': (128, 384, 3), 'gray.png': (128, 384, 3), 'deep16.png': (128, 384, 3), 'alpha.png': (128, 384, 3),
        'cmyk.jpg': (128, 384, 3), 'rotated.jpg': (128, 43, 3)
    }
    return folder, expected


def test_odd_files_are_handled_or_reported_and_the_rest_go_on(tiny_model, tmp_path, capsys):
    folder, expected = odd_folder(tmp_path)
    out = tmp_path / 'out'
    status = infer.main(['-i', str(folder), '-o', str(out), '--model', tiny_model, '--batch-size', '4'])
    assert status == 1
    for name, shape in expected.items():
        assert cv2.imread(str(out / name)).shape == shape, name
    assert sorted(os.listdir(out)) == sorted(list(expected) + ['prior.csv'])
    prior = read_prior_csv(str(out / 'prior.csv'))
    assert set(prior) == set(expected)
    err = capsys.readouterr()
    for bad in ('empty.png', 'text.png', 'truncated.png'):
        assert f'failed: {folder / bad}: not a decodable image' in err.err
    assert '3 image(s) failed' in err.err and 'restored 6 of 9 image(s)' in err.out


def test_outputs_never_replace_inputs_or_existing_files(tiny_model, tmp_path):
    folder = tmp_path / 'lines'
    folder.mkdir()
    line = np.random.default_rng(1).integers(0, 256, (24, 60, 3), dtype=np.uint8)
    cv2.imwrite(str(folder / 'a.png'), line)
    before = (folder / 'a.png').read_bytes()
    with pytest.raises(ValueError, match='outputs would replace inputs'):
        infer.main(['-i', str(folder), '-o', str(folder), '--model', tiny_model, '--overwrite'])
    assert (folder / 'a.png').read_bytes() == before
    out = tmp_path / 'out'
    single = str(folder / 'a.png')  # a single file works as -i
    assert infer.main(
        ['-i', single, '-o',
         str(out), '--model', tiny_model, '--suffix', '_x', '--ext', 'jpg', '-s', '2']) == 0
    assert cv2.imread(str(out / 'a_x.jpg')).shape == (48, 120, 3)
    # a rerun skips the existing output (never replaced without --overwrite)
    assert infer.main(['-i', single, '-o', str(out), '--model', tiny_model, '--suffix', '_x', '--ext', 'jpg']) == 0
    assert cv2.imread(str(out / 'a_x.jpg')).shape == (48, 120, 3)
    assert infer.main(
        ['-i', single, '-o',
         str(out), '--model', tiny_model, '--suffix', '_x', '--ext', 'jpg', '--overwrite']) == 0
    assert cv2.imread(str(out / 'a_x.jpg')).shape == (128, 320, 3)
    # outputs into the input folder are fine with a suffix; --recursive keeps subfolders
    (folder / 'sub').mkdir()
    cv2.imwrite(str(folder / 'sub' / 'b.png'), line)
    assert infer.main(['-i', str(folder), '-o', str(tmp_path / 'rec'), '--model', tiny_model, '--recursive']) == 0
    assert set(read_prior_csv(str(tmp_path / 'rec' / 'prior.csv'))) == {'a.png', 'sub/b.png'}
    # two inputs with one output name
    cv2.imwrite(str(folder / 'a.bmp'), line)
    with pytest.raises(ValueError, match='would both be written'):
        infer.main(['-i', str(folder), '-o', str(tmp_path / 'clash'), '--model', tiny_model])


def test_flags_are_strict(tiny_model, tmp_path, monkeypatch, capsys):
    base = ['-i', str(tmp_path), '--model', tiny_model]
    strict = [['--out', 'x'], ['--over'], ['--overlap', '512'], ['--batch-size', '0'], ['-s', '0'],
              ['--checkpoint', 'c.pth'], ['--alpha-background', '1,2'], ['-opt', 'o.yml']]
    for bad in strict:
        with pytest.raises(SystemExit) as exc:
            infer.parse_args(base + bad)  # abbreviations are off: --out is not --output
        assert exc.value.code == 2, bad
    assert infer.parse_args(base + ['-o', 'x']).output == 'x'  # -o is the output, not -opt
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match='CUDA is not available'):
            infer.main(base + ['--device', 'cuda', '-o', str(tmp_path / 'o')])
    monkeypatch.chdir(tmp_path)
    cv2.imwrite(str(tmp_path / 'a.png'), np.zeros((8, 8, 3), np.uint8))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:  # the console script: one line naming the option, no traceback
        infer.cli(['-i', 'a.png', '-o', 'o', '--model', 'absent.safetensors'])
    assert exc.value.code == 2
    message = capsys.readouterr().err
    assert message.startswith('error: --model absent.safetensors: no such file') and 'Traceback' not in message
    assert 'demo model' in message and not os.path.exists(tmp_path / 'o')


def test_streams_is_gone(tmp_path, capsys):
    """OpenVINO's throughput streams measured 1.00-1.07x and were removed (docs/inference.md, "Folders: one
    stream"): --streams is an unknown option, refused by name, and the help no longer offers it."""
    for value in ('1', '2', 'auto'):
        with pytest.raises(SystemExit) as exc:
            infer.parse_args(['-i', str(tmp_path), '--streams', value])
        assert exc.value.code == 2 and 'unrecognized arguments: --streams' in capsys.readouterr().err
    assert '--streams' not in infer.build_parser().format_help()


def test_help_answers_without_importing_torch():
    code = ('import sys\nfrom tola_cli import infer\ntry:\n    infer.main(["--help"])\nexcept SystemExit as e:\n'
            '    assert e.code == 0\nheavy = [m for m in ("torch", "basicsr", "tola_plugin") if m in sys.modules]\n'
            'assert not heavy, heavy\n')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert '--detect' in proc.stdout and '--outscale' in proc.stdout
    # the docs/ pages it names are not installed with pip: the help says where they are
    assert "the docs/ pages named here are in the source repository (tola-plugin's docs/ folder), not in a pip " \
        'install' in ' '.join(proc.stdout.split())


def test_detect_writes_the_restored_photo_and_a_json_of_lines(tiny_model, tmp_path):
    photo, _, _ = render_photo(PHOTO_LINES, height=480, width=640)
    cv2.imwrite(str(tmp_path / 'photo.png'), photo[..., ::-1])
    out = tmp_path / 'out'
    assert infer.main([
        '-i',
        str(tmp_path / 'photo.png'), '-o',
        str(out), '--model', tiny_model, '--detect', '-s', '1', '--batch-size', '4'
    ]) == 0
    assert cv2.imread(str(out / 'photo.png')).shape == (480, 640, 3)
    report = json.loads((out / 'photo.json').read_text(encoding='utf-8'))
    assert report['input'] == str(tmp_path / 'photo.png') and report['output_size'] == [480, 640]
    assert sorted(line['text_before'].replace(' ', '') for line in report['lines']) == \
        sorted(line.text.replace(' ', '') for line in PHOTO_LINES)
    for line in report['lines']:
        assert len(line['polygon']) == 4 and line['prior_text'] and 0.0 <= line['prior_confidence'] <= 1.0
        assert isinstance(line['text_after'], str)
    assert not (out / 'prior.csv').exists()


def test_what_needs_no_network_is_decided_without_importing_torch(tmp_path):
    """A missing --model, and a rerun whose outputs all exist, answer without importing torch or a network (in a
    fresh interpreter: milliseconds instead of the seconds of torch's import and the model's load)."""
    lines = tmp_path / 'lines'
    lines.mkdir()
    for name in ('a.png', 'b.png'):
        cv2.imwrite(str(lines / name), np.zeros((32, 128, 3), np.uint8))
    out = tmp_path / 'out'
    out.mkdir()
    for name in ('a.png', 'b.png'):  # an earlier run's outputs
        cv2.imwrite(str(out / name), np.zeros((128, 512, 3), np.uint8))
    probe = ('import json, sys\nfrom tola_cli import infer\nargs = json.loads(sys.argv[1])\ntry:\n'
             '    status = infer.main(args)\nexcept FileNotFoundError as err:\n    status = str(err)\n'
             'print(json.dumps([status, [m for m in ("torch", "basicsr", "diffusers") if m in sys.modules]]))\n')
    for args, expected in (([], 0), (['--model', 'absent.safetensors'], '--model absent.safetensors: no such file')):
        proc = subprocess.run([sys.executable, '-c', probe,
                               json.dumps(['-i', str(lines), '-o', str(out)] + args)], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        status, heavy = json.loads(proc.stdout.splitlines()[-1])
        assert heavy == [] and (status == expected or str(status).startswith(str(expected))), (status, heavy)
        if not args:
            assert 'skipped 2 image(s) whose output already exists' in proc.stdout


# ------------------------------------------------------- issue 49 item 1: a photo or a line, per image, and said so
@pytest.fixture
def ink_ocr(monkeypatch):
    """PP-OCRv4 replaced by its ink stand-ins (tests/inference_testing.py): the lines a photo has are known exactly."""
    from tola_plugin.inference import pipeline
    monkeypatch.setattr(pipeline, 'PPOCRv4Detector', InkDetector)
    monkeypatch.setattr(pipeline, 'PPOCRv4Recognizer', InkReader)


def write_white(path, height, width, ink=None):
    """A white image file, with a black box of "ink" at ``ink`` = ((first row, end row), (first column, end column))."""
    rgb = np.full((height, width, 3), 255, np.uint8)
    if ink is not None:
        (r0, r1), (c0, c1) = ink
        rgb[r0:r1, c0:c1] = 0
    cv2.imwrite(str(path), rgb)


def test_each_image_is_restored_as_what_it_looks_like_and_the_run_says_which(tmp_path, stand_in, ink_ocr, capsys):
    """Without --detect a 1500x1000 photo was squashed into one 192x128 "line", silently. By default (--kind auto,
    the web page's rule) a photo is restored as a photo and a line as a line, and each image's line says which;
    --kind line and --kind photo (--detect) decide for every image."""
    folder = tmp_path / 'in'
    folder.mkdir()
    write_white(folder / 'photo.png', 1000, 1500, ink=((480, 520), (300, 1200)))
    cv2.imwrite(str(folder / 'line.png'), np.random.default_rng(0).integers(0, 256, (32, 128, 3), dtype=np.uint8))
    out = tmp_path / 'auto'
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 0
    printed = capsys.readouterr()
    assert cv2.imread(str(out / 'photo.png')).shape == (1000, 1500, 3)
    record = json.loads((out / 'photo.json').read_text(encoding='utf-8'))
    assert record['detected'] and len(record['lines']) == 1 and record['lines'][0]['pasted']
    assert cv2.imread(str(out / 'line.png')).shape == (128, 512, 3) and not (out / 'line.json').exists()
    assert set(read_prior_csv(str(out / 'prior.csv'))) == {'line.png'}
    assert (f'{folder / "photo.png"}: a photo (auto: taller than two lines or not wide): 1 line(s) found, 1 restored '
            'in place; 1500x1000 -> 1500x1000') in printed.err
    assert f'{folder / "line.png"}: one text line (auto: line-shaped); 128x32 -> 512x128' in printed.err
    assert 'restored 2 of 2 image(s)' in printed.out
    # asked for: every image one line ...
    assert infer.main(['-i', str(folder), '-o', str(tmp_path / 'lines'), '--kind', 'line']) == 0
    assert cv2.imread(str(tmp_path / 'lines' / 'photo.png')).shape == (128, 192, 3)
    assert f'{folder / "photo.png"}: one text line (as asked); 1500x1000 -> 192x128' in capsys.readouterr().err
    # ... or every image a photo
    for flags in (['--detect'], ['--kind', 'photo']):
        photos = tmp_path / 'photos'
        assert infer.main(['-i', str(folder), '-o', str(photos), '--overwrite'] + flags) == 0
        assert cv2.imread(str(photos / 'line.png')).shape == (32, 128, 3) and not (photos / 'prior.csv').exists()
        assert json.loads((photos / 'line.json').read_text(encoding='utf-8'))['detected']
        assert f'{folder / "line.png"}: a photo (as asked): 1 line(s) found' in capsys.readouterr().err
    for flags in (['--detect', '--kind', 'line'], ['--kind', 'both']):
        with pytest.raises(SystemExit) as usage:
            infer.parse_args(['-i', str(folder)] + flags)
        assert usage.value.code == 2, flags


def test_the_summary_counts_only_the_images_really_restored(tmp_path, stand_in, ink_ocr, capsys):
    """--detect on single-line images found no line in most and still said "restored 6 of 6": an image with no line
    found, or whose restored lines were all left out, is written as it was and said to be, not counted restored."""
    folder = tmp_path / 'in'
    folder.mkdir()
    for name in ('blank_a.png', 'blank_b.png'):
        write_white(folder / name, 32, 128)
    write_white(folder / 'word.png', 32, 128, ink=((8, 24), (16, 112)))
    out = tmp_path / 'out'
    assert infer.main(['-i', str(folder), '-o', str(out), '--detect']) == 0
    printed = capsys.readouterr()
    assert 'restored 1 of 3 image(s)' in printed.out
    assert (f'not restored: 2 photo(s) with no text line found, written as they were: {folder / "blank_a.png"}, '
            f'{folder / "blank_b.png"}') in printed.out
    assert f'{folder / "blank_a.png"}: a photo (as asked): no text line found, written as it was' in printed.err
    assert f'{folder / "word.png"}: a photo (as asked): 1 line(s) found, 1 restored in place' in printed.err
    for name in ('blank_a', 'blank_b'):
        assert json.loads((out / f'{name}.json').read_text(encoding='utf-8'))['lines'] == []
    # a line found and restored, but read less well restored (here: into nothing), is left out: nothing restored
    stand_in.blank = True
    left = ['-i', str(folder / 'word.png'), '-o', str(tmp_path / 'left'), '--detect', '--color-fix', 'none']
    assert infer.main(left) == 0
    printed = capsys.readouterr()
    assert 'restored 0 of 1 image(s)' in printed.out
    assert (f'not restored: 1 photo(s) whose restored lines read less well (PP-OCRv4) or changed colour, written as '
            f'they were (--paste all puts them in): {folder / "word.png"}') in printed.out
    assert f'{folder / "word.png"}: a photo (as asked): 1 line(s) found, 0 restored in place' in printed.err


def test_a_photo_keeps_its_size_times_the_asked_scale(tmp_path, stand_in, ink_ocr):
    """--detect enlarged photos by factors nobody asked for (x1.45, x3.82: the median line to 128 rows, up to 4): a
    photo's output is its size times --outscale (1 without it); only its restored lines are resized, to their place."""
    write_white(tmp_path / 'photo.png', 200, 300, ink=((95, 105), (40, 260)))  # a line 10 rows high: x4 before
    for scale, size in (([], [200, 300]), (['-s', '2'], [400, 600]), (['-s', '0.5'], [100, 150])):
        out = tmp_path / ('out' + ''.join(scale))
        assert infer.main(['-i', str(tmp_path / 'photo.png'), '-o', str(out), '--detect'] + scale) == 0
        assert list(cv2.imread(str(out / 'photo.png')).shape[:2]) == size, scale
        record = json.loads((out / 'photo.json').read_text(encoding='utf-8'))
        assert record['output_size'] == size and record['outscale'] == size[0] / 200 and record['lines'][0]['pasted']


# ------------------------------------------------------- issue 49 item 3: a photo's restoration says what it does
class ComponentDetector(InkDetector):
    """PP-OCRv4's detector contract without its model: one "line" per blob of ink (its bounding box), top to bottom."""

    def __call__(self, image_rgb):
        count, _, stats, _ = cv2.connectedComponentsWithStats((image_rgb.min(-1) < 128).astype(np.uint8))
        boxes = sorted(stats[1:count, :4].tolist(), key=lambda box: box[1])
        return np.float32([[[x, y], [x + w, y], [x + w, y + h], [x, y + h]] for x, y, w, h in boxes]).reshape(-1, 4, 2)


def test_a_photo_says_its_lines_found_and_restored_with_the_time_left(tmp_path, stand_in, ink_ocr, monkeypatch, capsys):
    """One photo restored for 30-39 s with nothing printed (the folder's progress counts images only). Now its lines
    found, each step of lines restored with the time so far and left (each window here takes 4 s of a clock the test
    holds), and the reading before and after are printed as they happen."""
    from tola_plugin.inference import pipeline
    monkeypatch.setattr(pipeline, 'PPOCRv4Detector', ComponentDetector)
    clock = [1000.0]
    monkeypatch.setattr('tola_plugin.inference.folder_run.time.perf_counter', lambda: clock[0])
    stand_in.register_forward_hook(lambda *_: clock.__setitem__(0, clock[0] + 4.0))
    write_white(tmp_path / 'photo.png', 600, 400, ink=((100, 130), (40, 140)))  # short lines: one window each
    rgb = cv2.imread(str(tmp_path / 'photo.png'))
    rgb[400:430, 40:130] = 0  # a second line
    cv2.imwrite(str(tmp_path / 'photo.png'), rgb)
    assert infer.main(['-i', str(tmp_path / 'photo.png'), '-o', str(tmp_path / 'out'), '--batch-size', '1']) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith(str(tmp_path / 'photo.png'))]
    photo = str(tmp_path / 'photo.png')
    assert said[:5] == [
        f'{photo}: finding the text lines (PP-OCRv4)', f'{photo}: 2 text line(s) found (2 windows of 128x512)',
        f'{photo}: 1 of 2 line(s) restored, 4 s, about 4 s left', f'{photo}: 2 of 2 line(s) restored, 8 s',
        f'{photo}: reading the lines with PP-OCRv4, before and after, 8 s'
    ]
    assert said[5].startswith(f'{photo}: a photo (auto: taller than two lines or not wide): 2 line(s) found, 2 ')
