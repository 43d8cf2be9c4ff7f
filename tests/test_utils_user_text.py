"""Issue 43, "Reliability, fourth pass": what user text does on its way to a terminal, a record or a path (items 2,
3, 5, 8 and 9), and two notes (exported files follow the umask; the verdict cache is read bounded).

- 2: names with terminal escapes are printed and recorded escaped (one rule: ``utils/user_text.py``);
- 3: a path that is not a file (a folder, a FIFO, a device, a symlink loop) says what it is, before any wait;
- 5, 9: every path built from user text stays in its folder and fits the file system (``utils/user_paths.py``);
- 8: a rerun's stale-temporary sweep lists each output folder once.

tola-infer runs with the identity stand-in restorer (tests/inference_testing.py), as in test_inference_folder_run.
"""
import contextlib
import json
import os
import signal
import stat
import tracemalloc

import cv2
import numpy as np
import pytest
from reliability_testing import expect_error

from tola_cli import infer
from tola_plugin.inference import folder_run
from tola_plugin.inference.prior_csv import read_prior_csv
from tola_plugin.utils import atomic_files, user_paths
from tola_plugin.utils.cli_errors import error_line
from tola_plugin.utils.user_text import recorded, shown, unrecorded
from tola_testing import REPO, load_yaml, one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')
ESCAPES = ('\x1b', '\x07', '\x9b', '\u202e')  # ESC, BEL, CSI (C1), RIGHT-TO-LEFT OVERRIDE


def noise(height=32, width=96, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def write_png(path, seed=0):
    ok, data = cv2.imencode('.png', noise(seed=seed))
    assert ok
    with open(path, 'wb') as f:  # cv2.imwrite cannot take every name the file system can
        f.write(data.tobytes())


@pytest.fixture
def never_waits():
    """Fail the test, instead of hanging it, when something waits on a FIFO for more than 20 s."""

    def waited(signum, frame):
        raise TimeoutError('waited on the FIFO')

    previous = signal.signal(signal.SIGALRM, waited)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def no_raw_escapes(text):
    return not any(c in text for c in ESCAPES)


# ------------------------------------------------------------------------------------ item 2: escapes
def test_names_with_terminal_escapes_are_printed_and_recorded_escaped(tmp_path, stand_in, capsys):
    """Every line that names a file (failed, skipped, left out, the error line) shows its control characters
    escaped; prior.csv holds none raw, and reads back the real names."""
    folder = tmp_path / 'in'
    folder.mkdir()
    title = '\x1b]0;owned\x07a.png'  # would set the terminal's title
    red = '\x1b[31mred\u202e.png'
    write_png(folder / title)
    write_png(folder / red, seed=1)
    (folder / '\x9b2Jbroken.png').write_bytes(b'not an image')  # C1 CSI: clears the screen on some terminals
    (folder / '\x1b[2Jnotes.txt').write_text('notes')
    out = tmp_path / 'out'
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 1
    first = capsys.readouterr()
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 1  # skipped: the two restored ones
    second = capsys.readouterr()
    for printed in (first.out, first.err, second.out, second.err):
        assert no_raw_escapes(printed), repr(printed)
    assert '\\x1b]0;owned\\x07a.png' in second.out and '\\x1b[31mred\\u202e.png' in second.out  # skipped ...
    assert 'failed' in first.err and '\\x9b2Jbroken.png: not a decodable image' in first.err
    assert '\\x1b[2Jnotes.txt' in first.err  # left out ... not images
    raw = (out / 'prior.csv').read_text(encoding='utf-8')
    assert no_raw_escapes(raw) and '\\x1b]0;owned\\x07a.png' in raw
    assert set(read_prior_csv(str(out / 'prior.csv'))) == {title, red}  # read back as the files are named
    assert sorted(os.listdir(out)) == sorted([title, red, 'prior.csv'])


def test_the_error_line_and_records_escape_control_characters(tmp_path):
    """The one error line of every command, JSON records and CSV cells: the same rule."""
    line = error_line(FileNotFoundError('input not found: \x1b[2J\x07x.png'))
    assert line == 'error: input not found: \\x1b[2J\\x07x.png'
    record = {'input': 'a\x9b\x1b\u202e\udcff.png'}  # \udcff: a byte of a name that is not UTF-8
    path = tmp_path / 'r.json'
    atomic_files.write_json(str(path), record)
    assert no_raw_escapes(path.read_text(encoding='utf-8', errors='surrogateescape'))
    assert json.loads(path.read_text(encoding='utf-8')) == record
    cells = ['=x\x1b', 'back\\slash\\x1b', '\t', "'quoted", 'plain']
    atomic_files.write_csv(str(tmp_path / 'c.csv'), ['a'], [{'a': c} for c in cells])
    assert no_raw_escapes((tmp_path / 'c.csv').read_text(encoding='utf-8'))
    assert [row['a'] for row in atomic_files.read_csv(str(tmp_path / 'c.csv'))[1]] == cells
    for text in cells + ['\\\\x41', '\\u202e\u202e']:
        assert unrecorded(recorded(text)) == text
    assert shown('\udcff') == '\\udcff'  # printable to any stream


# ------------------------------------------------------------------------- item 3: what a path is
def test_a_model_that_is_not_a_file_says_what_it_is(tmp_path, never_waits, capsys):
    folder = tmp_path / 'in'
    folder.mkdir()
    write_png(folder / 'a.png')
    fifo = tmp_path / 'model.fifo'
    os.mkfifo(fifo)
    os.symlink('/dev/zero', tmp_path / 'zero.safetensors')
    (tmp_path / 'folder.safetensors').mkdir()
    for model, kind in ((tmp_path / 'folder.safetensors', 'a folder'), (fifo, 'a FIFO (named pipe)'),
                        ('/dev/zero', 'a character device'), (tmp_path / 'zero.safetensors', 'a character device')):
        with pytest.raises(SystemExit) as exit_info:
            infer.cli(['-i', str(folder), '-o', str(tmp_path / 'out'), '--model', str(model), '--backend', 'torch'])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and err.startswith('error: ') and kind in err, err
        assert str(model) in err and 'not found' not in err, err
    assert not (tmp_path / 'out').exists()


def test_inputs_that_are_not_files_fail_by_name_and_a_folder_named_like_an_image_is_said(
        tmp_path, stand_in, never_waits, capsys):
    folder = tmp_path / 'in'
    folder.mkdir()
    write_png(folder / 'a.png')
    os.mkfifo(folder / 'fifo.png')
    os.symlink('loop.png', folder / 'loop.png')  # a symlink to itself
    os.symlink('absent.png', folder / 'broken.png')
    (folder / 'x.png').mkdir()
    write_png(folder / 'x.png' / 'inner.png')
    out = tmp_path / 'out'
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 1
    printed = capsys.readouterr()
    assert 'restored 1 of 4 image(s)' in printed.out
    assert f'image file {folder / "fifo.png"} is a FIFO (named pipe), not a regular file' in printed.err
    assert f'image file {folder / "loop.png"} is a symlink loop' in printed.err
    assert f'image file not found: {folder / "broken.png"} (a broken symlink)' in printed.err
    assert 'left out 1 subfolder(s) named like images' in printed.err and 'x.png/' in printed.err
    # the FIFO itself as -i: what it is, not "not found"
    with pytest.raises(ValueError, match=r'input .*fifo\.png is a FIFO \(named pipe\); expected an image file or a '
                       r'folder'):
        infer.main(['-i', str(folder / 'fifo.png'), '-o', str(out)])


def test_an_output_folder_that_is_a_file_says_so(tmp_path, stand_in):
    folder = tmp_path / 'in'
    folder.mkdir()
    write_png(folder / 'a.png')
    (tmp_path / 'taken').write_text('a file')
    with pytest.raises(ValueError, match=r'output folder .*taken is a file; expected a folder'):
        infer.main(['-i', str(folder), '-o', str(tmp_path / 'taken')])
    with pytest.raises(ValueError, match=r'output folder .*taken/sub: cannot be made, .*taken is a file'):
        infer.main(['-i', str(folder), '-o', str(tmp_path / 'taken' / 'sub')])


def test_a_fifo_as_option_file_or_text_file_is_refused_without_waiting(tmp_path, monkeypatch, capsys, never_waits):
    from tola_plugin.data.text_labels import read_labels_tsv
    fifo = tmp_path / 'options.fifo'
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r'labels file .*options\.fifo is a FIFO \(named pipe\), not a regular file'):
        read_labels_tsv(str(fifo))
    with pytest.raises(ValueError, match='is a FIFO'):
        atomic_files.read_json(str(fifo))
    write_png(tmp_path / 'a.png')
    with pytest.raises(SystemExit) as exit_info:
        infer.cli(['-i', str(tmp_path / 'a.png'), '-o', str(tmp_path / 'out'), '-opt', str(fifo)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and 'option file' in err and 'is a FIFO (named pipe)' in err, err
    from tola_plugin.options.reader import read_option_file
    with pytest.raises(ValueError, match=r'option file .*options\.fifo is a FIFO'):
        read_option_file(str(fifo))


# ------------------------------------------------------------------- items 5 and 9: paths from user text
def test_a_suffix_cannot_leave_the_output_folder(tmp_path, stand_in):
    folder = tmp_path / 'deep' / 'in'
    folder.mkdir(parents=True)
    write_png(folder / 'a.png')
    write_png(folder / 'b.png', seed=1)
    out = tmp_path / 'deep' / 'out'
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ValueError, match=r"--suffix '/\.\./\.\./escaped': holds '/'"):
        infer.main(['-i', str(folder), '-o', str(out), '--suffix', '/../../escaped'])
    assert sorted(os.listdir(tmp_path)) == before and not out.exists() and not stand_in.calls


def test_paths_from_user_text_stay_in_their_folder_and_are_compared_normalised(tmp_path):
    with pytest.raises(ValueError, match='outside'):
        user_paths.path_inside(str(tmp_path), 'a/../../b.png', 'the output')
    with pytest.raises(ValueError, match='absolute'):
        user_paths.path_inside(str(tmp_path), '/etc/b.png', 'the output')
    assert user_paths.path_inside(str(tmp_path) + '/./', 'a/./b.png', 'x') == str(tmp_path / 'a' / 'b.png')
    # two inputs whose outputs differ as strings only: one file, refused naming both
    folder = tmp_path / 'in'
    folder.mkdir()
    for name in ('a.png', 'a.jpg'):
        write_png(folder / name)
    inputs = [str(folder / 'a.png'), str(folder / 'a.jpg')]
    with pytest.raises(ValueError, match='would both be written to'):
        folder_run.plan_outputs(inputs, str(folder), str(tmp_path / 'out') + '/./', '', 'png', 'line')


def test_output_names_fit_the_file_system(tmp_path, stand_in, capsys):
    """A 255-byte input name is restored (its temporary file's name is cut to fit); a suffix that would make an
    output name longer than 255 bytes is refused before anything is written, naming the input."""
    folder = tmp_path / 'in'
    folder.mkdir()
    longest = 'a' * 251 + '.png'  # 255 bytes: the longest name a file can have
    write_png(folder / longest)
    out = tmp_path / 'out'
    assert infer.main(['-i', str(folder), '-o', str(out)]) == 0, capsys.readouterr().err
    assert sorted(os.listdir(out)) == [longest, 'prior.csv']
    wide = '文' * 83 + '.png'  # 253 bytes (3 a character), 256 with the suffix "_xx"
    (folder / longest).unlink()
    write_png(folder / wide)
    with pytest.raises(ValueError, match=r'the output of .*\.png: the name .* has 256 bytes; a file name has at most '
                       r'255'):
        infer.main(['-i', str(folder), '-o', str(tmp_path / 'out2'), '--suffix', '_xx'])
    assert not (tmp_path / 'out2').exists()


@pytest.mark.parametrize('name, needle', [('../../escaped', "holds '/'"), ('..', 'names no file or folder'),
                                          ('x' * 230, 'more than the 223 a name may have here'),
                                          ('a\x1b[2Jb', 'holds control characters')])
def test_an_experiment_name_is_one_folder_name_that_fits(tmp_path, monkeypatch, capsys, name, needle):
    opt = load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))
    opt['name'] = name
    line = expect_error(tmp_path, monkeypatch, capsys, opt, 'name', needle, module='test')
    assert no_raw_escapes(line)
    assert not (tmp_path / 'results').exists() and not (tmp_path.parent / 'escaped').exists()


# --------------------------------------------------------------------------------- item 8: one listing
def test_the_stale_temporary_sweep_lists_each_folder_once(tmp_path, monkeypatch):
    out = tmp_path / 'out'
    (out / 'sub').mkdir(parents=True)
    jobs = [
        folder_run.Job(f'in/{i}.png', str(out / f'{i}.png'), f'{i}.png', str(out / f'{i}.json')) for i in range(5000)
    ]
    long_name = 'b' * 251 + '.png'
    jobs += [
        folder_run.Job('in/sub/x.png', str(out / 'sub' / 'x.png'), 'sub/x.png', str(out / 'sub' / 'x.json')),
        folder_run.Job(f'in/{long_name}', str(out / long_name), long_name, str(out / 'b.json'))
    ]
    stale = [
        out / '.17.png.k2j3h4g5.tmp', out / '.prior.csv.abcdefgh.tmp', out / 'sub' / '.x.png.zzzzzzzz.tmp',
        out / (user_paths.temporary_name(str(out / long_name)) + 'q1w2e3r4.tmp')
    ]
    foreign = [out / '.other.png.abcdefgh.tmp', out / '.17.png.tmp', out / '17.png.abcdefgh.tmp']
    for path in stale + foreign:
        path.write_text('x')
    listed = []
    real = os.listdir
    monkeypatch.setattr(os, 'listdir', lambda path='.': listed.append(path) or real(path))
    monkeypatch.setattr('glob.glob', lambda *a, **k: pytest.fail('one glob per output'))
    removed = folder_run.remove_stale_temporaries(jobs, str(out))
    assert sorted(removed) == sorted(str(p) for p in stale)
    assert len(listed) == 2  # out and out/sub, whatever the number of outputs
    assert all(p.exists() for p in foreign)


# ------------------------------------------------------------------------------------------- the notes
@pytest.mark.parametrize('mask', [0o022, 0o077])
def test_written_files_follow_the_umask(tmp_path, mask):
    """Exported models (safetensors, which makes its own file) and every other atomic write get 0666 less the
    umask, as any new file."""
    import torch

    from tola_plugin.checkpoints.tola import write_merged
    from tola_plugin.utils.checkpoint_io import atomic_torch_save
    old = os.umask(mask)
    try:
        write_merged(str(tmp_path / 'm.safetensors'), {'w': torch.zeros(2)}, {})
        atomic_torch_save({'w': torch.zeros(2)}, str(tmp_path / 'n.pth'))
        atomic_files.write_text(str(tmp_path / 't.txt'), 'x')
    finally:
        os.umask(old)
    for name in ('m.safetensors', 'n.pth', 't.txt'):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o666 & ~mask, name


def test_a_huge_verdict_cache_is_not_read(tmp_path, monkeypatch):
    """A 200 MB qualification.json (17 s and 1.4 GB at every start before) is refused from its size: no verdict,
    a few kilobytes of memory; the next verdict replaces it."""
    from tola_plugin.runtime import qualification
    path = tmp_path / 'qualification.json'
    with open(path, 'wb') as f:
        f.truncate(200 << 20)  # sparse: no disk used
    monkeypatch.setattr(qualification.CACHE, 'path', lambda: str(path))
    monkeypatch.setattr(qualification.CACHE, 'memory', {})
    tracemalloc.start()
    try:
        assert qualification.cached_verdict('any key') is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    assert qualification.store_verdict('k', qualification.Verdict(True, 'ok'))
    assert os.path.getsize(path) < 4096 and qualification.cached_verdict('k').qualified


def test_names_module_helpers_keep_temporary_names_within_name_max():
    for length in (1, 100, 240, 241, 242, 255):
        base = 'n' * length
        prefix = user_paths.temporary_name(f'/x/{base}')
        assert len(prefix) + user_paths.RANDOM_CHARS + len('.tmp') <= user_paths.NAME_MAX
        name = prefix + 'abcdefgh.tmp'
        assert user_paths.temporary_stem(name) == user_paths.temporary_stem_of(f'/x/{base}')
    with contextlib.suppress(ValueError):
        user_paths.check_name('x' * 300, 'name')
        pytest.fail('a 300-byte name passed')


@pytest.mark.parametrize('method, needle', [('..', 'outside'), ('m' * 300, 'a file name has at most 255')])
def test_evaluation_method_names_stay_in_the_output_folder(tmp_path, method, needle):
    """A method's name becomes file names (per_image/<name>.csv, upscaled/<name>/): '..' or a name too long for the
    file system is refused before any metric runs."""
    from tola_plugin.commands.evaluation.runner import evaluate_methods
    folder = tmp_path / 'restored'
    folder.mkdir()
    write_png(folder / 'a.png')
    with pytest.raises(ValueError, match=needle):
        evaluate_methods({method: str(folder)}, str(tmp_path / 'eval'), reference_dir=str(folder), metrics=['psnr'],
                         progress=False)
    assert not (tmp_path / 'eval').exists()


def test_a_dataset_name_is_one_folder_name(tmp_path, monkeypatch, capsys):
    """BasicSR saves a test set's images under visualization/<dataset name>/."""
    opt = load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))
    opt['datasets']['test_1']['name'] = '../../../elsewhere'
    expect_error(tmp_path, monkeypatch, capsys, opt, "datasets.test_1.name '../../../elsewhere': holds '/'",
                 module='test')
