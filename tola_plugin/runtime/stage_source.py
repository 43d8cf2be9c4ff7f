"""Where a child process finds the modules of the stages (IDM, VAE, TransOCR) of the model a runtime decision is
about (``StageSource``), and how it loads them (``load_modules``).

A network loaded from a merged file is that file: a child reads the stages from it (memory-mapped, as
``TOLANet.load_for_inference`` does). Any other network (built from an option file and an adaptation checkpoint,
LoRA merged in memory) is, when a child needs its modules, exported once to a private folder with diffusers'
``save_pretrained`` (safetensors + config; TransOCR with ``save_transocr``), which the child reads back. The model's
name in the caches is its ``digest`` (``model_digest.py``).
"""
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from torch import nn

from basicsr.utils.registry import ARCH_REGISTRY

from tola_plugin.archs.backbone_builder import load_transocr
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.checkpoints.transocr import save_transocr
from tola_plugin.runtime.model_digest import file_sha256, tensors_sha256

TRANSOCR_FILE = 'transocr.safetensors'  # the TransOCR of an exported source (``save_transocr``)


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
