"""The short-run preset: ``short_run: N`` (top level of a training option file, or ``--force_yml short_run=N``) makes
any training option file run N iterations in a small memory footprint, e.g. to check one's data and set-up on a CPU
or a laptop before the real run (docs/own_data.md, "A short run first"). What it changes, nothing else:

- ``train.total_iter`` = N; the schedule is shrunk by N / total_iter: ``MultiStepLR`` milestones and restarts (those
  that fall on or before iteration 0 or after N are dropped, with their restart weights), ``warmup_iter``;
  ``CosineAnnealingRestartLR`` becomes one period of N iterations (``periods: [N]``, ``restart_weights: [1]``);
- every training dataset: ``batch_size_per_gpu`` at most 2, ``num_worker_per_gpu: 0`` (read in the training process:
  no worker processes, no memory for them); ``train.accumulate_grad_batches`` (TOLAModel), when given, 1;
- ``logger.print_freq: 1`` (a loss line every iteration).

Validation and checkpoints keep their frequencies; BasicSR validates and saves ``net_g_latest.pth`` after the last
iteration anyway. Applied by the launchers' option parser (``basicsr_glue.option_parsing``) after ``--force_yml`` and
before the checks (``checks.check_options``), which see what it made.
"""
from typing import Mapping, MutableMapping

from tola_plugin.options.checks import OptionError, check_whole_number

SHORT_RUN_KEY = 'short_run'
SHORT_RUN_BATCH = 2


def _scaled(values, total: int, n: int):
    """``values`` (iterations out of ``total``) moved to the same fractions of ``n``: (kept positions, values)."""
    kept = []
    for i, value in enumerate(values):
        moved = round(value * n / total)
        if 0 < moved <= n:
            kept.append((i, moved))
    return [i for i, _ in kept], [v for _, v in kept]


def _shrink_scheduler(scheduler: MutableMapping, total: int, n: int) -> None:
    if scheduler.get('type') == 'CosineAnnealingRestartLR':
        scheduler.update(periods=[n], restart_weights=[1])
        return
    if scheduler.get('milestones'):
        scheduler['milestones'] = _scaled(scheduler['milestones'], total, n)[1]
    if scheduler.get('restarts'):
        positions, scheduler['restarts'] = _scaled(scheduler['restarts'], total, n)
        if scheduler.get('restart_weights') is not None:
            scheduler['restart_weights'] = [scheduler['restart_weights'][i] for i in positions]


def apply_short_run(opt: MutableMapping) -> str:
    """Apply and remove ``opt['short_run']`` (see the module docstring); returns a one-line note of what changed, or
    '' when the key is absent or ~. OptionError for a value that is not a positive integer or a test option file."""
    n = opt.pop(SHORT_RUN_KEY, None)
    if n is None:
        return ''
    check_whole_number(n, SHORT_RUN_KEY, 'the iterations of the short run', floats=False)
    train = opt.get('train')
    if not opt.get('is_train') or not isinstance(train, MutableMapping):
        raise OptionError(f'{SHORT_RUN_KEY}: is for training option files (this one has no train block, or runs the '
                          f'test launcher)')
    total = train.get('total_iter')
    if isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0:
        if isinstance(train.get('scheduler'), MutableMapping):
            _shrink_scheduler(train['scheduler'], total, n)
        warmup = train.get('warmup_iter', -1)
        if isinstance(warmup, (int, float)) and warmup > 0:
            train['warmup_iter'] = round(warmup * n / total) or -1
    train['total_iter'] = n
    if 'accumulate_grad_batches' in train:
        train['accumulate_grad_batches'] = 1
    for phase, dataset in (opt.get('datasets') or {}).items():
        if phase.split('_')[0] == 'train' and isinstance(dataset, MutableMapping):
            batch = dataset.get('batch_size_per_gpu', SHORT_RUN_BATCH)
            if isinstance(batch, int):  # anything else is the checks' to refuse, after the preset
                dataset['batch_size_per_gpu'] = min(batch, SHORT_RUN_BATCH)
            dataset['num_worker_per_gpu'] = 0
    if isinstance(opt.get('logger'), MutableMapping):
        opt['logger']['print_freq'] = 1
    return (f'{SHORT_RUN_KEY}: {n} iterations, batch at most {SHORT_RUN_BATCH}, no loader workers, a loss line every '
            f'iteration (scheduler: {_describe(train.get("scheduler"))}, warmup_iter: {train.get("warmup_iter", -1)})')


def _describe(scheduler) -> str:
    if not isinstance(scheduler, Mapping):
        return repr(scheduler)
    return ', '.join(f'{k}: {v}' for k, v in scheduler.items())
