"""The weights of the stages another runtime serves: while OpenVINO's worker serves stages, this process holds none of
their weights (one copy of each weight, the worker's); torch reads them back from the merged file, memory-mapped, only
for as long as it runs them (``StageWeights``)."""
import contextlib
import itertools
from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence

import torch
from torch import nn

from tola_plugin.checkpoints.tola import MERGED_FORMAT
from tola_plugin.runtime.resident_memory import drop_file_pages
from tola_plugin.utils.checkpoint_io import open_safetensors


@dataclass
class _Slot:
    """One weight of a served module: where it sits (``owner``'s parameter or buffer ``name``) and its key in the
    merged file."""
    owner: nn.Module
    name: str
    key: str
    parameter: bool
    requires_grad: bool


class StageWeights:
    """The weights of ``modules`` (the torch modules of the stages another runtime serves; submodules of ``net``,
    which was loaded from the merged file ``merged``; None: none are managed), dropped from this process while that
    runtime serves them and read back when torch runs them.

    ``release()`` puts meta tensors in their place (the same shapes and dtypes, no storage: a torch call on them is
    an error, never a silent result); ``load()`` reads them from the merged file through a memory map of their own,
    which the next ``release()`` unmaps, so the pages torch touched leave this process; ``loaded()`` is a block with
    them loaded. Only weights that are in the file as they are in the network are managed (a weight cast or moved
    since loading stays as it is)."""

    def __init__(self, net: nn.Module, modules: Iterable[nn.Module], merged: Optional[str]):
        self.merged, self.released = merged, False
        self.slots: List[_Slot] = []
        if merged is None:  # nothing to read them back from: they stay
            return
        owned = {id(t) for m in modules for t in itertools.chain(m.parameters(), m.buffers())}
        persistent = net.state_dict(keep_vars=True)
        with open_safetensors(merged, 'merged TOLA model', MERGED_FORMAT, 'tools/export_merged.py') as (f, _):
            in_file = set(f.keys())
            for prefix, owner in net.named_modules():
                tensors = itertools.chain(((n, t, True) for n, t in owner.named_parameters(recurse=False)),
                                          ((n, t, False) for n, t in owner.named_buffers(recurse=False)))
                for name, tensor, parameter in tensors:
                    key = f'{prefix}.{name}' if prefix else name
                    if id(tensor) not in owned or persistent.get(key) is not tensor or key not in in_file:
                        continue
                    stored = f.get_slice(key)
                    if tensor.device.type != 'cpu' or tuple(stored.get_shape()) != tuple(tensor.shape) \
                            or _TORCH_DTYPES.get(stored.get_dtype()) != tensor.dtype:
                        continue
                    self.slots.append(_Slot(owner, name, key, parameter, tensor.requires_grad))

    def _put(self, slot: _Slot, tensor: torch.Tensor) -> None:  # managed buffers are persistent (the state dict's)
        if slot.parameter:
            slot.owner.register_parameter(slot.name, nn.Parameter(tensor, requires_grad=slot.requires_grad))
        else:
            slot.owner.register_buffer(slot.name, tensor, persistent=True)

    def _get(self, slot: _Slot) -> torch.Tensor:
        return getattr(slot.owner, slot.name)

    def release(self) -> None:
        """Drop the weights from this process: their pages of the merged file's mapping (loading touched them) and
        the tensors (meta tensors in their place)."""
        drop_mapped_pages([self._get(slot) for slot in self.slots], self.merged)
        for slot in self.slots:
            self._put(slot, torch.empty_like(self._get(slot), device='meta'))
        self.released = True

    def load(self) -> None:
        """Read the weights back from the merged file (memory-mapped: a page is read when torch first uses it)."""
        if not self.released:
            return
        with open_safetensors(self.merged, 'merged TOLA model', MERGED_FORMAT, 'tools/export_merged.py') as (f, _):
            for slot in self.slots:
                self._put(slot, f.get_tensor(slot.key))
        self.released = False

    @contextlib.contextmanager
    def loaded(self):
        """A block with the weights loaded; released again after it if they were released before."""
        was_released = self.released
        self.load()
        try:
            yield
        finally:
            if was_released:
                self.release()


def drop_mapped_pages(tensors: Sequence[torch.Tensor], path: str) -> int:
    """Drop this process's resident pages of the memory-mapped file ``path`` that lie wholly inside ``tensors``
    (``resident_memory.drop_file_pages``); returns the bytes dropped. Creating a tensor of a memory-mapped safetensors
    file reads the pages around its start (on this page's machine up to 2 MiB a tensor: 0.67 GiB of the full-size
    merged file), which would stay resident for nothing while another runtime serves those weights. Linux only (a
    no-op elsewhere)."""
    ranges = [(t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors
              if t.device.type == 'cpu' and t.numel()]
    return drop_file_pages(path, ranges)


#: safetensors' dtype names -> torch's
_TORCH_DTYPES = {
    'F64': torch.float64, 'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16, 'I64': torch.int64,
    'I32': torch.int32, 'I16': torch.int16, 'I8': torch.int8, 'U8': torch.uint8, 'BOOL': torch.bool
}
