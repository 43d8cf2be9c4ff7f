"""Bytes of a network's tensors on any device (the meta device included: no weights, no compute): its weights
(``weight_bytes``, ``trainable_bytes``) and what autograd keeps for the backward pass (``SavedTensors`` per stage,
``saved_bytes_per_sample`` for one network). Written here because torch offers the hook (``saved_tensors_hooks``) but
no counter; used by the memory estimate (models/) and the launchers' start-up bound (basicsr_glue/)."""
import contextlib
import itertools
from typing import Dict, Iterable, List, Mapping, Sequence

import torch
from torch import nn


def storage_key(t: torch.Tensor) -> int:
    """Identity of a tensor's storage (views share it; torch keeps one Python storage object per storage)."""
    return id(t.untyped_storage())


def tensor_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


def parameter_storages(*modules: nn.Module) -> List[int]:
    return [storage_key(t) for m in modules for t in itertools.chain(m.parameters(), m.buffers())]


def weight_bytes(*modules: nn.Module) -> int:
    return sum(tensor_bytes(t) for m in modules for t in itertools.chain(m.parameters(), m.buffers()))


def trainable_bytes(net: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in net.parameters() if p.requires_grad)


class SavedTensors:
    """Bytes of the tensors autograd saves for the backward pass inside the block, per stage (the component whose
    forward is running: ``stages`` maps module -> name, everything else counts as ``other``), each storage once,
    ``exclude`` (parameter storages) never."""

    def __init__(self, stages: Mapping[nn.Module, str], exclude: Iterable[int]):
        self.stages, self.exclude = stages, set(exclude)
        self.by_stage: Dict[str, int] = {}
        self._seen: Dict[int, object] = {}
        self._current = ['other']

    def _pack(self, t):
        key = storage_key(t)
        if key not in self.exclude and key not in self._seen:
            self._seen[key] = t.untyped_storage()  # held: a freed storage's id could be reused
            stage = self._current[-1]
            self.by_stage[stage] = self.by_stage.get(stage, 0) + tensor_bytes(t)
        return t

    def _leave(self, module, args, output) -> None:  # a forward hook returning a value would replace the output
        self._current.pop()

    @contextlib.contextmanager
    def __call__(self):
        handles = []
        for module, name in self.stages.items():
            handles.append(module.register_forward_pre_hook(lambda m, a, name=name: self._current.append(name)))
            handles.append(module.register_forward_hook(self._leave))
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
                yield self
        finally:
            for handle in handles:
                handle.remove()


def saved_bytes_per_sample(net: nn.Module, sample_shape: Sequence[int]) -> int:
    """Bytes ``net``'s forward keeps for the backward pass per sample of ``sample_shape`` (C, H, W), on the device of
    its weights: batch 2 - batch 1, so what does not grow with the batch is not counted."""
    device = next(itertools.chain(net.parameters(), net.buffers()), torch.empty(0)).device
    total = []
    for batch in (1, 2):
        counter = SavedTensors({}, parameter_storages(net))
        with counter():
            net(torch.zeros(batch, *sample_shape, device=device, requires_grad=True))
        total.append(sum(counter.by_stage.values()))
    return total[1] - total[0]
