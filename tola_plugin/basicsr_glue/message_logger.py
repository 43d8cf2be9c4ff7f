"""The BasicSR glue's ``MessageLogger``'s ETA. Upstream estimates the remaining time as avg x (total - current - 1), so
the last logged iteration reads "eta: -1 day, 23:59:59", and it averages over current - start + 1 iterations although
its clock is reset after the first one. Fixed: the mean over the iterations actually timed, times max(total - current,
0). Everything else of the message is upstream's."""
import datetime
import time

from basicsr.utils.dist_util import master_only
from basicsr.utils.logger import MessageLogger

_original_reset_start_time = MessageLogger.reset_start_time


def message_logger_reset_start_time(self):
    """basicsr.train resets the clock once, after the first iteration of a fresh run: remember that."""
    _original_reset_start_time(self)
    self.timed_from_iter = self.start_iter + 1


def message_logger_eta_seconds(self, current_iter: int) -> float:
    """Seconds left after ``current_iter`` (never negative), from the mean time of the timed iterations."""
    timed = current_iter - getattr(self, 'timed_from_iter', self.start_iter)
    if timed <= 0:
        return 0.0
    return (time.time() - self.start_time) / timed * max(self.max_iters - current_iter, 0)


def message_logger_call(self, log_vars):
    """Upstream ``MessageLogger.__call__`` (basicsr 1.4.2) with the ETA of ``message_logger_eta_seconds``."""
    epoch = log_vars.pop('epoch')
    current_iter = log_vars.pop('iter')
    lrs = log_vars.pop('lrs')
    message = f'[{self.exp_name[:5]}..][epoch:{epoch:3d}, iter:{current_iter:8,d}, lr:('
    for v in lrs:
        message += f'{v:.3e},'
    message += ')] '
    if 'time' in log_vars.keys():
        iter_time = log_vars.pop('time')
        data_time = log_vars.pop('data_time')
        eta_str = str(datetime.timedelta(seconds=int(message_logger_eta_seconds(self, current_iter))))
        message += f'[eta: {eta_str}, time (data): {iter_time:.3f} ({data_time:.3f})] '
    for k, v in log_vars.items():
        message += f'{k}: {v:.4e} '
        if self.use_tb_logger and 'debug' not in self.exp_name:
            self.tb_logger.add_scalar(f'losses/{k}' if k.startswith('l_') else k, v, current_iter)
    self.logger.info(message)


def apply():
    MessageLogger.reset_start_time = message_logger_reset_start_time
    MessageLogger.__call__ = master_only(message_logger_call)
