"""BasicSR's MessageLogger ETA as patched in tola_plugin/basicsr_glue/message_logger.py."""
from basicsr.utils.logger import MessageLogger

import tola_plugin  # noqa: F401  (applies the overrides)


class Lines(list):

    def info(self, message):
        self.append(message)


def _logger(start_iter, total, clock, monkeypatch):
    monkeypatch.setattr('time.time', lambda: clock[0])
    opt = {'name': 'eta_test', 'logger': {'print_freq': 1, 'use_tb_logger': False}, 'train': {'total_iter': total}}
    msg_logger = MessageLogger(opt, start_iter)
    msg_logger.logger = Lines()
    return msg_logger


def _eta(msg_logger, current_iter):
    msg_logger({'epoch': 0, 'iter': current_iter, 'lrs': [1e-3], 'time': 1.0, 'data_time': 0.0, 'l_pix': 0.5})
    return msg_logger.logger[-1].split('[eta: ')[1].split(',')[0]


def test_eta_counts_timed_iterations_and_ends_at_zero(monkeypatch):
    clock = [100.0]
    log = _logger(0, 10, clock, monkeypatch)
    clock[0] = 102.0  # iteration 1 took 2 s; train.py resets the clock after it
    log.reset_start_time()
    clock[0] = 102.0 + 4 * 3.0  # iterations 2-5 took 3 s each
    assert _eta(log, 5) == '0:00:15'  # 5 iterations left x 3 s
    clock[0] = 102.0 + 9 * 3.0
    assert _eta(log, 10) == '0:00:00'  # upstream: '-1 day, 23:59:59'
    assert 'l_pix: 5.0000e-01' in log.logger[-1]


def test_eta_after_resume_without_clock_reset(monkeypatch):
    clock = [0.0]
    log = _logger(100, 200, clock, monkeypatch)  # resumed at 100: train.py does not reset the clock
    clock[0] = 50.0  # iterations 101-150 took 1 s each
    assert _eta(log, 150) == '0:00:50'
