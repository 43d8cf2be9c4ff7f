"""One owner each for speaking to the user (``utils/user_text.say``), for reading Linux's /proc and testing a PID
(``utils/procfs``) and for the sample packages' files (``data/sample_images``); ``make lint`` keeps the first two so
(tests/test_foundation_owners.py)."""
import io
import os
import subprocess
import sys
import time

import pytest

from tola_plugin.data.sample_images import sample_folder, sample_labels, sample_paths
from tola_plugin.utils import procfs
from tola_plugin.utils.user_text import say


def test_say_is_one_escaped_line_on_stderr_or_the_stream_asked(capsys):
    say('wrote \x1b[2Ja.png\nnext')
    say('done', sys.stdout)
    out, err = capsys.readouterr()
    assert err == 'wrote \\x1b[2Ja.png\\x0anext\n' and out == 'done\n'


def test_say_writes_above_a_progress_bar():
    """Once tqdm is imported a line goes through its ``write``: a bar on the same stream is cleared, the line
    written, the bar drawn again below it."""
    from tqdm import tqdm
    stream = io.StringIO()
    with tqdm(total=3, file=stream, desc='bar') as bar:
        bar.update(1)
        before = stream.getvalue()
        say('a note', stream)
        after = stream.getvalue()[len(before):]
    assert 'a note\n' in after and after.index('a note') < after.rindex('bar')


def test_procfs_reads_this_process():
    fields = procfs.stat_fields()
    assert fields[0] in 'RS' and int(fields[1]) == os.getppid() and procfs.stat_fields(os.getpid())[1] == fields[1]
    assert os.getpid() in procfs.pids() and procfs.pid_alive(os.getpid())
    assert procfs.status_bytes('VmHWM') >= procfs.status_bytes('VmRSS') > 0
    with pytest.raises(OSError, match='has no VmNoSuch'):
        procfs.status_bytes('VmNoSuch')
    assert procfs.meminfo_bytes('MemAvailable') > 0 and procfs.meminfo_bytes('NoSuchField') is None
    assert 'processor' in procfs.cpuinfo()


def test_procfs_tells_a_zombie_and_a_gone_process():
    child = subprocess.Popen([sys.executable, '-c', 'pass'])
    deadline = time.monotonic() + 60
    while procfs.stat_fields(child.pid)[0] != 'Z':  # ended, not yet reaped: a zombie
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert procfs.pid_alive(child.pid) and int(procfs.stat_fields(child.pid)[1]) == os.getpid()
    child.wait()
    assert not procfs.pid_alive(child.pid) and procfs.stat_fields(child.pid) is None


def test_the_nvidia_driver_version_file(tmp_path):
    version = tmp_path / 'version'
    version.write_text('NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 2023\n')
    assert procfs.nvidia_driver_version(str(version)) == '535.104.05'
    assert procfs.nvidia_driver_version(str(tmp_path / 'missing')) is None


def test_the_sample_packages_have_one_reader():
    """``tola_plugin.assets.samples`` and ``tola_plugin.assets.rendered_samples`` hold files only; their functions are
    ``data.sample_images``' bound to them."""
    from tola_plugin.assets import rendered_samples, samples
    for package, module in (('tola_plugin.assets.samples', samples), ('tola_plugin.assets.rendered_samples',
                                                                      rendered_samples)):
        assert module.samples_dir() == sample_folder(package) == os.path.dirname(module.__file__)
        assert module.sample_paths() == sample_paths(package) and len(sample_paths(package)) >= 4
        assert all(p.endswith('.png') and os.path.dirname(p) == sample_folder(package) for p in sample_paths(package))
    assert sorted(samples.sample_labels()) == sorted(
        os.path.basename(p) for p in sample_paths('tola_plugin.assets.samples'))
    assert sample_labels('tola_plugin.assets.rendered_samples')['line_1x4.png'] == 'Text2025'
