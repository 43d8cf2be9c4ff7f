"""The BasicSR glue's resource bounds: what a run's options ask of this machine, checked on the merged options once
``num_gpu`` is resolved and before any folder is made (``option_parsing.read_options``), every launcher.

-   Memory (``check_memory``): each ``network_*`` is measured on the meta device (no weights, no compute): by the
    model class's ``network_memory`` where it has one (TOLAModel: ``models/memory_estimate.network_demand``, reached
    through the model registry, as this layer imports no models), else the registry's class built there; a training
    run adds the gradients and AdamW's two moments of the trainable parameters, and per training sample at least its
    ground-truth image and the activations autograd keeps for the backward pass (batches 2 - 1; for another network
    than TOLANet, of ``network_g`` on the LQ crop and ``network_d`` on the GT crop, one forward each). The sum
    must fit ``1 - RESERVE`` of what one process may use: the smallest GPU's memory, or on the CPU MemAvailable shared
    by the run's processes on this machine. What does not fit is refused naming the option, its value and what fits
    (the largest batch; the LoRA rank, which its weights and activations are linear in).
-   Workers: ``num_worker_per_gpu`` beyond the cores this process may run on (shared by its GPUs and the local
    processes) only adds processes and memory; it is capped there with a warning (the plugin's datasets draw per
    sample, not per worker, so the samples do not change; BasicSR's own seed per worker id).
-   Out of GPU memory during the run (``out_of_gpu_memory``: another process took some, fragmentation, a longer
    line than the bound measured): the launchers end with one line naming torch's figures and the options that make
    the run fit, instead of a traceback; a rank of several ends the job with it (``launchers.run_pipeline``).
-   ``dataset_enlarge_ratio``: every epoch the sampler holds ``len(dataset) * ratio`` indices (``BYTES_PER_INDEX``
    each): refused at start when even one sample's would not fit, and when the sampler is made (the dataset's length
    known; a failed start removes its folders) when they do not.
"""
import contextlib
import json
import logging
import math
import os
from typing import Dict, Mapping, Optional, Tuple

import torch

from basicsr.utils import logger as basicsr_logger
from basicsr.utils.registry import ARCH_REGISTRY, DATASET_REGISTRY, MODEL_REGISTRY

from tola_plugin.basicsr_glue.training_resume import warn_early
from tola_plugin.options.reader import OptionError
from tola_plugin.utils.procfs import meminfo_bytes
from tola_plugin.utils.tensor_memory import saved_bytes_per_sample, trainable_bytes, weight_bytes

GIB = 2**30
RESERVE = 0.1  # share of the memory left to what the meta device does not see (as commands/estimate_memory.py)
TEXT_LINE = (128, 512)  # the plugin's datasets' samples: a text line's canvas (data/text_line_source.py)
#: bytes per index of an epoch, measured for ``torch.randperm(10**7).tolist()`` (the int64, the list's slot and
#: the Python int: the sampler holds both; upstream's ``% len`` and rank slice add more)
BYTES_PER_INDEX = 48
_measured: Dict[str, Tuple[int, int, int, int]] = {}  # network options -> (weights, trainable, lora, per sample)


def gib(n: float) -> str:
    return f'{n / GIB:,.2f} GiB'


def available_memory() -> int:
    """Bytes of memory available on this machine now (MemAvailable; where there is no /proc, the free pages)."""
    available = meminfo_bytes('MemAvailable')
    return available if available is not None else int(os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE'))


def usable_memory(opt: Mapping) -> Tuple[int, str]:
    """(bytes one process of the run may use, where the figure comes from)."""
    share = 1 - RESERVE
    processes = int(os.environ.get('LOCAL_WORLD_SIZE', '1')) if opt.get('dist') else 1
    if opt.get('num_gpu'):
        total = min(torch.cuda.get_device_properties(i).total_memory for i in range(opt['num_gpu']))
        per_gpu = -(-processes // torch.cuda.device_count()) if opt.get('dist') else 1  # gloo may share a GPU
        per = f' shared by {per_gpu} processes' if per_gpu > 1 else ''
        return int(share * total / per_gpu), f'{share:.0%} of the GPU\'s {gib(total)} of memory{per}'
    available = available_memory()
    per = f' shared by {processes} processes' if processes > 1 else ''
    return int(share * available / processes), f'{share:.0%} of the {gib(available)} of memory available{per}'


def sample_size(dataset: Mapping) -> Optional[Tuple[int, int]]:
    """(height, width) of a training sample: ``gt_size`` crops, the plugin's text lines are their canvas; None for a
    dataset whose images keep their own size."""
    if isinstance(dataset.get('gt_size'), int):
        return dataset['gt_size'], dataset['gt_size']
    if DATASET_REGISTRY.get(dataset['type']).__module__.startswith('tola_plugin.'):
        return TEXT_LINE
    return None


def input_shape(key: str, net_opt: Mapping, opt: Mapping, size: Optional[Tuple[int, int]]) -> Optional[tuple]:
    """(C, H, W) of what ``key`` sees of a training sample of ``size`` (BasicSR's roles: the generator the LQ crop,
    the discriminator the GT crop); None where unknown (no fixed size, another role)."""
    if size is None or key not in ('network_g', 'network_d'):
        return None
    scale = int(opt.get('scale') or 1) if key == 'network_g' else 1
    return int(net_opt.get('num_in_ch', 3)), max(size[0] // scale, 1), max(size[1] // scale, 1)


def measure_network(key: str, net_opt: Mapping, train_opt: Optional[Mapping], size: Optional[Tuple[int, int]],
                    model_cls=None, sample_shape: Optional[tuple] = None) -> Tuple[int, int, int, int]:
    """(weight bytes, trainable bytes, LoRA bytes, activation bytes per training sample) of ``net_opt`` measured on
    the meta device: by the model's ``network_memory`` where it measures the network (TOLAModel: TOLANet, with its
    activations when ``train_opt`` and ``size`` are given), else the registry's class built there, its activations
    measured on an input of ``sample_shape`` (C, H, W) when training; what cannot be built or run there is said and
    counted as 0."""
    cache = json.dumps([key, net_opt, train_opt, size,
                        getattr(model_cls, '__name__', None), sample_shape], sort_keys=True, default=str)
    if cache in _measured:
        return _measured[cache]
    try:
        measured = getattr(model_cls, 'network_memory', lambda *args: None)(net_opt, train_opt, size)
        if measured is None:
            with torch.device('meta'):
                net = ARCH_REGISTRY.get(net_opt['type'])(**{k: v for k, v in net_opt.items() if k != 'type'})
            measured = weight_bytes(net), trainable_bytes(net), 0, 0
            if train_opt is not None and sample_shape is not None:
                try:
                    measured = measured[:3] + (saved_bytes_per_sample(net.train(), sample_shape), )
                except Exception as err:  # a forward the meta device cannot run (data-dependent shapes, .item())
                    warn_early(f'{key}: its forward could not run on the meta device ({type(err).__name__}: {err}); '
                               'its activations are not counted in the memory checked at start')
    except Exception as err:  # the real build, later, says what is wrong; here only the bound is lost
        warn_early(f'{key}: could not be built on the meta device to bound its memory ({type(err).__name__}: '
                   f'{err}); its memory is not checked at start')
        measured = 0, 0, 0, 0
    _measured[cache] = measured
    return measured


def demand(opt: Mapping, size: Optional[Tuple[int, int]]) -> Tuple[int, int, list]:
    """(bytes of the networks and their optimizer state, bytes per training sample, [(key, options, weights,
    trainable, LoRA bytes)]) of a run's options."""
    is_train = bool(opt.get('is_train'))
    model_cls = MODEL_REGISTRY.get(opt['model_type'])
    fixed, per_sample, nets = 0, 0, []
    for key, net_opt in opt.items():
        if not key.startswith('network_') or not isinstance(net_opt, Mapping):
            continue
        train_opt = opt.get('train') if is_train else None
        weights, trainable, lora, activations = measure_network(key, net_opt, train_opt, size, model_cls,
                                                                input_shape(key, net_opt, opt, size))
        fixed += weights + (3 * trainable if is_train else 0)  # gradients and AdamW's exp_avg, exp_avg_sq
        per_sample += activations
        nets.append((key, net_opt, weights, trainable, lora))
    if is_train:
        per_sample += 3 * 4 * size[0] * size[1] if size else 0  # the ground truth the loader makes (float32)
        per_sample += 8  # the batch sampler's index list
    return fixed, per_sample, nets


def check_memory(opt: Mapping) -> None:
    """The run's networks, their optimizer state and a training batch fit the memory of one process
    (``usable_memory``); else an OptionError naming the option, its value and what fits."""
    is_train = bool(opt.get('is_train'))
    train_set = opt['datasets'].get('train') if is_train else None
    size = sample_size(train_set) if train_set else None
    batch = train_set['batch_size_per_gpu'] if train_set else 0
    fixed, per_sample, nets = demand(opt, size)
    usable, where = usable_memory(opt)
    over = f'over the {gib(usable)} this run may use ({where})'
    if fixed + min(batch, 1) * per_sample > usable:  # not even one sample: the network's options are too large
        key, net_opt, weights, trainable, lora = max(nets, key=lambda n: n[2] + 3 * n[3] * is_train)
        size_of = f'{gib(weights)} of weights' + (f' ({gib(weights + 3 * trainable)} with the gradients and AdamW\'s '
                                                  'state of the trainable ones)' if is_train else '')
        need = f'; {gib(fixed + batch * per_sample)} with batch_size_per_gpu {batch:,}' if batch else ''
        rank = net_opt.get('lora_rank')
        if isinstance(rank, int) and rank > 1 and 2 * lora > weights:
            # LoRA's weights and activations are linear in its rank: the rank that fits, from rank 1's demand
            fixed1, per_sample1, _ = demand(dict(opt, **{key: dict(net_opt, lora_rank=1)}), size)
            total, total1 = fixed + batch * per_sample, fixed1 + batch * per_sample1
            fit = int(1 + (usable - total1) * (rank - 1) // (total - total1)) if usable >= total1 else 0
            fits = f'at most lora_rank {fit:,} fits' if fit >= 1 else 'not even lora_rank 1 fits'
            with_batch = f' with batch_size_per_gpu {batch:,}' if batch else ''
            raise OptionError(f'{key}.lora_rank: {rank:,} makes {net_opt["type"]} {size_of}, mostly LoRA{need}, '
                              f'{over}; {fits}{with_batch}')
        raise OptionError(f'{key}: {net_opt["type"]} with these options has {size_of}{need}, {over}')
    if not train_set:
        return
    if fixed + batch * per_sample > usable:
        fit = (usable - fixed) // per_sample
        raise OptionError(
            f'datasets.train.batch_size_per_gpu: {batch:,} samples per batch need at least '
            f'{gib(fixed + batch * per_sample)} ({per_sample / 2**20:,.1f} MiB per sample, {gib(fixed)} for the '
            f'networks and their optimizer state), {over}; ' +
            (f'at most {fit:,} fit' if fit >= 1 else 'not even one sample fits'))
    check_epoch_indices(train_set.get('dataset_enlarge_ratio', 1), None, usable, where)


def check_epoch_indices(ratio: float, length: Optional[int], usable: int, where: str) -> None:
    """The sampler's ``length * ratio`` indices of an epoch fit ``usable`` bytes (``length`` None: at start, the
    dataset not yet read, at least one sample); else an OptionError with the largest ratio that fits."""
    indices = math.ceil((length or 1) * ratio)
    if indices * BYTES_PER_INDEX > usable:
        fit = usable // BYTES_PER_INDEX // (length or 1)
        raise OptionError(f'datasets.train.dataset_enlarge_ratio: {ratio:,g} makes {indices:,g} samples an epoch' +
                          (f' ({length:,} in the dataset)' if length else ' or more') +
                          f', whose index list ({BYTES_PER_INDEX} bytes each) needs at least '
                          f'{gib(indices * BYTES_PER_INDEX)}, over the {gib(usable)} this run may use ({where}); ' +
                          (f'at most {fit:,} fits' if length else f'no ratio above {fit:,} fits any dataset'))


def sampler_indices_fit(dataset_length: int, ratio: float, num_replicas: int) -> None:
    """``check_epoch_indices`` when the sampler is made (the dataset's length known; every rank draws the whole
    permutation)."""
    usable, where = usable_memory({'num_gpu': 0, 'dist': num_replicas > 1})
    check_epoch_indices(ratio, dataset_length, usable, where)


def cap_workers(opt: Mapping) -> None:
    """``datasets.train.num_worker_per_gpu`` capped at this process's cores per GPU, with a warning."""
    dataset = opt['datasets'].get('train') if opt.get('is_train') else None
    workers = (dataset or {}).get('num_worker_per_gpu')
    if not workers:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1
    # BasicSR starts workers * num_gpu per process (one GPU each under torchrun)
    sharing = int(os.environ.get('LOCAL_WORLD_SIZE', '1')) if opt.get('dist') else max(1, opt.get('num_gpu') or 0)
    limit = max(1, cores // sharing)
    if workers > limit:
        dataset['num_worker_per_gpu'] = limit
        warn_early(f'datasets.train.num_worker_per_gpu: {workers:,} data-loader workers per GPU, but this run has '
                   f'{cores} CPU core(s)' + (f' for {sharing} GPUs or processes' if sharing > 1 else '') +
                   f': using {limit} (more add processes and memory, not speed)')


@contextlib.contextmanager
def logger_left_unset():
    """BasicSR's root logger as it was: building a network may log, and BasicSR's ``get_root_logger`` sets its
    handlers up once, so a first call here would leave the run's later call (with the log file) without its file."""
    log = logging.getLogger('basicsr')
    was_set, handlers, propagate, level = 'basicsr' in basicsr_logger.initialized_logger, log.handlers[:], \
        log.propagate, log.level
    try:
        yield
    finally:
        if not was_set:
            basicsr_logger.initialized_logger.pop('basicsr', None)
            log.handlers[:], log.propagate = handlers, propagate
            log.setLevel(level)


class GPUMemoryError(OptionError):
    """The run asked more of its GPU than was free (one line, exit status 2: the options must change)."""


def is_out_of_device_memory(err: BaseException) -> bool:
    """Whether ``err`` is an allocation failure on a GPU: torch's OutOfMemoryError, or cuDNN/cuBLAS failing to
    allocate a workspace (a RuntimeError naming it)."""
    text = str(err)
    return isinstance(err, torch.cuda.OutOfMemoryError) or isinstance(err, RuntimeError) and any(
        s in text for s in ('out of memory', 'CUDNN_STATUS_ALLOC_FAILED', 'CUBLAS_STATUS_ALLOC_FAILED'))


def out_of_gpu_memory(err: BaseException) -> Optional[GPUMemoryError]:
    """A GPUMemoryError saying what to change, for an allocation failure on a GPU (``is_out_of_device_memory``);
    None for any other error. torch's figures are kept up to its 'is free.' (what was asked, the GPU, what is free)."""
    if not is_out_of_device_memory(err):
        return None
    text = ' '.join(str(err).split())
    figures = text[:text.index('is free.') + len('is free.')] if 'is free.' in text else text[:300]
    return GPUMemoryError(
        f'out of GPU memory ({figures}): the run needs more of the GPU than is free (another process may hold some); '
        'a training run fits with a lower datasets:train:batch_size_per_gpu (train:accumulate_grad_batches keeps the '
        'batch), network_g:gradient_checkpointing: [idm, vae_encoder, vae_decoder] or network_g:precision: bf16, a '
        'test run with smaller images; tola-estimate-memory -opt FILE says what fits')


def bound_resources(opt: Mapping) -> None:
    """Every bound of this module, on the merged options with ``num_gpu`` resolved, before any folder is made."""
    cap_workers(opt)
    with logger_left_unset():
        check_memory(opt)
