"""Issue "Bounded inputs, outputs that never lie", problem 11: a scheduler shorter than the run is an error at start,
and on resume the option file's scheduler settings win over the saved ones (with a line in the log).

BasicSR steps its schedulers ``total_iter - 1`` times; ``CosineAnnealingRestartLR`` has no learning rate past
``sum(periods)`` (``get_position_from_periods`` returns None: a TypeError at that iteration). Runs are the tiny demo
configuration through the launcher's code in this process.
"""
import logging
import sys
from collections import Counter

import pytest
import torch
import yaml

from basicsr.models.lr_scheduler import CosineAnnealingRestartLR, MultiStepRestartLR

import tola_plugin  # noqa: F401
from tola_plugin.basicsr_glue.training_resume import keep_option_settings, scheduler_settings
from tola_plugin.options.checks import OptionError, check_scheduler
from tola_testing import one_thread, tiny_demo_options  # noqa: F401


def train_block(total_iter, **scheduler):
    return {'total_iter': total_iter, 'scheduler': scheduler}


def test_total_iter_is_checked_against_the_schedulers_length():
    cosine = dict(type='CosineAnnealingRestartLR', periods=[2, 3], restart_weights=[1, 0.5])
    check_scheduler(train_block(6, **cosine))  # 5 steps: the last one at the end of the second period
    with pytest.raises(
            OptionError, match=r"train.total_iter: 7 iterations step the scheduler 6 times, past the end "
            r"of CosineAnnealingRestartLR's periods \[2, 3\] \(sum 5;.*make sum\(periods\) at least 6"):
        check_scheduler(train_block(7, **cosine))
    with pytest.raises(OptionError, match='restart_weights: .* one weight per period'):
        check_scheduler(train_block(3, type='CosineAnnealingRestartLR', periods=[2, 3]))
    with pytest.raises(OptionError, match="train.scheduler.period: unknown option .*did you mean 'periods'"):
        check_scheduler(train_block(3, type='CosineAnnealingRestartLR', period=[4]))
    with pytest.raises(OptionError, match='periods: expected a list of positive whole numbers'):
        check_scheduler(train_block(3, type='CosineAnnealingRestartLR', periods=[0], restart_weights=[1]))
    with pytest.raises(OptionError, match="'CosineLR' is not a scheduler BasicSR builds"):
        check_scheduler(train_block(3, type='CosineLR'))
    check_scheduler(train_block(10**6, type='MultiStepLR', milestones=[], gamma=1.0))  # no end: any length
    with pytest.raises(OptionError, match='restart_weights: .* one weight per restart'):
        check_scheduler(train_block(3, type='MultiStepRestartLR', milestones=[2], restarts=[0, 5]))


def test_the_launcher_refuses_a_run_longer_than_its_schedule(rendered_sets, tmp_path, monkeypatch, capsys):
    from reliability_testing import expect_error
    opt = tiny_demo_options(rendered_sets, 'short', total_iter=4, freq=2)
    opt['train']['scheduler']['periods'] = [2]
    expect_error(tmp_path, monkeypatch, capsys, opt, 'options.yml: train.total_iter: 4 iterations step the scheduler 3 '
                 'times, past the end')
    assert not (tmp_path / 'experiments' / 'short').exists()


def test_resume_keeps_the_option_files_scheduler_settings():
    net = torch.nn.Linear(1, 1)
    for scheduler, changes in ((CosineAnnealingRestartLR, dict(periods=[4], restart_weights=[1])),
                               (MultiStepRestartLR, dict(milestones=[3], gamma=0.5))):
        cosine = scheduler is CosineAnnealingRestartLR
        old_kwargs = dict(periods=[2], restart_weights=[1]) if cosine else dict(milestones=[1], gamma=0.1)
        saved = scheduler(torch.optim.SGD(net.parameters(), 0.1), **old_kwargs)
        for _ in range(2):
            saved.step()
        resumed = scheduler(torch.optim.SGD(net.parameters(), 0.1), **changes)
        configured = scheduler_settings(resumed)
        resumed.load_state_dict(saved.state_dict())  # BasicSR's resume: the saved settings come back
        lines = []
        keep_option_settings([resumed], [configured], lines.append)
        assert resumed.last_epoch == 2  # the position is the saved one
        for key, value in changes.items():
            assert getattr(resumed, key) == (Counter(value) if key == 'milestones' else value)
        assert len(lines) == 1 and f'scheduler 0 ({scheduler.__name__}) of the resumed state differs' in lines[0]
        assert 'in the option file' in lines[0] and 'from iteration 3 on' in lines[0]
        if cosine:
            assert resumed.cumulative_period == [4]
            resumed.step()  # one step past the saved run's end: fine with the option file's periods
        lines.clear()
        keep_option_settings([resumed], [scheduler_settings(resumed)], lines.append)
        assert not lines  # nothing differs: nothing said


@pytest.mark.usefixtures('one_thread')
def test_a_finished_run_extended_with_longer_periods_resumes(rendered_sets, tmp_path, monkeypatch, caplog):
    from tola_plugin.train import run
    monkeypatch.chdir(tmp_path)
    opt = tiny_demo_options(rendered_sets, 'extend', total_iter=2, freq=2)
    opt['datasets'].pop('val')
    opt.pop('val')
    path = tmp_path / 'train.yml'
    path.write_text(yaml.safe_dump(opt, sort_keys=False), encoding='utf-8')
    monkeypatch.setattr(sys, 'argv', ['tola-train', '-opt', str(path)])
    run()
    opt['train']['total_iter'] = 4
    opt['train']['scheduler']['periods'] = [4]
    path.write_text(yaml.safe_dump(opt, sort_keys=False), encoding='utf-8')
    monkeypatch.setattr(sys, 'argv', ['tola-train', '-opt', str(path), '--auto_resume'])
    logger = logging.getLogger('basicsr')  # BasicSR's logger does not propagate to the root logger
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level('INFO', logger='basicsr'):
            run()  # the saved periods [2] would end the schedule at iteration 3 (TypeError at 4)
    finally:
        logger.removeHandler(caplog.handler)
    assert 'Resuming training from epoch' in caplog.text
    assert ('scheduler 0 (CosineAnnealingRestartLR) of the resumed state differs from the option file (periods: [2] '
            'saved, [4] in the option file)') in caplog.text
    state = torch.load(tmp_path / 'experiments' / 'extend' / 'training_states' / '4.state', weights_only=True)
    assert state['schedulers'][0]['periods'] == [4] and state['schedulers'][0]['last_epoch'] == 3
