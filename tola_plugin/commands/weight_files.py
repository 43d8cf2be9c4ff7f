"""The weight files the inference entry points read, written once from what training and the authors ship:

- ``export_merged`` (tools/export_merged.py): a trained TOLA model as one merged, pickle-free safetensors file
  (LoRA folded into the IDM and VAE weights, the rebuild options in the file's metadata), read back by
  ``TOLANet.from_merged``, ``TOLANet.load_for_inference`` and ``tola-infer --model``;
- ``convert_difftsr`` (tools/convert_difftsr.py): the official DiffTSR.ckpt as a safetensors file in our (diffusers)
  layout, which ``load_difftsr`` and every option file's ``difftsr_checkpoint`` accept in place of the .ckpt.

Both can check what they wrote (``verify``), a failed check reported as one ``error:`` line and status 1 (the tools'
convention, ``tola_plugin.utils.cli_errors``)."""
import os
import sys
from typing import Optional, Sequence

import torch

from tola_plugin.archs.backbone_builder import load_difftsr, save_converted
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.checkpoints.difftsr import COMPONENTS
from tola_plugin.utils.user_paths import BROKEN_LINK, MISSING, path_kind
from tola_plugin.utils.user_text import say

#: Largest relative difference between the merged and the unmerged model's outputs that ``export_merged`` accepts.
MERGED_TOLERANCE = 1e-4


def export_merged(opt_path: str, out: str, checkpoint: Optional[str] = None, verify: bool = False,
                  overrides: Sequence[str] = ()) -> int:
    """Build the TOLANet of the option file ``opt_path`` (``network_g``, with the ``--force_yml`` entries
    ``overrides`` applied) with the adaptation checkpoint (``checkpoint`` or path.pretrain_network_g), fold LoRA in
    and write the merged .safetensors file ``out`` (mode as the umask says); prints its size. ``verify``: compare the
    unmerged and merged outputs on a random (1, 3, 128, 512) input (full size: minutes) and print the difference.
    -> 0, or 1 (with an ``error:`` line) when they differ by more than ``MERGED_TOLERANCE``. ``out`` naming anything
    but a file (a folder, a FIFO, a path under a file) is a ValueError before the network is built."""
    kind = path_kind(out)
    if kind not in ('a file', MISSING, BROKEN_LINK):
        raise ValueError(f'--out {out} is {kind}; expected the .safetensors file to write (a new name, or a file to '
                         'replace)')
    net = TOLANet.from_options(opt_path, checkpoint, overrides)
    if verify:
        lq = torch.rand(1, 3, 128, 512, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            before = net(lq, noise_seeds=[0])
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    net.save_merged(out)
    say(f'wrote {out} ({os.path.getsize(out) / 2 ** 20:.1f} MiB)', sys.stdout)
    if verify:
        del net  # the merged copy is built next: one full-size network in memory at a time
        with torch.no_grad():
            after = TOLANet.from_merged(out)(lq, noise_seeds=[0])
        err = ((after - before).abs().max() / before.abs().max().clamp_min(1e-12)).item()
        say(f'merged vs unmerged: max relative difference {err:.2e}', sys.stdout)
        if err > MERGED_TOLERANCE:
            say('error: merged outputs differ from the unmerged model')
            return 1
    return 0


def convert_difftsr(checkpoint: str, out: str, components: Sequence[str] = COMPONENTS, verify: bool = False) -> int:
    """Read the official DiffTSR.ckpt ``checkpoint`` (weights only, memory-mapped; TDM_Decoder is dropped unread) and
    write ``components`` (idm, vae, mom) with their configs to the .safetensors file ``out``; prints what it wrote.
    ``verify``: reload ``out`` and compare every tensor. -> 0, or 1 (with an ``error:`` line) on a difference."""
    nets = load_difftsr(checkpoint, components)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    save_converted(nets, out)
    n = sum(p.numel() for net in nets.values() for p in net.parameters())
    say(f'wrote {out}: {", ".join(nets)} ({n:,} parameters)', sys.stdout)
    if verify:
        again = load_difftsr(out, components)
        for comp, net in nets.items():
            ref = again[comp].state_dict()
            for key, value in net.state_dict().items():
                if not torch.equal(value, ref[key]):
                    say(f'error: verify failed: {comp}.{key} differs')
                    return 1
        say('verified: identical tensors', sys.stdout)
    return 0
