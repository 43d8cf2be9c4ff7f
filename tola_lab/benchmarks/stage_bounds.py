"""What bounds each stage of a route: its multiply-adds at the machine's matmul ceiling (compute), the bytes it must
move at the machine's copy bandwidth (memory bandwidth), or neither: a stage that runs more than ``KERNEL_SLACK``
times above the larger of the two (its roofline time) is bound by the runtime's kernels.

The bytes are counted on the torch network (``stage_traffic``): every call of a layer with weights (convolution,
linear, normalisation) reads its inputs and its weights and writes its output once, in the route's precision. That
is what a layer moves at least when its activations do not stay in the caches; fused kernels move no more.
"""
from typing import Dict, Optional

import torch

from tola_lab.benchmarks.stage_timing import StageTimer, restore
from tola_plugin.archs.precision import PRECISIONS, precision_dtype
from tola_plugin.archs.stages import LABEL

#: above this many times its roofline time a stage is bound by the runtime's kernels (the issue's bound for the
#: default route against its compute ideal)
KERNEL_SLACK = 1.5
#: the stage of the benchmark's timers each of ``complexity.route_macs``'s counts belongs to
MACS_STAGE = {
    'TransOCR encoder': LABEL['text_prior'], 'VAE encoder': LABEL['vae_encoder'], 'IDM': LABEL['idm'],
    'LRC': LABEL['lrc'], 'VAE decoder': LABEL['vae_decoder']
}
BYTES_PER_ELEMENT = {p: precision_dtype(p).itemsize for p in PRECISIONS if p != 'auto'}


def stage_macs(macs: Dict[str, int]) -> Dict[str, int]:
    """``complexity.route_macs``'s counts by the benchmark's stage names."""
    out: Dict[str, int] = {}
    for name, count in macs.items():
        out[MACS_STAGE[name]] = out.get(MACS_STAGE[name], 0) + int(count)
    return out


def stage_traffic(net, lq) -> Dict[str, int]:
    """Elements each stage of one restore of the torch network ``net`` on ``lq`` moves (module docstring): per call
    of a layer with weights, its tensor inputs, its own parameters and buffers and its tensor outputs."""
    timer = StageTimer(net)
    elements: Dict[str, int] = {}

    def count(module, inputs, output):
        if timer.current is None:
            return
        outputs = output if isinstance(output, (tuple, list)) else (output, )
        moved = sum(t.numel() for t in list(inputs) + list(outputs) if isinstance(t, torch.Tensor))
        moved += sum(t.numel() for t in module.parameters(recurse=False))
        moved += sum(t.numel() for t in module.buffers(recurse=False))
        elements[timer.current] = elements.get(timer.current, 0) + moved

    hooks = [
        module.register_forward_hook(count) for module in net.modules()
        if not next(module.children(), None) and next(module.parameters(recurse=False), None) is not None
    ]
    try:
        restore(net, timer, lq)
    finally:
        timer.close()
        for hook in hooks:
            hook.remove()
    return elements


def stage_bounds(stage_seconds: Dict[str, float], precisions: Dict[str, str], macs: Dict[str, int],
                 elements: Dict[str, int], ceiling_gflops: Dict[str, float], copy_gbps: float) -> Dict[str, Dict]:
    """Per stage of one route's row: {'seconds', 'compute_s' (2 x MACs at the ceiling of the stage's precision,
    ``precisions``: stage -> 'fp32', 'bf16' or 'fp16'), 'memory_s' (its bytes in that precision at ``copy_gbps``),
    'x_roofline' (seconds over the larger of the two), 'bound': 'compute', 'memory bandwidth' or 'kernels'} (module
    docstring). Stages that took no time are left out."""
    out = {}
    for stage, seconds in stage_seconds.items():
        if not seconds > 0:
            continue
        dtype = precisions[stage]
        ceiling = ceiling_gflops.get(dtype)
        compute = 2 * macs.get(stage, 0) / (ceiling * 1e9) if ceiling else 0.0
        memory = elements.get(stage, 0) * BYTES_PER_ELEMENT[dtype] / (copy_gbps * 1e9) if copy_gbps else 0.0
        roofline = max(compute, memory)
        over: Optional[float] = seconds / roofline if roofline > 0 else None
        if over is None or over > KERNEL_SLACK:
            bound = 'kernels'
        else:
            bound = 'compute' if compute >= memory else 'memory bandwidth'
        out[stage] = {'seconds': seconds, 'compute_s': compute, 'memory_s': memory, 'x_roofline': over, 'bound': bound}
    return out
