"""Issue "Bounded inputs, outputs that never lie", tola-infer's folder runs: a bomb among good images (problem 1),
per-image isolation in batches (6), atomic outputs on a full disk and resuming after it (7), hard links (8), the
output-folder lock, merged and incremental prior.csv, Ctrl-C (9), and what is skipped is said (12).

The restorer is the identity stand-in (tests/inference_testing.py) unless the real tiny model is the point: the
outputs are then exactly the inputs at height 128, so a test can tell a complete file from a damaged one.
"""
import builtins
import csv
import errno
import json
import os
import signal
import subprocess
import sys

import cv2
import numpy as np
import pytest
from reliability_testing import SmallDisk, write_png_bomb

from tola_cli import infer
from tola_plugin.inference import folder_run
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.inference.prior_csv import read_prior_csv
from tola_plugin.utils.run_lock import ExperimentInUseError
from inference_testing import StandInRestorer, write_tiny_merged
from tola_testing import REPO, one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')


def noise(height=32, width=96, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def folder_of(root, names, seed=0):
    root.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        cv2.imwrite(str(root / name), noise(seed=seed + i))
    return root


def outputs(folder):
    return sorted(n for n in os.listdir(folder) if not n.startswith('.'))


def test_a_bomb_among_good_images_is_named_and_the_good_ones_restored(tmp_path, capsys):
    """Done-when of the issue: the folder run restores the good images, names the bomb and exits 1, no traceback."""
    model = write_tiny_merged(tmp_path / 'tiny.safetensors')
    folder = folder_of(tmp_path / 'in', ['a.png', 'c.png'])
    write_png_bomb(folder / 'b_bomb.png', 40000, 40000, rows=4)  # beyond OpenCV's own ceiling: cv2.error on main
    write_png_bomb(folder / 'd_bomb.png', 3000, 3000)  # a real one, under the budget given below
    out = tmp_path / 'out'
    with pytest.raises(SystemExit) as exit_info:
        infer.cli(['-i', str(folder), '-o', str(out), '--model', model, '--batch-size', '4', '--max-megapixels', '4'])
    assert exit_info.value.code == 1
    err = capsys.readouterr()
    assert 'Traceback' not in err.err and 'restored 2 of 4 image(s)' in err.out
    assert f'{folder / "b_bomb.png"}: its header declares more than 178,956,970 pixels' in err.err
    assert f'{folder / "d_bomb.png"}: 3000x3000 pixels (9 megapixels) is over the image budget of 4 megapixels' \
        in err.err
    assert outputs(out) == ['a.png', 'c.png', 'prior.csv']
    assert set(read_prior_csv(str(out / 'prior.csv'))) == {'a.png', 'c.png'}


class OneBad(StandInRestorer):

    def forward(self, lq, noise_seeds=None, return_intermediates=False):
        if bool((lq.flatten(1).amax(1) == 0).any()):
            raise RuntimeError('DefaultCPUAllocator: not enough memory')
        return super().forward(lq, noise_seeds, return_intermediates)


def test_one_bad_image_in_a_batch_fails_alone(tmp_path, monkeypatch, capsys):
    folder = folder_of(tmp_path / 'in', ['a.png', 'b.png', 'd.png'])
    cv2.imwrite(str(folder / 'c.png'), np.zeros((32, 96, 3), np.uint8))
    monkeypatch.setattr(TOLAPipeline, 'load', classmethod(lambda cls, *a, **k: TOLAPipeline(OneBad(), batch_size=4)))
    assert infer.main(['-i', str(folder), '-o', str(tmp_path / 'out'), '--batch-size', '4']) == 1
    err = capsys.readouterr().err
    assert '1 image(s) failed' in err and f'{folder / "c.png"}: DefaultCPUAllocator: not enough memory' in err
    assert outputs(tmp_path / 'out') == ['a.png', 'b.png', 'd.png', 'prior.csv']
    for name in ('a.png', 'b.png', 'd.png'):  # identity restorer: each output is its input at height 128
        expected = cv2.resize(cv2.imread(str(folder / name)), (384, 128), interpolation=cv2.INTER_CUBIC)
        assert cv2.imread(str(tmp_path / 'out' / name)).shape == expected.shape


def test_a_full_disk_leaves_no_partial_file_names_it_and_a_rerun_resumes(tmp_path, stand_in, monkeypatch, capsys):
    folder = folder_of(tmp_path / 'in', ['a.png', 'b.png', 'c.png'])
    out = tmp_path / 'out'
    out.mkdir()
    one = len(cv2.imencode('.png', cv2.resize(noise(), (384, 128), interpolation=cv2.INTER_CUBIC))[1])
    disk = SmallDisk(out, capacity=int(2.6 * one), real_open=builtins.open)  # a, b and half of c
    monkeypatch.setattr(builtins, 'open', disk.open)
    status = infer.main(['-i', str(folder), '-o', str(out)])
    monkeypatch.setattr(builtins, 'open', disk.real_open)
    assert status == 1
    printed = capsys.readouterr()
    assert 'restored 2 of 3 image(s)' in printed.out  # the summary is still printed
    assert f'{folder / "c.png"}: could not write {out / "c.png"}: No space left on device' in printed.err
    assert sorted(os.listdir(out)) == ['.tola-infer.lock', 'a.png', 'b.png', 'prior.csv'] or \
        sorted(os.listdir(out)) == ['a.png', 'b.png', 'prior.csv']  # no half-written file under any name
    for name in ('a.png', 'b.png'):
        assert cv2.imread(str(out / name)).shape == (128, 384, 3)
    assert set(read_prior_csv(str(out / 'prior.csv'))) == {'a.png', 'b.png'}  # rows only of images written
    # space freed: the same command restores what is missing and skips the rest
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 0
    printed = capsys.readouterr().out
    assert 'restored 1 of 3 image(s)' in printed and 'skipped 2 image(s) whose output already exists' in printed
    assert set(read_prior_csv(str(out / 'prior.csv'))) == {'a.png', 'b.png', 'c.png'}


def test_prior_csv_write_error_is_named_and_no_image_is_left_without_its_row(tmp_path, stand_in, monkeypatch, capsys):
    folder = folder_of(tmp_path / 'in', ['a.png'])
    out = tmp_path / 'out'

    def disk_full(path, rows):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(folder_run, 'write_prior_csv', disk_full)
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 1
    assert f'could not write {out / "prior.csv"}: No space left on device' in capsys.readouterr().err
    assert not out.exists()  # the image waits for its record (and the folder it made, empty, is removed)


def test_an_input_is_never_written_through_a_hard_link_or_symlink(tmp_path, stand_in):
    folder = folder_of(tmp_path / 'in', ['a.png'])
    before = (folder / 'a.png').read_bytes()
    for kind, link in (('hard', os.link), ('sym', os.symlink)):
        out = tmp_path / f'out_{kind}'
        out.mkdir()
        link(folder / 'a.png', out / 'a.png')
        with pytest.raises(ValueError, match=r'outputs would replace inputs \(.*a\.png: the same files, by device and '
                           r'inode\)'):
            infer.main(['-i', str(folder), '-o', str(out), '--overwrite'])
        assert (folder / 'a.png').read_bytes() == before
    assert not stand_in.calls


LOCK_OWNER = r'''
import importlib.util, sys
spec = importlib.util.spec_from_file_location('run_lock', sys.argv[1])  # the module alone: no torch to import
run_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_lock)
run_lock.acquire(sys.argv[2], print, sys.argv[3])
print('locked', flush=True)
sys.stdin.read()
'''


def test_a_second_run_on_a_locked_output_folder_is_refused_with_the_owners_pid(tmp_path, stand_in, capsys):
    folder = folder_of(tmp_path / 'in', ['a.png'])
    out = tmp_path / 'out'
    out.mkdir()
    lock = out / folder_run.LOCK_FILE
    owner = subprocess.Popen([
        sys.executable, '-c', LOCK_OWNER,
        os.path.join(REPO, 'tola_plugin', 'utils', 'run_lock.py'),
        str(out),
        str(lock)
    ], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == 'locked'
        with pytest.raises(ExperimentInUseError, match=f'in use by another run: PID {owner.pid} .*choose another -o'):
            infer.main(['-i', str(folder), '-o', str(out)])
        assert outputs(out) == []
    finally:
        owner.send_signal(signal.SIGKILL)  # killed: its lock stays behind, stale
        owner.wait()
    assert lock.exists()
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 0
    assert 'removing the stale lock' in capsys.readouterr().err
    assert not lock.exists() and outputs(out) == ['a.png', 'prior.csv']


def test_prior_csv_gains_each_runs_rows(tmp_path, stand_in):
    first = folder_of(tmp_path / 'first', ['a.png', 'b.png'])
    second = folder_of(tmp_path / 'second', ['c.png'], seed=5)
    out = tmp_path / 'out'
    assert infer.main(['-i', str(first), '-o', str(out)]) == 0
    assert infer.main(['-i', str(second), '-o', str(out)]) == 0  # another run into the same folder: no --overwrite
    assert set(read_prior_csv(str(out / 'prior.csv'))) == {'a.png', 'b.png', 'c.png'}
    c_before = (out / 'c.png').read_bytes()
    (first / 'b.png').unlink()
    cv2.imwrite(str(first / 'b.png'), noise(seed=9))
    assert infer.main(['-i', str(first), '-o', str(out), '--overwrite']) == 0  # redoes a and b, keeps c's row
    prior = read_prior_csv(str(out / 'prior.csv'))
    assert set(prior) == {'a.png', 'b.png', 'c.png'} and (out / 'c.png').read_bytes() == c_before


def test_ctrl_c_keeps_what_was_done_and_the_same_command_continues(tmp_path, stand_in, monkeypatch, capsys):
    folder = folder_of(tmp_path / 'in', [f'{c}.png' for c in 'abcde'])
    out = tmp_path / 'out'
    real = TOLAPipeline.restore_each
    calls = []

    def interrupted(self, images, **kwargs):
        calls.append(images)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, images, **kwargs)

    monkeypatch.setattr(TOLAPipeline, 'restore_each', interrupted)
    assert infer.main(['-i', str(folder), '-o', str(out), '--batch-size', '1']) == folder_run.INTERRUPTED_STATUS
    assert 'interrupted: 3 image(s) not restored; run the same command again' in capsys.readouterr().err
    assert outputs(out) == ['a.png', 'b.png', 'prior.csv']
    assert set(read_prior_csv(str(out / 'prior.csv'))) == {'a.png', 'b.png'}  # written as images completed
    monkeypatch.setattr(TOLAPipeline, 'restore_each', real)
    (out / '.c.png.k2j4l0.tmp').write_bytes(b'\x89PNG half')  # what a run killed while writing c.png leaves
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 0
    printed = capsys.readouterr()
    assert 'restored 3 of 5 image(s)' in printed.out and 'skipped 2 image(s)' in printed.out
    assert f'removed {out / ".c.png.k2j4l0.tmp"}, the temporary file of an interrupted write' in printed.err
    assert outputs(out) == ['a.png', 'b.png', 'c.png', 'd.png', 'e.png', 'prior.csv']
    assert len(read_prior_csv(str(out / 'prior.csv'))) == 5 and not (out / '.c.png.k2j4l0.tmp').exists()


def test_what_is_skipped_is_said(tmp_path, stand_in, monkeypatch, capsys):
    folder = folder_of(tmp_path / 'in', ['a.png'])
    folder_of(folder / 'locked', ['b.png'])
    from PIL import Image
    Image.fromarray(noise(seed=3)).save(folder / 'g.gif')
    (folder / 'notes.txt').write_text('not an image')
    real_scandir, real_listdir = os.scandir, os.listdir

    def scandir(path='.'):
        if os.path.basename(os.fspath(path)) in ('locked', 'closed'):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_scandir(path)

    def listdir(path='.'):
        if os.path.basename(os.fspath(path)) == 'closed':
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_listdir(path)

    monkeypatch.setattr(os, 'scandir', scandir)  # as a folder without read permission (root reads them all)
    monkeypatch.setattr(os, 'listdir', listdir)
    assert infer.main(['-i', str(folder), '-o', str(tmp_path / 'out'), '--recursive']) == 1  # a subfolder unread
    printed = capsys.readouterr()
    assert 'restored 2 of 2 image(s)' in printed.out  # a.png and g.gif
    assert 'left out 1 file(s) that are not images' in printed.err and 'notes.txt' in printed.err
    assert f'could not read 1 subfolder(s); their images were not restored: {folder / "locked"}: Permission denied' \
        in printed.err
    closed = folder_of(tmp_path / 'closed', ['a.png'])
    with pytest.raises(PermissionError, match=f'cannot list the image folder {closed}: Permission denied'):
        infer.main(['-i', str(closed), '-o', str(tmp_path / 'out2')])


# ----------------------------------------------------------------- issue 33 items 2, 3, 14: one rule for every file
def test_two_photos_whose_records_would_share_a_name_are_refused(tmp_path, stand_in):
    """photo.png and photo.jpg with --detect: photo.png and photo.jpg as images, but one photo.json: refused before
    anything is written, naming both inputs (before, one record was silently lost)."""
    folder = folder_of(tmp_path / 'in', ['photo.png', 'photo.jpg'])
    out = tmp_path / 'out'
    with pytest.raises(
            ValueError, match=r'photo\.jpg and .*photo\.png would both be written to .*photo\.json; a '
            r"photo's JSON is named after the input without its extension: rename one"):
        infer.main(['-i', str(folder), '-o', str(out), '--detect'])
    assert not out.exists() and not stand_in.calls


def test_an_existing_json_is_replaced_only_when_it_is_the_inputs_record_or_with_overwrite(tmp_path, stand_in):
    folder = folder_of(tmp_path / 'in', ['photo.png'])
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'photo.json').write_text('{"mine": "notes"}', encoding='utf-8')
    with pytest.raises(
            ValueError, match=r'photo\.json exist\(s\) and would be replaced: not the record tola-infer '
            r'wrote for the same input; move them away, or pass --overwrite'):
        infer.main(['-i', str(folder), '-o', str(out), '--detect'])
    assert (out / 'photo.json').read_text(encoding='utf-8') == '{"mine": "notes"}' and not stand_in.calls
    assert infer.main(['-i', str(folder), '-o', str(out), '--detect', '--overwrite']) == 0
    record = json.loads((out / 'photo.json').read_text(encoding='utf-8'))
    assert record['input'] == str(folder / 'photo.png') and (out / 'photo.png').is_file()
    (out / 'photo.png').unlink()  # a run killed between the record and the image: the same command continues
    assert infer.main(['-i', str(folder), '-o', str(out), '--detect']) == 0
    assert (out / 'photo.png').is_file() and json.loads((out / 'photo.json').read_text(encoding='utf-8')) == record


def test_a_run_into_its_input_folder_with_a_suffix_can_be_rerun_to_continue(tmp_path, stand_in, capsys):
    folder = folder_of(tmp_path / 'photos', ['a.png', 'b.png', 'c.jpg'])
    command = ['-i', str(folder), '-o', str(folder), '--suffix', '_sr']
    assert infer.main(command) == 0
    assert outputs(folder) == ['a.png', 'a_sr.png', 'b.png', 'b_sr.png', 'c.jpg', 'c_sr.jpg', 'prior.csv']
    capsys.readouterr()
    (folder / 'b_sr.png').unlink()  # as if the first run was interrupted there
    assert infer.main(command) == 0  # the same command again: not refused, continues
    printed = capsys.readouterr()
    assert 'restored 1 of 3 image(s)' in printed.out and 'skipped 2 image(s)' in printed.out
    assert 'left out 2 file(s) of the input folder that are outputs of its other images' in printed.out
    assert 'not images' not in printed.err  # prior.csv is the run's own record
    assert outputs(folder) == ['a.png', 'a_sr.png', 'b.png', 'b_sr.png', 'c.jpg', 'c_sr.jpg', 'prior.csv']
    assert set(read_prior_csv(str(folder / 'prior.csv'))) == {'a_sr.png', 'b_sr.png', 'c_sr.jpg'}
    with pytest.raises(ValueError, match='outputs would replace inputs'):  # without a suffix it still is refused
        infer.main(['-i', str(folder), '-o', str(folder)])


FORMULAS = ['=1+2', '+SUM(A1)', '-3', '@cmd', "'quoted"]


def test_prior_csv_cells_never_start_a_formula(tmp_path, stand_in):
    folder = folder_of(tmp_path / 'in', [f'{name}.png' for name in FORMULAS])
    out = tmp_path / 'out'
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 0
    with open(out / 'prior.csv', encoding='utf-8', newline='') as f:
        cells = [row[0] for row in csv.reader(f)][1:]
    assert sorted(cells) == sorted(f"'{name}.png" for name in FORMULAS)  # what a spreadsheet shows as text
    assert set(read_prior_csv(str(out / 'prior.csv'))) == {f'{name}.png' for name in FORMULAS}  # read back as named


def test_evaluation_csv_cells_never_start_a_formula(tmp_path):
    from tola_plugin.commands.evaluation.records import read_per_image_csv, write_per_image_csv
    path = str(tmp_path / 'per_image.csv')
    rows = [dict(filename=f'{i}.png', gt=text, t_pred=text, psnr=-1.5) for i, text in enumerate(FORMULAS)]
    write_per_image_csv(path, rows)
    with open(path, encoding='utf-8', newline='') as f:
        table = list(csv.DictReader(f))
    assert [r['gt'] for r in table] == [f"'{text}" for text in FORMULAS] and table[0]['psnr'] == '-1.5'  # numbers kept
    back = read_per_image_csv(path)
    assert [back[f'{i}.png']['t_pred'] for i in range(len(FORMULAS))] == FORMULAS and back['0.png']['psnr'] == -1.5


# ------------------------------------------------------------------- issue 43 item 1: outputs that never move
@pytest.mark.parametrize('backend', ['torch', pytest.param('openvino', marks=pytest.mark.openvino)])
def test_outputs_do_not_depend_on_the_batch_size(tmp_path, backend):
    """The same folder with --batch-size 1 and 4 (and the default, from the free memory) gives the same bytes: every
    image and prior.csv (before, up to 1 grey level and other confidences on torch). A wide line (3 windows) shares
    batches with its neighbours."""
    model = write_tiny_merged(tmp_path / 'tiny.safetensors')
    folder = folder_of(tmp_path / 'in', ['a.png', 'b.png', 'c.png', 'd.png'])
    cv2.imwrite(str(folder / 'wide.png'), noise(32, 300, seed=7))
    written = {}
    for batch in ('1', '4', None):
        out = tmp_path / f'out_{batch}'
        args = ['-i', str(folder), '-o', str(out), '--model', model, '--backend', backend]
        assert infer.main(args + (['--batch-size', batch] if batch else [])) == 0
        written[batch] = {name: (out / name).read_bytes() for name in outputs(out)}
    assert sorted(written['1']) == ['a.png', 'b.png', 'c.png', 'd.png', 'prior.csv', 'wide.png']
    assert written['1'] == written['4'] == written[None]
