"""Strict option files: checks run once when a launcher (or a tool) reads an option file, before anything runs.

- A key that no one reads is an error naming it and the closest known key (``chain_prob`` -> did you mean
  ``chain_probs``?), in: every ``network_*`` block (and nested ``{type: ...}`` blocks such as TOLANet's
  ``lrc``), every loss block of ``train`` (``*_opt`` with a ``type``), our datasets, and the ``train`` block of
  our models. Network and loss keys are read from the constructor's signature (classes taking ``**kwargs``
  are left open); datasets and models declare theirs (``option_keys`` / ``train_option_keys``) next to the
  code that reads them.
- ``train.total_iter`` must be a positive integer; ``num_gpu`` may not exceed the CUDA devices present.
- ``train.scheduler``: one of BasicSR's schedulers, with the keys its constructor takes and consistent lengths;
  a schedule with an end (``CosineAnnealingRestartLR``: ``sum(periods)`` iterations) must cover ``total_iter``
  (BasicSR steps it ``total_iter - 1`` times; one step past the end is a TypeError deep in the run).
- The run-wide GPU options: ``allow_tf32`` and ``deterministic`` are booleans (utils/cuda_math.py); ``dist_params``
  holds only ``backend`` (nccl/gloo), ``port`` and ``timeout_minutes`` (utils/distributed.py).

Every error is an ``OptionError`` (a ValueError) whose message starts with the option's path in the file.
"""
import difflib
import inspect
from typing import Iterable, Mapping, Optional

from basicsr.utils.registry import ARCH_REGISTRY, DATASET_REGISTRY, LOSS_REGISTRY, MODEL_REGISTRY

from tola_plugin.utils.devices import cuda_device_count
from tola_plugin.utils.distributed import BACKENDS, DIST_PARAMS_KEYS, process_group_timeout

# Dataset keys that BasicSR's pipelines and ``build_dataloader`` read (basicsr 1.4.2), valid for every dataset.
BASICSR_DATASET_KEYS = frozenset({
    'name', 'type', 'phase', 'scale', 'io_backend', 'batch_size_per_gpu', 'num_worker_per_gpu', 'use_shuffle',
    'dataset_enlarge_ratio', 'prefetch_mode', 'pin_memory', 'persistent_workers', 'num_prefetch_queue'
})
# ``train`` keys that BasicSR's training pipeline itself reads, valid for every model.
BASICSR_PIPELINE_TRAIN_KEYS = frozenset({'total_iter', 'warmup_iter'})


class OptionError(ValueError):
    """A bad option-file entry; the message starts with its path (``datasets.train.chain_prob``)."""


def suggest(key: str, known: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest known key, or ''."""
    close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
    return f' (did you mean {close[0]!r}?)' if close else ''


def check_keys(options: Mapping, known: Iterable[str], where: str, what: str) -> None:
    """Raise OptionError for the first key of ``options`` outside ``known``."""
    known = set(known)
    for key in options:
        if key not in known:
            raise OptionError(f'{where}.{key}: unknown option of {what}{suggest(key, known)}; known: '
                              f'{", ".join(sorted(known))}')


def registered(registry, type_name, where: str):
    """The class (or function) registered as ``type_name``, or an OptionError with the closest name."""
    if type_name is None:
        raise OptionError(f'{where}.type: missing')
    try:
        return registry.get(type_name)
    except KeyError:
        raise OptionError(f'{where}.type: {type_name!r} is not a registered {registry._name} type'
                          f'{suggest(type_name, registry.keys())}') from None


def signature_keys(cls) -> Optional[set]:
    """Keyword options of a constructor (or function), or None when it takes ``**kwargs`` (open)."""
    params = list(inspect.signature(cls).parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def resolved_options(registry, options: Mapping) -> dict:
    """``{type, every constructor argument}`` of a ``{type: ..., ...}`` block with the defaults filled in, so
    that two blocks building the same object compare equal (``{type: X}`` == ``{type: X, num_feat: 32}``)."""
    options = dict(options)
    cls = registry.get(options.pop('type'))
    bound = inspect.signature(cls).bind(**options)
    bound.apply_defaults()
    return {'type': cls.__name__, **{k: v for k, v in bound.arguments.items() if k not in ('args', 'kwargs')}}


def check_typed_block(options: Mapping, registry, where: str) -> None:
    """Check a ``{type: ..., ...}`` block against its class's signature; nested ``{type: ...}`` blocks (e.g.
    TOLANet's ``lrc``) are checked against the same registry."""
    if not isinstance(options, Mapping):
        raise OptionError(f'{where}: expected a mapping with a "type", got {type(options).__name__}')
    cls = registered(registry, options.get('type'), where)
    known = signature_keys(cls)
    if known is not None:
        check_keys(options, known | {'type'}, where, f'{options["type"]}')
    for key, value in options.items():
        if isinstance(value, Mapping) and 'type' in value and key != 'type':
            try:
                registry.get(value['type'])
            except KeyError:
                continue  # a mapping that merely has a 'type' key, not a block of this registry
            check_typed_block(value, registry, f'{where}.{key}')


def check_dataset(options: Mapping, where: str) -> None:
    """Our datasets declare ``option_keys``; BasicSR's read their options freely and are left alone."""
    cls = registered(DATASET_REGISTRY, options.get('type'), where)
    own = getattr(cls, 'option_keys', None)
    if own is not None:
        check_keys(options, set(own) | BASICSR_DATASET_KEYS, where, options['type'])


def check_train(opt: Mapping) -> None:
    """``train`` of a training run: total_iter, the model's own keys (when it declares them), every loss."""
    train = opt.get('train')
    if not isinstance(train, Mapping):
        raise OptionError('train: missing (a training option file needs a train block)')
    total = train.get('total_iter')
    if isinstance(total, bool) or not isinstance(total, (int, float)) or int(total) != total or total <= 0:
        raise OptionError(f'train.total_iter: expected a positive number of iterations, got {total!r}')
    model_cls = registered(MODEL_REGISTRY, opt.get('model_type'), 'model_type')
    own = getattr(model_cls, 'train_option_keys', None)
    if own is not None:
        check_keys(train, set(own) | BASICSR_PIPELINE_TRAIN_KEYS, 'train', f'{opt["model_type"]}')
    for key, value in train.items():
        if key.endswith('_opt') and isinstance(value, Mapping) and 'type' in value:
            check_typed_block(value, LOSS_REGISTRY, f'train.{key}')
    check_scheduler(train)


def _scheduler_classes() -> dict:
    """The schedulers BasicSR 1.4.2 builds (``BaseModel.setup_schedulers``), by the ``type`` it accepts."""
    from basicsr.models import lr_scheduler
    return {
        'MultiStepLR': lr_scheduler.MultiStepRestartLR, 'MultiStepRestartLR': lr_scheduler.MultiStepRestartLR,
        'CosineAnnealingRestartLR': lr_scheduler.CosineAnnealingRestartLR
    }


def _int_list(value, where: str, positive: bool = False) -> list:
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and (v > 0 or not positive) for v in value):
        raise OptionError(f'{where}: expected a list of {"positive " if positive else ""}whole numbers, got {value!r}')
    return list(value)


def check_scheduler(train: Mapping) -> None:
    """``train.scheduler`` against BasicSR's schedulers and ``train.total_iter`` (after ``check_train``'s check of
    total_iter)."""
    options = train.get('scheduler')
    if not isinstance(options, Mapping):
        raise OptionError(f'train.scheduler: expected a mapping with a "type", got {options!r}')
    classes = _scheduler_classes()
    kind = options.get('type')
    if kind not in classes:
        raise OptionError(f'train.scheduler.type: {kind!r} is not a scheduler BasicSR builds{suggest(kind, classes)}; '
                          f'known: {", ".join(classes)}')
    known = signature_keys(classes[kind]) - {'optimizer', 'last_epoch'}
    check_keys(options, known | {'type'}, 'train.scheduler', kind)
    total = int(train['total_iter'])
    if kind == 'CosineAnnealingRestartLR':
        if 'periods' not in options:
            raise OptionError('train.scheduler.periods: missing (CosineAnnealingRestartLR needs its cycle lengths)')
        periods = _int_list(options['periods'], 'train.scheduler.periods', positive=True)
        weights = options.get('restart_weights', [1])
        if not isinstance(weights, (list, tuple)) or len(weights) != len(periods):
            raise OptionError(f'train.scheduler.restart_weights: {weights!r} must have one weight per period '
                              f'({len(periods)} periods)')
        if sum(periods) < total - 1:
            raise OptionError(f'train.total_iter: {total} iterations step the scheduler {total - 1} times, past the '
                              f'end of CosineAnnealingRestartLR\'s periods {periods} (sum {sum(periods)}; it has no '
                              f'learning rate after that); make sum(periods) at least {total - 1}, or lower total_iter')
    else:
        _int_list(options.get('milestones', []), 'train.scheduler.milestones')
        restarts = _int_list(options.get('restarts', [0]), 'train.scheduler.restarts')
        weights = options.get('restart_weights', [1])
        if not isinstance(weights, (list, tuple)) or len(weights) != len(restarts):
            raise OptionError(f'train.scheduler.restart_weights: {weights!r} must have one weight per restart '
                              f'({len(restarts)} restarts)')


def check_num_gpu(opt: Mapping) -> None:
    """``num_gpu`` (after BasicSR resolved 'auto') may not exceed the CUDA devices of this machine."""
    num_gpu = opt.get('num_gpu')
    present = cuda_device_count()
    if isinstance(num_gpu, bool) or not isinstance(num_gpu, int) or num_gpu < 0:
        raise OptionError(f'num_gpu: expected "auto" or a number of GPUs >= 0, got {num_gpu!r}')
    if num_gpu > present:
        raise OptionError(f'num_gpu: {num_gpu} requested but this machine has {present} CUDA device(s); use '
                          f'num_gpu: auto (all present, 0 = CPU) or at most {present}')


def check_run_options(opt: Mapping) -> None:
    """The top-level options of this plugin: ``allow_tf32``, ``deterministic`` (booleans) and ``dist_params``."""
    for key in ('allow_tf32', 'deterministic'):
        if key in opt and not isinstance(opt[key], bool):
            raise OptionError(f'{key}: expected true or false, got {opt[key]!r}')
    params = opt.get('dist_params')
    if params is None:
        return
    if not isinstance(params, Mapping):
        raise OptionError(f'dist_params: expected a mapping, got {type(params).__name__}')
    check_keys(params, DIST_PARAMS_KEYS, 'dist_params', 'the process group')
    if params.get('backend') is not None and params['backend'] not in BACKENDS:
        raise OptionError(f'dist_params.backend: expected one of {BACKENDS} (or leave it out: nccl on CUDA, gloo on '
                          f'the CPU), got {params["backend"]!r}')
    port = params.get('port')
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise OptionError(f'dist_params.port: expected a TCP port number, got {port!r}')
    try:
        process_group_timeout(params)
    except ValueError as err:
        raise OptionError(str(err)) from None


def check_options(opt: Mapping) -> None:
    """Every start-up check of a parsed BasicSR option dict (train or test)."""
    check_num_gpu(opt)
    check_run_options(opt)
    for key, value in opt.items():
        if key.startswith('network_') and value is not None:
            check_typed_block(value, ARCH_REGISTRY, key)
    for phase, dataset in (opt.get('datasets') or {}).items():
        check_dataset(dataset, f'datasets.{phase}')
    if opt.get('is_train'):
        check_train(opt)
