"""Problems 2 and 6 (issue "Nothing lost, nothing run, nothing silent"): checkpoints are written atomically,
``--auto_resume`` falls back from a half-written newest state to the newest complete one (naming the skipped
file), and a corrupt state is an error naming its file."""
import os
import shutil

import pytest
import torch

import basicsr.train
from basicsr.models.base_model import BaseModel

import tola_plugin  # noqa: F401


def experiment(tmp_path, auto_resume=True):
    """A BasicSR option dict of a training run whose experiment folder is ``tmp_path/exp``."""
    root = tmp_path / 'exp'
    paths = {k: str(root / k) for k in ('models', 'training_states')}
    for folder in paths.values():
        os.makedirs(folder, exist_ok=True)
    return {
        'name': 'exp', 'num_gpu': 0, 'auto_resume': auto_resume, 'network_g': {'type': 'RRDBNet'},
        'path': dict(paths, experiments_root=str(root), resume_state=None)
    }


def write_state(opt, it, net=True):
    state = {'epoch': 0, 'iter': it, 'optimizers': [], 'schedulers': []}
    torch.save(state, os.path.join(opt['path']['training_states'], f'{it}.state'))
    if net:
        torch.save({'params': {'w': torch.ones(1)}}, os.path.join(opt['path']['models'], f'net_g_{it}.pth'))


def truncate(path):
    with open(path, 'rb') as f:
        data = f.read()
    with open(path, 'wb') as f:
        f.write(data[:len(data) // 2])


def test_auto_resume_skips_a_half_written_newest_state(tmp_path, capsys):
    opt = experiment(tmp_path)
    write_state(opt, 10)
    write_state(opt, 20)
    half = os.path.join(opt['path']['training_states'], '20.state')
    truncate(half)  # what a kill while writing left behind before saves were atomic
    state = basicsr.train.load_resume_state(opt)
    assert state['iter'] == 10
    assert opt['path']['resume_state'].endswith('10.state')
    assert opt['path']['pretrain_network_g'].endswith('net_g_10.pth')
    assert half in capsys.readouterr().err  # the warning names the skipped file


def test_auto_resume_skips_a_state_without_its_network_file(tmp_path, capsys):
    opt = experiment(tmp_path)
    write_state(opt, 10)
    write_state(opt, 20, net=False)
    assert basicsr.train.load_resume_state(opt)['iter'] == 10
    assert 'net_g_20.pth' in capsys.readouterr().err


def test_auto_resume_with_no_usable_state_is_an_error_not_a_restart(tmp_path):
    opt = experiment(tmp_path)
    write_state(opt, 10)
    truncate(os.path.join(opt['path']['training_states'], '10.state'))
    with pytest.raises(ValueError, match='10.state'):
        basicsr.train.load_resume_state(opt)


def test_a_corrupt_state_names_its_file(tmp_path):
    opt = experiment(tmp_path, auto_resume=False)
    path = os.path.join(opt['path']['training_states'], '5.state')
    with open(path, 'wb') as f:
        f.write(b'not a torch file, not a pickle')
    opt['path']['resume_state'] = path
    with pytest.raises(ValueError, match='5.state'):
        basicsr.train.load_resume_state(opt)


def test_training_states_and_checkpoints_are_written_atomically(tmp_path, monkeypatch):
    """Every byte goes to a temporary file in the same folder; the final name appears only by rename, and a
    write that dies half-way leaves the previous file intact and no debris."""
    opt = experiment(tmp_path)
    model = BaseModel.__new__(BaseModel)
    model.opt = dict(opt, rank=0, dist=False, datasets={'train': {'batch_size_per_gpu': 2}})
    model.optimizers, model.schedulers = [], []
    written = []
    real_save = torch.save

    def recording_save(obj, f, *args, **kwargs):
        written.append(f.name)  # a Python file (atomic_torch_save): its errno survives a failed write
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, 'save', recording_save)
    model.save_training_state(epoch=0, current_iter=3)
    model.save_network(torch.nn.Linear(1, 1), 'net_g', 3)
    final = [
        os.path.join(opt['path']['training_states'], '3.state'),
        os.path.join(opt['path']['models'], 'net_g_3.pth')
    ]
    assert all(os.path.isfile(p) for p in final)
    assert len(written) == 2 and not set(written) & set(final)
    assert [os.path.dirname(p) for p in written] == [os.path.dirname(p) for p in final]

    before = open(final[0], 'rb').read()

    def dying_save(obj, f, *args, **kwargs):
        f.write(b'half')
        raise OSError('disk full')

    monkeypatch.setattr(torch, 'save', dying_save)
    monkeypatch.setattr('time.sleep', lambda s: None)  # upstream retries with a 1 s pause
    with pytest.raises(OSError, match='3.state'):  # not upstream's silent "Just ignore it"
        model.save_training_state(epoch=0, current_iter=3)
    assert open(final[0], 'rb').read() == before
    assert sorted(os.listdir(opt['path']['training_states'])) == ['3.state']


def test_a_full_disk_while_saving_a_state_is_one_line_naming_the_file(tmp_path, monkeypatch):
    """Issue 48 item 5: a disk that fills up while ``N.state`` is written ended in two tracebacks (torch's ``unexpected
    pos 1061120 vs 1061008``) naming neither the file nor the cause. Now: one OSError line naming the file and "No
    space left on device"; the previous state intact, no temporary file left."""
    import builtins

    from reliability_testing import SmallDisk

    from tola_plugin.utils.cli_errors import error_line
    opt = experiment(tmp_path)
    model = BaseModel.__new__(BaseModel)
    model.opt = dict(opt, rank=0, dist=False, datasets={'train': {'batch_size_per_gpu': 2}})
    model.optimizers, model.schedulers = [], []
    model.save_training_state(epoch=0, current_iter=3)
    states = opt['path']['training_states']
    before = open(os.path.join(states, '3.state'), 'rb').read()
    disk = SmallDisk(tmp_path / 'exp', capacity=2 * len(before) + 4096, real_open=builtins.open)
    monkeypatch.setattr(builtins, 'open', disk.open)
    monkeypatch.setattr('time.sleep', lambda s: None)  # upstream retries with a 1 s pause
    model.optimizers = [torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))])]  # a state of 64 KB: no room for it
    model.optimizers[0].state_dict = lambda: {'big': torch.ones(16_384)}
    with pytest.raises(OSError) as caught:
        model.save_training_state(epoch=0, current_iter=3)
    line = error_line(caught.value)
    assert line == f'error: could not save the training state {os.path.join(states, "3.state")}: No space left on ' \
        'device', line
    monkeypatch.undo()
    assert open(os.path.join(states, '3.state'), 'rb').read() == before and os.listdir(states) == ['3.state']


@pytest.mark.parametrize('library', ['torch', 'safetensors'])
def test_a_write_error_a_library_hides_is_named_with_its_cause(tmp_path, library):
    """torch's zip writer turns the OSError of the file it writes into ``unexpected pos ...`` (the OSError its
    context), safetensors into ``... (os error 28)``: ``atomic_write`` raises one OSError naming the file and the
    cause, and leaves nothing behind."""
    import errno

    from tola_plugin.utils.atomic_files import atomic_write

    def torch_writer(tmp):
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            raise RuntimeError('[enforce fail at inline_container.cc:672] . unexpected pos 1061120 vs 1061008')

    def safetensors_writer(tmp):
        raise RuntimeError('Error while serializing: I/O error: No space left on device (os error 28)')

    target = tmp_path / 'model.bin'
    with pytest.raises(OSError) as caught:
        atomic_write(str(target), torch_writer if library == 'torch' else safetensors_writer)
    assert caught.value.errno == errno.ENOSPC and str(caught.value) == \
        f"[Errno 28] No space left on device: '{target}'"
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------ issue 43 item 7: a resume never starts over
def test_auto_resume_names_an_archive_instead_of_starting_over(tmp_path):
    """BasicSR moved the experiment to <name>_archived_<time> (a fresh start that then failed): --auto_resume finds
    no state in <name>, and says where its states are instead of starting from iteration 0."""
    archived = experiment(tmp_path)
    write_state(archived, 400)
    os.rename(tmp_path / 'exp', tmp_path / 'exp_archived_20261127_101010')
    opt = experiment(tmp_path)  # the new, empty experiment folder the failed start made
    for _ in range(2):
        with pytest.raises(
                ValueError, match=r'--auto_resume: .*exp holds no training state, but .*'
                r'exp_archived_20261127_101010 does \(.*400\.state\).*mv .*exp_archived_20261127_101010'):
            basicsr.train.load_resume_state(opt)
        shutil.rmtree(tmp_path / 'exp', ignore_errors=True)  # the same with no experiment folder at all
    assert opt['path']['resume_state'] is None
    fresh = experiment(tmp_path / 'other')  # no archive: a first run starts afresh
    assert basicsr.train.load_resume_state(fresh) is None


def test_a_start_with_a_mistyped_dataroot_moves_nothing(rendered_sets, tmp_path, monkeypatch, capsys):
    """The dataroot is checked before BasicSR's mkdir_and_rename: the experiment with its states stays where it is
    (before, it was moved to exp_archived_<time> and the next --auto_resume started from iteration 0)."""
    from reliability_testing import expect_error

    from tola_testing import tiny_demo_options
    opt = tiny_demo_options(rendered_sets, 'exp', total_iter=2, freq=2)
    good = opt['datasets']['train']['dataroot_gt']
    opt['datasets']['train']['dataroot_gt'] = good + 'x'  # 'hrx'
    existing = experiment(tmp_path / 'experiments')  # experiments/exp with a state
    write_state(existing, 2)
    before = sorted(os.listdir(tmp_path / 'experiments'))
    expect_error(
        tmp_path, monkeypatch, capsys, opt, f'datasets.train.dataroot_gt: {good}x not found; expected a '
        f"folder; {os.path.dirname(good)} has 'hr': a typo?")
    assert sorted(os.listdir(tmp_path / 'experiments')) == before == ['exp']
    assert os.path.isfile(tmp_path / 'experiments' / 'exp' / 'training_states' / '2.state')
    opt['datasets']['train']['dataroot_gt'] = good
    opt['path'] = {'pretrain_network_g': str(tmp_path / 'absent.pth')}
    expect_error(tmp_path, monkeypatch, capsys, opt, f'path.pretrain_network_g: {tmp_path / "absent.pth"} not found')
    assert sorted(os.listdir(tmp_path / 'experiments')) == ['exp']
