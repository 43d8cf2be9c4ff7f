"""Which model a runtime decision is about: a merged file is named by its SHA-256 (remembered with the file's size,
mtime and inode, so an unchanged file is hashed once), any other network by the hash of its stage tensors."""
import hashlib
import os
from typing import Dict, Sequence

import torch
from torch import nn

from tola_plugin.utils.user_cache import JsonCache

#: merged file -> SHA-256, reused while its size, mtime and inode are unchanged
HASHES = JsonCache('file_hashes.json', 'tola_plugin.file_hashes/2', max_bytes=16 << 20)
CHUNK = 1 << 24


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
    unchanged file is hashed once (a 4 GB merged file takes a few seconds). Without a writable cache: hashed once per
    process."""
    real = os.path.realpath(path)
    stat = _stat_key(real)
    known = HASHES.get(real)
    if isinstance(known, dict) and {k: known.get(k) for k in stat} == stat and isinstance(known.get('sha256'), str):
        return known['sha256']
    digest = sha256_of(real)
    HASHES.put(real, dict(stat, sha256=digest))  # a read-only cache: hashed again by the next process
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
