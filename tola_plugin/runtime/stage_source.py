"""Which model a runtime decision is about, and where a child process finds its stages' modules (IDM, VAE, TransOCR).

A network loaded from a merged file is that file: its SHA-256 names it (remembered with the file's size, mtime and
inode, so an unchanged file is hashed once) and a child reads the stages from it (memory-mapped, as
``TOLANet.load_for_inference`` does). Any other network (built from an option file and an adaptation checkpoint,
LoRA merged in memory) is named by the hash of its stage tensors and, when a child needs its modules, exported once
to a private folder with diffusers' ``save_pretrained`` (safetensors + config; TransOCR with ``save_transocr``),
which the child reads back.
"""
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.backbone_builder import load_transocr
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.checkpoints.transocr import save_transocr
from tola_plugin.utils.atomic_files import read_json_dict, write_json
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
            digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b'')
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
    return load_modules(spec)[:3]


def load_modules(spec: Dict) -> Tuple[nn.Module, nn.Module, int, nn.Module]:
    """In a child: (idm, vae, context_dim, transocr) of a ``StageSource.spec``, fp32, eval, on the CPU."""
    if 'merged' in spec:
        net = TOLANet.load_for_inference(spec['merged'])
        return net.idm, net.vae, int(net.context_dim), net.transocr.eval()
    idm = ARCH_REGISTRY.get(spec['idm_class']).from_pretrained(os.path.join(spec['folder'], 'idm'))
    vae = ARCH_REGISTRY.get(spec['vae_class']).from_pretrained(os.path.join(spec['folder'], 'vae'))
    transocr = load_transocr(os.path.join(spec['folder'], TRANSOCR_FILE))
    return idm.eval(), vae.eval(), int(idm.config.cross_attention_dim), transocr
