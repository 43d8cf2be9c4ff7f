"""Which model a runtime decision is about, where a child process finds its stages' modules (IDM, VAE,
TransOCR), and the weights of the stages another runtime serves.

A network loaded from a merged file is that file: its SHA-256 names it (remembered with the file's size, mtime and
inode, so an unchanged file is hashed once) and a child reads the stages from it (memory-mapped, as
``TOLANet.load_for_inference`` does). Any other network (built from an option file and an adaptation checkpoint,
LoRA merged in memory) is named by the hash of its stage tensors and, when a child needs its modules, exported once
to a private folder with diffusers' ``save_pretrained`` (safetensors + config; TransOCR with ``save_transocr``),
which the child reads back.

``StageWeights``: while OpenVINO's worker serves stages, this process holds none of their weights (one copy of each
weight, the worker's); torch reads them back from the merged file, memory-mapped, only for as long as it runs them.
"""
import contextlib
import ctypes
import hashlib
import itertools
import mmap
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import nn

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.backbone_builder import load_transocr
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.checkpoints.tola import MERGED_FORMAT
from tola_plugin.checkpoints.transocr import save_transocr
from tola_plugin.utils.atomic_files import read_json_dict, write_json
from tola_plugin.utils.checkpoint_io import open_safetensors
from tola_plugin.utils.user_cache import cache_path

HASHES = 'file_hashes.json'  # merged file -> SHA-256, reused while its size, mtime and inode are unchanged
CHUNK = 1 << 24
TRANSOCR_FILE = 'transocr.safetensors'  # the TransOCR of an exported source (``save_transocr``)


def sha256_of(path: str) -> str:
    """SHA-256 of the file ``path`` (read in 16 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(CHUNK), b''):
            digest.update(block)
    return digest.hexdigest()


def _stat_key(path: str) -> Dict:
    st = os.stat(path)
    return {'size': st.st_size, 'mtime_ns': st.st_mtime_ns, 'inode': st.st_ino, 'device': st.st_dev}


def file_sha256(path: str) -> str:
    """SHA-256 of the file ``path``; remembered in the cache (``HASHES``) with its size, mtime and inode, so an
    unchanged file is hashed once (a 4 GB merged file takes a few seconds). Without a writable cache: hashed."""
    real = os.path.realpath(path)
    try:
        memo_path = cache_path(HASHES)
    except OSError:
        return sha256_of(real)
    memo = read_json_dict(memo_path) or {}
    stat = _stat_key(real)
    known = memo.get(real)
    if isinstance(known, dict) and {k: known.get(k) for k in stat} == stat and isinstance(known.get('sha256'), str):
        return known['sha256']
    digest = sha256_of(real)
    memo[real] = dict(stat, sha256=digest)
    try:
        write_json(memo_path, memo)
    except OSError:
        pass  # a read-only cache: hashed again next time
    return digest


def tensors_sha256(modules: Sequence[nn.Module]) -> str:
    """SHA-256 of the names, dtypes, shapes and values of every tensor of ``modules``."""
    digest = hashlib.sha256()
    for index, module in enumerate(modules):
        for name, tensor in sorted(module.state_dict().items()):
            t = tensor.detach().cpu().contiguous()
            digest.update(f'{index}.{name}:{t.dtype}:{tuple(t.shape)};'.encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b'')  # 0-d too
    return digest.hexdigest()


@dataclass
class StageSource:
    """The model of a runtime decision: ``digest`` names it; ``merged`` is its merged file, if any. ``idm``, ``vae``
    and ``transocr`` are the network's torch modules (the parent's; a child gets them through ``spec``)."""
    idm: nn.Module
    vae: nn.Module
    transocr: nn.Module
    merged: Optional[str] = None
    _digest: Optional[str] = None
    _folder: Optional[str] = None

    @property
    def digest(self) -> str:
        """SHA-256 of the merged file, else of the stage tensors (computed on first use)."""
        if self._digest is None:
            modules = [self.idm, self.vae, self.transocr]
            self._digest = file_sha256(self.merged) if self.merged else tensors_sha256(modules)
        return self._digest

    def spec(self) -> Dict:
        """What a child needs to load the stages (JSON): the merged file, else a folder they are exported to (once
        per process, removed by ``close``)."""
        if self.merged:
            return {'merged': os.path.abspath(self.merged)}
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix='tola-stages-')
            self.idm.save_pretrained(os.path.join(self._folder, 'idm'), safe_serialization=True)
            self.vae.save_pretrained(os.path.join(self._folder, 'vae'), safe_serialization=True)
            save_transocr(self.transocr, os.path.join(self._folder, TRANSOCR_FILE))
        return {'folder': self._folder, 'idm_class': type(self.idm).__name__, 'vae_class': type(self.vae).__name__}

    def close(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def load_stages(spec: Dict) -> Tuple[nn.Module, nn.Module, int]:
    """In a child: (idm, vae, context_dim) of a ``StageSource.spec``, fp32, eval, on the CPU."""
    return load_modules(spec, with_transocr=False)[:3]


def load_modules(spec: Dict, with_transocr: bool = True) -> Tuple[nn.Module, nn.Module, int, Optional[nn.Module]]:
    """In a child: (idm, vae, context_dim, transocr or None without ``with_transocr``) of a ``StageSource.spec``,
    fp32, eval, on the CPU."""
    if 'merged' in spec:  # the merged file loads whole
        net = TOLANet.load_for_inference(spec['merged'])
        return net.idm, net.vae, int(net.context_dim), net.transocr.eval()
    idm = ARCH_REGISTRY.get(spec['idm_class']).from_pretrained(os.path.join(spec['folder'], 'idm'))
    vae = ARCH_REGISTRY.get(spec['vae_class']).from_pretrained(os.path.join(spec['folder'], 'vae'))
    transocr = load_transocr(os.path.join(spec['folder'], TRANSOCR_FILE)) if with_transocr else None
    return idm.eval(), vae.eval(), int(idm.config.cross_attention_dim), transocr


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

    def _put(self, slot: _Slot, tensor: torch.Tensor) -> None:
        if slot.parameter:
            slot.owner._parameters[slot.name] = nn.Parameter(tensor, requires_grad=slot.requires_grad)
        else:
            slot.owner._buffers[slot.name] = tensor

    def _get(self, slot: _Slot) -> torch.Tensor:
        return (slot.owner._parameters if slot.parameter else slot.owner._buffers)[slot.name]

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
    (madvise MADV_DONTNEED: a page used again is read from the file again); returns the bytes dropped. Creating a
    tensor of a memory-mapped safetensors file reads the pages around its start (on this page's machine up to 2 MiB a
    tensor: 0.67 GiB of the full-size merged file), which would stay resident for nothing while another runtime serves
    those weights. Only pages of ``path``'s mappings are dropped, none of any other memory. Linux only (a no-op
    elsewhere)."""
    if not os.path.exists('/proc/self/maps'):
        return 0
    real, mapped = os.path.realpath(path), []
    with open('/proc/self/maps', encoding='utf-8') as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].rstrip('\n') == real:
                mapped.append(tuple(int(x, 16) for x in fields[0].split('-')))
    page, dropped = mmap.PAGESIZE, 0
    for tensor in tensors:
        if tensor.device.type != 'cpu' or not tensor.numel():
            continue
        start = tensor.data_ptr()
        end = start + tensor.numel() * tensor.element_size()
        first, last = -(-start // page) * page, end // page * page  # the whole pages inside the tensor
        if last > first and any(lo <= first and last <= hi for lo, hi in mapped):
            if _LIBC.madvise(first, last - first, MADV_DONTNEED) == 0:
                dropped += last - first
    return dropped


MADV_DONTNEED = 4  # as openvino_worker.PageTrimmer's: that script imports nothing of the package
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

#: safetensors' dtype names -> torch's
_TORCH_DTYPES = {
    'F64': torch.float64, 'F32': torch.float32, 'F16': torch.float16, 'BF16': torch.bfloat16, 'I64': torch.int64,
    'I32': torch.int32, 'I16': torch.int16, 'I8': torch.int8, 'U8': torch.uint8, 'BOOL': torch.bool
}
