"""The body of tola-estimate-memory (docs/training_gpus.md): per gradient-checkpointing choice, the largest batch per
GPU of each capacity, from ``models/memory_estimate.py``'s measurements; an option file's report (Markdown, JSON)."""
import itertools
import json
import os
from typing import Dict, List, Mapping, Optional, Sequence

from tola_plugin.archs.tola_adaptation import CHECKPOINTABLE
from tola_plugin.models import memory_estimate as M
from tola_plugin.options.checks import check_typed_block
from tola_plugin.options.reader import read_option_file
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.tensor_memory import trainable_bytes, weight_bytes

GIB = 2**30
CAPACITIES_GB = (24, 40, 48, 80, 96)
RESERVE = 0.1  # share of a GPU's memory left to the CUDA context, workspaces and fragmentation


def largest_batch(fixed: float, per_sample: float, capacity_gib: float, reserve: float = RESERVE) -> int:
    """Largest batch b with fixed + b * per_sample <= (1 - reserve) * capacity (0 when not even one fits)."""
    room = (1 - reserve) * capacity_gib * GIB - fixed
    return max(int(room // per_sample), 0) if per_sample > 0 else 0


def checkpoint_choices() -> List[tuple]:
    """Every subset of ``CHECKPOINTABLE``, from none to all."""
    return [c for n in range(len(CHECKPOINTABLE) + 1) for c in itertools.combinations(CHECKPOINTABLE, n)]


def estimate(opt: Mapping, size: Sequence[int] = (128, 512), capacities: Sequence[float] = CAPACITIES_GB,
             reserve: float = RESERVE, choices: Optional[Sequence[tuple]] = None) -> Dict:
    """Every figure of the report for a training option dict (``network_g``, ``train``): weights, optimizer
    state, saved activations per sample by stage, and per checkpointing choice the peak per sample and the
    largest batch per GPU that fits each capacity (in GB as GPUs are sold, read as GiB); the same for inference.
    Per-sample figures are the difference between batches 2 and 1 (both measured)."""
    net = M.meta_network(opt['network_g'])
    losses = M.meta_losses(opt.get('train') or {})
    weights = weight_bytes(net, *losses.values())
    optimizer = 3 * trainable_bytes(net)  # gradients + AdamW's exp_avg and exp_avg_sq
    saved1, saved2 = M.saved_activations(net, losses, size, 1), M.saved_activations(net, losses, size, 2)
    result = {
        'size': list(size), 'weights_bytes': weights, 'optimizer_state_bytes': optimizer, 'reserve': reserve,
        'capacities_gb': list(capacities), 'saved_per_sample': {k: saved2[k] - saved1.get(k, 0)
                                                                for k in saved2}, 'training': [], 'inference': {}
    }
    for choice in choices if choices is not None else checkpoint_choices():
        one, two = M.peak_training(net, losses, size, 1, choice), M.peak_training(net, losses, size, 2, choice)
        per_sample, fixed = two - one, weights + optimizer + 2 * one - two
        result['training'].append({
            'gradient_checkpointing': list(choice), 'peak_batch1_bytes': one, 'peak_batch2_bytes': two,
            'per_sample_bytes': per_sample,
            'largest_batch': [largest_batch(fixed, per_sample, c, reserve) for c in capacities]
        })
    net.prepare_for_inference()  # LoRA merged, MoM image branch dropped: what tola-infer runs
    inference_weights = weight_bytes(net)
    one, two = M.peak_inference(net, size, 1), M.peak_inference(net, size, 2)
    result['inference'] = {
        'weights_bytes': inference_weights, 'peak_batch1_bytes': one, 'peak_batch2_bytes': two,
        'per_sample_bytes': two - one,
        'largest_batch': [largest_batch(inference_weights + 2 * one - two, two - one, c, reserve) for c in capacities]
    }
    return result


def report_markdown(result: Mapping) -> str:
    """The estimate as Markdown: weights, saved activations by stage, and the table of largest batches."""
    gib = lambda b: f'{b / GIB:.2f}'  # noqa: E731
    caps = ' | '.join(f'{c:g} GB' for c in result['capacities_gb'])
    saved = result['saved_per_sample']
    lines = [
        f'Image {result["size"][0]}x{result["size"][1]}, fp32. Weights {gib(result["weights_bytes"])} GiB (TOLANet '
        f'and LPIPS-VGG), gradients + AdamW state {gib(result["optimizer_state_bytes"])} GiB.', '',
        'Saved activations per training sample (GiB): ' + ', '.join(f'{k} {gib(v)}' for k, v in saved.items()) +
        f'; total {gib(sum(saved.values()))} ("other": Algorithm 1\'s arithmetic, quant_conv, L1).', '',
        f'| gradient_checkpointing | peak GiB / sample | largest batch per GPU: {caps} |',
        '|---|---:|' + '---:|' * len(result['capacities_gb'])
    ]
    for row in result['training']:
        name = '[' + ', '.join(row['gradient_checkpointing']) + ']' if row['gradient_checkpointing'] else 'none'
        lines.append(f'| training, {name} | {gib(row["per_sample_bytes"])} | ' +
                     ' | '.join(str(b) for b in row['largest_batch']) + ' |')
    inf = result['inference']
    lines.append(f'| inference (weights {gib(inf["weights_bytes"])} GiB) | {gib(inf["per_sample_bytes"])} | ' +
                 ' | '.join(str(b) for b in inf['largest_batch']) + ' |')
    lines += [
        '', f'A batch fits when weights + optimizer state + peak <= {1 - result["reserve"]:.0%} of the GPU '
        '(the rest for the CUDA context, workspaces and fragmentation, not measured).'
    ]
    return '\n'.join(lines)


def estimate_option_file(opt_path: str, size: Sequence[int] = (128, 512), capacities: Sequence[float] = CAPACITIES_GB,
                         reserve: float = RESERVE, json_path: Optional[str] = None) -> int:
    """``estimate`` for the training option file ``opt_path``: prints the report and writes every figure to
    ``json_path`` (JSON) when given. -> 0. UsageError for a missing file or one without ``network_g``, a size that
    is not a positive multiple of 8, a reserve outside [0, 1); ``network_g`` is checked like the launchers do."""
    from basicsr.utils.registry import ARCH_REGISTRY
    if not os.path.isfile(opt_path):
        raise UsageError(f'-opt {opt_path!r}: no such option file')
    if any(s <= 0 or s % 8 for s in size):
        raise UsageError(f'--size {size}: height and width must be positive multiples of 8')
    if not 0 <= reserve < 1:
        raise UsageError(f'--reserve {reserve}: expected a share in [0, 1)')
    opt = read_option_file(opt_path)
    if 'network_g' not in opt:
        raise UsageError(f'-opt {opt_path!r}: not an option file with network_g')
    check_typed_block(opt['network_g'], ARCH_REGISTRY, 'network_g')
    result = estimate(opt, size=size, capacities=capacities, reserve=reserve)
    result['option_file'] = opt_path
    print(f'{opt_path}: memory of one training iteration and of inference, measured on the meta device\n')
    print(report_markdown(result))
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        with open(json_path, 'w', encoding='utf-8') as f:
            json.dump(result, f, indent=1)
    return 0
