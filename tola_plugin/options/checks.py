"""Strict option files: checks run once, in ``check_options``, on a run's options as finally merged (the option file,
its ``--force_yml`` entries, the command line's presets such as ``short_run``), before anything runs or is made: a
value is checked the same whichever way it was set.

- A key that no one reads is an error naming it and the closest known key (``chain_prob`` -> did you mean
  ``chain_probs``?), in every block: the top level, ``path`` and ``logger`` (BasicSR's pipeline keys), ``train`` and
  ``val`` (the keys the model reads: BasicSR's models and ours, ``utils/schema.py``, where a registered model
  declares its own), every ``network_*`` block (and nested ``{type: ...}`` blocks such as TOLANet's ``lrc``), every
  loss block of ``train`` (``*_opt`` with a ``type``), every optimizer (``optim_*``), every metric of ``val.metrics``
  and our datasets. Network, loss, optimizer and metric keys are read from the constructor's or function's
  signature (networks and losses taking ``**kwargs`` are left open); datasets declare theirs (``option_keys``).
- Keys every run needs are present (``check_required``): ``name``, ``model_type``, ``num_gpu``, ``datasets``,
  ``path``; for training ``train`` with ``total_iter``, ``optim_g`` and ``scheduler``, and ``logger`` with
  ``print_freq`` and ``save_checkpoint_freq``; for testing ``val.save_img``.
- Names that become folder and file names (``check_names``): ``name``, each dataset's ``name``, ``val.suffix`` are
  one path component that fits (``utils/user_paths.check_name``); the run's folders (``path.experiments_root``, ...)
  are the launcher's to set.
- Values: ``train.total_iter``, the logger's and validation's frequencies, batch sizes are positive integers (workers
  and ``manual_seed`` integers >= 0: ``check_numbers``); ``num_gpu`` no more than the CUDA devices present; the
  optimizers' numbers are numbers (``lr: abc``, or ``lr: 1e-4``, which YAML reads as text, is an error).
- ``train.scheduler``: one of BasicSR's schedulers, with the keys its constructor takes and consistent lengths;
  a schedule with an end (``CosineAnnealingRestartLR``: ``sum(periods)`` iterations) must cover ``total_iter``
  (BasicSR steps it ``total_iter - 1`` times; one step past the end is a TypeError deep in the run).
- The run-wide GPU options: ``allow_tf32`` and ``deterministic`` are booleans (utils/cuda_math.py); ``dist_params``
  holds only ``backend`` (nccl/gloo), ``port`` and ``timeout_minutes`` (options/dist_params.py).

Every error is an ``OptionError`` (a ValueError) whose message starts with the option's path in the file.
"""
import difflib
import inspect
import math
from typing import Iterable, List, Mapping, Optional

from basicsr.models.base_model import BaseModel
from basicsr.utils.registry import ARCH_REGISTRY, DATASET_REGISTRY, LOSS_REGISTRY, METRIC_REGISTRY, MODEL_REGISTRY

from tola_plugin.options import schema
from tola_plugin.options.dist_params import DIST_PARAMS_KEYS, PROCESS_GROUP_BACKENDS, process_group_timeout
from tola_plugin.options.reader import OptionError
from tola_plugin.utils.devices import cuda_device_count
from tola_plugin.utils.user_paths import check_name

# Dataset keys that BasicSR's pipelines and ``build_dataloader`` read (basicsr 1.4.2), valid for every dataset.
#: bytes BasicSR and the plugin add to an experiment's name in a file name: 'debug_' (--debug), 'train_' ... '_'
#: <time, 15> '.log' (the log; 26), '_archived_' <time> (25), '.lock' (5): the longest chain is 6 + 26
EXPERIMENT_NAME_RESERVE = 32
BASICSR_DATASET_KEYS = frozenset({
    'name', 'type', 'phase', 'scale', 'io_backend', 'batch_size_per_gpu', 'num_worker_per_gpu', 'use_shuffle',
    'dataset_enlarge_ratio', 'prefetch_mode', 'pin_memory', 'persistent_workers', 'num_prefetch_queue'
})
# Keys every option file needs before BasicSR's parser can read it, and what each is.
REQUIRED = {
    'name': 'the experiment\'s name (experiments/<name>/, results/<name>/), e.g. name: my_run',
    'model_type': 'the BasicSR model to build, e.g. model_type: SRModel or TOLAModel',
    'num_gpu': 'auto (every GPU present, or the CPU) or a number of GPUs, 0 for the CPU',
    'datasets': 'a mapping of phases to dataset blocks: train and val for training, test_1, ... for testing',
    'path': 'a mapping (pretrain_network_g: ~, resume_state: ~, ...; {} when empty)',
}
REQUIRED_TRAINING = {
    'train': 'the training block (total_iter, optim_g, scheduler, losses)',
    'logger': 'the logging block: print_freq and save_checkpoint_freq (iterations)',
}
REQUIRED_TRAIN_KEYS = {
    'total_iter': 'the number of iterations',
    'optim_g': "the generator's optimizer, e.g. {type: Adam, lr: !!float 2e-4}",
    'scheduler': 'the learning-rate schedule, e.g. {type: MultiStepLR, milestones: [100000], gamma: 0.5}',
}
REQUIRED_LOGGER_KEYS = {
    'print_freq': 'iterations between loss lines', 'save_checkpoint_freq': 'iterations between checkpoints'
}


def suggest(key: str, known: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest known key, or ''."""
    close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
    return f' (did you mean {close[0]!r}?)' if close else ''


def check_keys(options: Mapping, known: Iterable[str], where: str, what: str, advice: str = '') -> None:
    """Raise OptionError for the first key of ``options`` outside ``known`` (``where``: the block's path, '' for the
    top level; ``advice``: a sentence appended to the message)."""
    known = set(known)
    for key in options:
        if key not in known:
            raise OptionError(f'{where + "." if where else ""}{key}: unknown option of {what}{suggest(key, known)}; '
                              f'known: {", ".join(sorted(known))}{advice}')


def check_mapping(value, where: str, what: str) -> Mapping:
    """``value`` if it is a mapping, else an OptionError saying what ``where`` should hold."""
    if not isinstance(value, Mapping):
        raise OptionError(f'{where}: expected {what}, got {_shown(value)}')
    return value


def _shown(value) -> str:
    return 'nothing (null)' if value is None else f'{value!r} ({type(value).__name__})'


def check_required(opt: Mapping, is_train: bool) -> None:
    """The keys every run needs (REQUIRED, and for training REQUIRED_TRAINING with their own required keys) and the
    blocks the launcher reads (``name`` text, ``datasets`` and ``path`` mappings): each missing one is an error saying
    what it holds."""
    for key, what in {**REQUIRED, **(REQUIRED_TRAINING if is_train else {})}.items():
        if key not in opt:
            close = difflib.get_close_matches(key, [str(k) for k in opt], n=1, cutoff=0.6)
            typo = f"; the file has {close[0]!r}: a typo?" if close else ''
            raise OptionError(f'{key}: missing; an option file needs {key}: {what}{typo}')
    if not isinstance(opt['name'], str) or not opt['name']:
        raise OptionError(f'name: expected the experiment\'s name (text), got {_shown(opt["name"])}')
    datasets = check_mapping(opt['datasets'], 'datasets', REQUIRED['datasets'])
    for phase, dataset in datasets.items():
        check_mapping(dataset, f'datasets.{phase}', 'a dataset block with a type')
    check_logger_and_path(opt)  # BasicSR's parser edits path values: known keys only, before it does
    for key, value in opt['path'].items():
        if ('pretrain_network' in key or 'resume_state' in key) and not isinstance(value, (str, type(None))):
            raise OptionError(f'path.{key}: expected a file path or ~ (none), got {_shown(value)}')
    if not is_train:
        val = check_mapping(opt.get('val'), 'val', 'the test block of a test option file (save_img, metrics)')
        if 'save_img' not in val:
            raise OptionError('val.save_img: missing; a test option file says whether to write the restored images '
                              '(true or false)')
        return
    train = check_mapping(opt['train'], 'train', REQUIRED_TRAINING['train'])
    for key, what in REQUIRED_TRAIN_KEYS.items():
        if key not in train:
            raise OptionError(f'train.{key}: missing; a training option file needs {what}')
    logger = check_mapping(opt['logger'], 'logger', REQUIRED_TRAINING['logger'])
    for key in REQUIRED_LOGGER_KEYS:
        if key not in logger:
            raise OptionError(f'logger.{key}: missing; {REQUIRED_TRAINING["logger"]}')
    if opt.get('val') is not None and 'val_freq' not in check_mapping(opt['val'], 'val', 'the validation block'):
        raise OptionError('val.val_freq: missing; validate every how many iterations (or leave val out)')


def check_names(opt: Mapping) -> None:
    """The options that become names of folders and files the run writes: each one path component that fits
    (``user_paths.check_name``): ``name`` (experiments/<name>/, results/<name>/, <name>.lock, <name>_archived_<time>,
    train_<name>_<time>.log, debug_<name>), each dataset's ``name`` (visualization/<name>/), ``val.suffix``
    (<image>_<suffix>.png); and none of the run's folders, which the launcher sets from ``name``
    (``path.experiments_root``, ``path.models``, ...: BasicSR makes every folder ``path`` names)."""
    names = [('name', opt['name'], EXPERIMENT_NAME_RESERVE, "the experiment's name becomes a folder name "
              '(experiments/<name>/, results/<name>/)')]
    names += [(f'datasets.{phase}.name', dataset['name'], 0, "a dataset's name becomes a folder name")
              for phase, dataset in opt['datasets'].items() if dataset.get('name') is not None]
    val = opt.get('val')
    if isinstance(val, Mapping) and val.get('suffix') not in (None, ''):
        names.append(('val.suffix', str(val['suffix']), EXPERIMENT_NAME_RESERVE,
                      "it becomes part of each saved image's name (<image>_<suffix>.png)"))
    for where, name, reserve, why in names:
        try:
            check_name(name, where, reserve=reserve)
        except ValueError as err:
            raise OptionError(f'{err}; {why}') from None
    computed = sorted(schema.COMPUTED_PATH_KEYS & set(opt['path']))
    if computed:
        raise OptionError(f'path.{computed[0]}: the launcher sets it from name (experiments/<name>/..., '
                          f'results/<name>/...); an option file or --force_yml may not')


def check_positive_number(value, where: str) -> None:
    """``value`` is a finite number > 0 (not a boolean); else an OptionError (with a hint for YAML's 1e-4 text)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        hint = _number_hint(value, lambda number: 0 < number < math.inf)
        raise OptionError(f'{where}: expected a number > 0, got {_shown(value)}{hint}')


def check_whole_number(value, where: str, what: str, minimum: int = 1, floats: bool = True) -> None:
    """``value`` is a whole number >= ``minimum``: an int, or with ``floats`` a float without a fraction (``!!float
    5e3``, as BasicSR's files write iteration counts); else an OptionError saying so and what the option is."""
    whole = isinstance(value, int) or floats and isinstance(value, float) and value.is_integer()
    if isinstance(value, bool) or not whole or value < minimum:
        kind = 'a positive integer' if minimum == 1 else f'an integer >= {minimum}'
        hint = _number_hint(value, lambda number: number.is_integer() and number >= minimum, whole=True)
        raise OptionError(f'{where}: must be {kind} ({what}), got {_shown(value)}{hint}')


def _number_hint(value, acceptable=lambda number: True, whole: bool = False) -> str:
    """How to write ``value`` as a number (``whole``: in digits), when it is text YAML did not read as one (``1e-4``,
    ``"5"``) and the number would be ``acceptable``; else ''."""
    if not isinstance(value, str):
        return ''
    try:
        number = float(value)
    except ValueError:
        return ''
    if not acceptable(number):
        return ''
    if whole:
        return f'; YAML reads {value} as text: write {int(number)}'
    return f'; YAML reads {value} as text (no decimal point): write !!float {value}'


#: the numbers of BasicSR's pipeline that a dataset block may hold: (key, what it is, minimum, floats allowed)
DATASET_COUNTS = (('batch_size_per_gpu', 'images per batch on each GPU', 1, False),
                  ('num_worker_per_gpu', 'data-loader worker processes per GPU; 0 loads in the training process', 0,
                   False), ('num_prefetch_queue', 'batches prefetched', 1, False))


def check_numbers(opt: Mapping) -> None:
    """The numbers BasicSR's pipeline reads outside the model's blocks: ``scale``, ``manual_seed`` (numpy takes 0 to
    2**32 - 1), each dataset's batch size, workers, prefetch queue and ``dataset_enlarge_ratio``."""
    if 'scale' in opt:
        check_whole_number(opt['scale'], 'scale', 'the upscaling factor', floats=False)
    if opt.get('manual_seed') is not None:
        check_whole_number(opt['manual_seed'], 'manual_seed', 'the random seed; ~ for a random one', 0, floats=False)
        if opt['manual_seed'] >= 2**32:
            raise OptionError(f'manual_seed: must be below 2**32 (numpy\'s seeds), got {opt["manual_seed"]}')
    for phase, dataset in opt['datasets'].items():
        for key, what, minimum, floats in DATASET_COUNTS:
            if dataset.get(key) is not None:
                check_whole_number(dataset[key], f'datasets.{phase}.{key}', what, minimum, floats)
        if dataset.get('dataset_enlarge_ratio') is not None:
            check_positive_number(dataset['dataset_enlarge_ratio'], f'datasets.{phase}.dataset_enlarge_ratio')


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


def _declare_advice(model_cls) -> str:
    """How a model declares keys, when one of its classes declares none (e.g. a user's model)."""
    undeclared = [name for name in schema.undeclared_classes(model_cls) if name != 'BaseModel']
    if not undeclared:
        return ''
    return (f'. {", ".join(undeclared)} declares no option keys: a model that reads more declares them as class '
            f'attributes (train_option_keys, val_option_keys, top_option_keys; docs/reliability.md)')


def models_taking(key: str, kind: str) -> List[type]:
    """The registered models that take ``key`` in their ``kind`` block (e.g. ``ocr_opt`` under ``train``: TOLAModel
    and the text-aware BasicSR models). Asked on an error only: it imports the announced models' modules."""
    takers = []
    for name in sorted(MODEL_REGISTRY.keys()):
        try:
            cls = MODEL_REGISTRY.get(name)
        except (ImportError, KeyError):  # a model whose module cannot be imported here takes nothing here
            continue
        if key in schema.model_keys(cls, kind):
            takers.append(cls)
    return takers


def _taker_advice(key: str, model_cls, kind: str, opt: Optional[Mapping] = None) -> str:
    """Which model to choose for ``key`` that ``model_cls`` does not take: first the one that is ``model_cls`` with a
    mixin added (TextSRModel for SRModel), with what else it needs of ``opt`` (``model_needs``), then the others that
    take it; '' when none does."""
    takers = [cls for cls in models_taking(key, kind) if cls is not model_cls]
    if not takers:
        return ''
    variants = [
        cls for cls in takers
        if model_cls in cls.__bases__ and any(not issubclass(base, BaseModel) for base in cls.__bases__)
    ]
    others = ', '.join(cls.__name__ for cls in takers if cls not in variants)
    if variants:
        name = variants[0].__name__
        needs = model_needs(variants[0], opt, files=True) if opt is not None else []
        return (f'. {name} is {model_cls.__name__} with {key}: set model_type: {name}' +
                (f'; with it this run also needs {"; ".join(needs)}' if needs else '') +
                (f' (also taking it: {others})' if others else ''))
    return f'. Models that take {key}: {others}'


def model_needs(model_cls, opt: Mapping, files: bool = False) -> List[str]:
    """What ``model_cls`` needs of the rest of the options that ``opt`` lacks (its ``option_problems``: e.g. the
    text-aware models' OCR loss needs whole lines and a dataset with its labels), and when anything, or with
    ``files``, the files it reads (the recognizer's): one error says every change."""
    problems = getattr(model_cls, 'option_problems', None)
    if problems is None or not (files or problems(opt)):
        return []
    return problems(opt, files=True)


def check_model_block(block: Mapping, model_cls, kind: str, where: str, opt: Optional[Mapping] = None) -> None:
    """The keys of ``block`` (the top level, ``train`` or ``val``: ``kind``) against the model's; a key that another
    model takes names that model, and what else it needs of ``opt`` (``_taker_advice``)."""
    known = schema.model_keys(model_cls, kind)
    if kind == 'top':
        known = known | schema.COMPUTED_TOP_KEYS | {k for k in block if k.startswith('network_')}
    for key in block:
        if key not in known:
            home = [b for b in ('train', 'val') if key in schema.model_keys(model_cls, b)]
            belongs = f'; {key} belongs under {home[0]}:' if kind == 'top' and home else ''
            advice = ('' if belongs else _taker_advice(key, model_cls, kind, opt)) + _declare_advice(model_cls)
            check_keys({key: None}, known, where, f'{model_cls.__name__}{belongs}' if belongs else model_cls.__name__,
                       advice)


def check_train(opt: Mapping) -> None:
    """``train`` of a training run: total_iter, the model's keys, every loss and optimizer, the scheduler."""
    train = check_mapping(opt.get('train'), 'train', REQUIRED_TRAINING['train'])
    check_whole_number(train.get('total_iter'), 'train.total_iter', 'the number of iterations')
    if train.get('warmup_iter') is not None:
        check_whole_number(train['warmup_iter'], 'train.warmup_iter', 'iterations of warm-up; -1 for none', -1)
    model_cls = registered(MODEL_REGISTRY, opt.get('model_type'), 'model_type')
    check_model_block(train, model_cls, 'train', 'train', opt)
    for key, value in train.items():
        if key.endswith('_opt') and isinstance(value, Mapping) and 'type' in value:
            check_typed_block(value, LOSS_REGISTRY, f'train.{key}')
        elif key.startswith('optim_') and value is not None:
            check_optimizer(value, f'train.{key}', model_cls)
    check_scheduler(train)


def check_optimizer(options, where: str, model_cls) -> None:
    """An ``optim_*`` block: a torch optimizer the model builds, with that optimizer's keys, numbers where it takes
    numbers, and values it accepts (it is built once on a dummy parameter: torch's own checks of ``lr``, ``betas``,
    ...)."""
    import torch
    options = check_mapping(options, where, 'an optimizer block, e.g. {type: Adam, lr: !!float 2e-4}')
    kind = options.get('type')
    cls = getattr(torch.optim, kind, None) if isinstance(kind, str) else None
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        names = [n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)]
        raise OptionError(f'{where}.type: {kind!r} is not a torch optimizer{suggest(kind, names)}')
    parameters = inspect.signature(cls).parameters
    known = {name for name in parameters if name != 'params'}
    check_keys(options, known | {'type'}, where, kind)
    if 'lr' not in options:
        raise OptionError(f'{where}.lr: missing; BasicSR builds optimizers with a learning rate')
    for key, value in options.items():
        default = parameters[key].default if key in parameters else None
        if key == 'lr' or (isinstance(default, (int, float)) and not isinstance(default, bool)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise OptionError(f'{where}.{key}: expected a number, got {_shown(value)}{_number_hint(value)}')
        elif isinstance(default, tuple) and (not isinstance(value, (list, tuple)) or len(value) != len(default) or any(
                isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)):
            raise OptionError(f'{where}.{key}: expected a list of {len(default)} numbers, got {_shown(value)}')
        elif isinstance(default, bool) and not isinstance(value, bool):
            raise OptionError(f'{where}.{key}: expected true or false, got {_shown(value)}')
    probe = model_cls.__new__(model_cls)  # get_optimizer uses its arguments only; no model is built
    settings = {k: v for k, v in options.items() if k != 'type'}
    try:
        probe.get_optimizer(kind, [torch.nn.Parameter(torch.zeros(1))], **settings)
    except NotImplementedError:
        raise OptionError(f'{where}.type: {model_cls.__name__} does not build {kind} optimizers (its get_optimizer '
                          f'refuses it)') from None
    except (TypeError, ValueError) as err:
        raise OptionError(f'{where}: {kind} refuses these settings: {err}') from None


def check_metric(options, where: str) -> None:
    """A metric of ``val.metrics``: registered, with the metric function's arguments (BasicSR passes img and img2),
    ``type`` and ``better``; a key the function would swallow through ``**kwargs`` is an error."""
    options = check_mapping(options, where, 'a metric block with a type, e.g. {type: calculate_psnr, crop_border: 4}')
    function = registered(METRIC_REGISTRY, options.get('type'), where)
    params = inspect.signature(function).parameters.values()
    known = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {'img', 'img2'}
    check_keys(options, known | schema.METRIC_KEYS, where, options['type'])


def check_val(opt: Mapping, model_cls) -> None:
    """``val``: the model's keys, a positive ``val_freq`` when training, every metric."""
    val = opt.get('val')
    if val is None:
        return
    val = check_mapping(val, 'val', 'the validation block (val_freq, save_img, metrics)')
    check_model_block(val, model_cls, 'val', 'val')
    if opt.get('is_train') and 'val_freq' in val:
        check_whole_number(val['val_freq'], 'val.val_freq', 'iterations between validations')
    metrics = val.get('metrics')
    if metrics is not None:
        for name, metric in check_mapping(metrics, 'val.metrics', 'a mapping of metric names to blocks').items():
            if metric is not None:  # --force_yml val:metrics:NAME=~ removes one
                check_metric(metric, f'val.metrics.{name}')


def check_logger_and_path(opt: Mapping) -> None:
    """``logger`` (BasicSR's pipeline keys, positive frequencies, ``wandb``) and ``path`` (per network: its file,
    parameter key and strictness)."""
    logger = opt.get('logger')
    if logger is not None:
        logger = check_mapping(logger, 'logger', REQUIRED_TRAINING['logger'])
        check_keys(logger, schema.LOGGER_KEYS, 'logger', "BasicSR's logger")
        for key, what in REQUIRED_LOGGER_KEYS.items():
            if key in logger:
                check_whole_number(logger[key], f'logger.{key}', what)
        if logger.get('wandb') is not None:
            check_keys(
                check_mapping(logger['wandb'], 'logger.wandb', 'a mapping (project, resume_id)'), schema.WANDB_KEYS,
                'logger.wandb', "BasicSR's wandb logger")
    path = opt.get('path')
    if path is not None:
        networks = ', '.join(k for k in opt if k.startswith('network_')) or 'none'
        check_keys(
            check_mapping(path, 'path', REQUIRED['path']), schema.path_keys(opt), 'path',
            f'BasicSR\'s paths (networks of this file: {networks})')


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
    """``num_gpu``: 'auto' (every CUDA device present, or the CPU), or a number no more than the CUDA devices of this
    machine."""
    num_gpu = opt.get('num_gpu')
    if num_gpu == 'auto':
        return
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
    if params.get('backend') is not None and params['backend'] not in PROCESS_GROUP_BACKENDS:
        raise OptionError(f'dist_params.backend: expected one of {PROCESS_GROUP_BACKENDS} (or none: nccl on CUDA, gloo '
                          f'on the CPU), got {params["backend"]!r}')
    port = params.get('port')
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise OptionError(f'dist_params.port: expected a TCP port number, got {port!r}')
    try:
        process_group_timeout(params)
    except ValueError as err:
        raise OptionError(str(err)) from None


def check_options(opt: Mapping) -> None:
    """Every start-up check of a run's options as finally merged (the option file, its ``--force_yml`` entries, the
    command line's presets; ``opt['is_train']``: the training launcher), before BasicSR adds its computed keys: one
    place, so a value is checked the same whichever way it was set (``basicsr_glue.option_parsing``)."""
    check_required(opt, bool(opt.get('is_train')))
    check_names(opt)
    model_cls = registered(MODEL_REGISTRY, opt.get('model_type'), 'model_type')
    check_model_block(opt, model_cls, 'top', '')
    check_num_gpu(opt)
    check_numbers(opt)
    check_run_options(opt)
    check_logger_and_path(opt)
    check_val(opt, model_cls)
    for key, value in opt.items():
        if key.startswith('network_') and value is not None:
            check_typed_block(value, ARCH_REGISTRY, key)
    for phase, dataset in (opt.get('datasets') or {}).items():
        check_dataset(dataset, f'datasets.{phase}')
    if opt.get('is_train'):
        check_train(opt)
        needs = model_needs(model_cls, opt)
        if needs:
            raise OptionError(f'model_type: {model_cls.__name__} (as set) needs {"; ".join(needs)}')
