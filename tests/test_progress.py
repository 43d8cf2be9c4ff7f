"""No silent waits (tola_plugin/utils/progress.py, runtime/child_process.py): a long step shows its progress and the
time left, as a bar on a terminal and as lines in a log; a child's progress reaches the parent while it runs."""
import io
import sys

import pytest

from tola_plugin.runtime.child_process import ChildFailure, run_child
from tola_plugin.utils.progress import Progress


class Clock:
    """time.perf_counter under the test's control."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_lines_in_a_log_with_the_time_left(monkeypatch):
    clock = Clock()
    monkeypatch.setattr('tola_plugin.utils.progress.time.perf_counter', clock)
    log = io.StringIO()  # not a terminal: lines, the first, then at most one every line_seconds, and the last
    with Progress('tola-infer', total=8, unit='images', stream=log, line_seconds=10) as bar:
        for step in range(8):
            clock.now += 4.0  # 4 s per image
            bar.update(1, note=f'{step}.png')
    lines = log.getvalue().splitlines()
    assert lines[0] == 'tola-infer: 1/8 images (0.png), 4 s, about 28 s left'
    assert lines[1] == 'tola-infer: 4/8 images (3.png), 16 s, about 16 s left'  # 12 s after the first line
    assert lines[-1] == 'tola-infer: 8/8 images (7.png), 32 s' and len(lines) == 4
    weighted = io.StringIO()  # steps of unequal cost, shown as a percentage
    with Progress('OpenVINO conversion', total=100, unit='%', stream=weighted, line_seconds=0) as bar:
        clock.now += 10.0
        bar.update(25, note='vae_encoder done')
        clock.now += 30.0
        bar.update(75, note='idm done')
    assert weighted.getvalue().splitlines() == [
        'OpenVINO conversion: 25 % (vae_encoder done), 10 s, about 30 s left',
        'OpenVINO conversion: 100 % (idm done), 40 s'
    ]


def test_a_terminal_gets_a_bar():

    class Terminal(io.StringIO):

        def isatty(self):
            return True

    screen = Terminal()
    with Progress('tola-infer', total=2, unit='images', stream=screen) as bar:
        bar.update(1)
        bar.write('failed: x.png: not an image')
        bar.update(1)
    text = screen.getvalue()
    assert '2/2 images' in text and '100%' in text and 'failed: x.png: not an image' in text


def test_a_childs_lines_reach_the_parent_while_it_runs(tmp_path):
    """run_child(on_line=...): each stdout line of the child as it comes (the conversion's progress), not at the end;
    failures and timeouts are reported as without it. The child prints each next line only once the parent has seen
    the one before (a file the parent writes then): lines held back until the child's end would leave it waiting
    until the timeout, a failure, however slow or fast the machine (no timing raced)."""
    seen = []
    code = ('import os, sys, time\nfor i in range(3):\n    print("step", i, flush=True)\n'
            '    while not os.path.exists(os.path.join(sys.argv[1], str(i))):\n        time.sleep(0.01)\n')

    def on_line(line):
        seen.append(line)
        (tmp_path / line.split()[-1]).touch()

    result = run_child([sys.executable, '-c', code, str(tmp_path)], 'the test child', 60, on_line=on_line)
    assert seen == ['step 0', 'step 1', 'step 2'] and result.stdout.count('step') == 3
    with pytest.raises(ChildFailure, match='exit status 3: boom'):
        run_child([
            sys.executable, '-c', 'import sys\nprint("x", flush=True)\nsys.exit("boom") if 0 else None\n'
            'sys.stderr.write("boom")\nsys.exit(3)'
        ], 'the test child', 60, on_line=lambda line: None)
    with pytest.raises(ChildFailure, match='hung: still running after 1 s, killed'):
        run_child([sys.executable, '-c', 'import time\nprint(1, flush=True)\ntime.sleep(30)'], 'the test child', 1,
                  on_line=lambda line: None)
