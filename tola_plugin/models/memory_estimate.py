"""GPU memory of TOLA's training iteration and of inference, measured on the meta device (no weights, no compute,
seconds on a CPU): the launchers' bound (``network_demand``) and tola-estimate-memory's (``commands/estimate_memory``).

What is measured, for the network of an option file at a given image size:

- weights: every parameter and buffer of TOLANet (frozen backbone, LoRA, LRC) and of the LPIPS-VGG loss; the
  trainable tensors' gradients and AdamW's two moments (``optimizer_state``).
- saved activations (``saved_activations``): the tensors autograd keeps for the backward pass
  (``torch.autograd.graph.saved_tensors_hooks``), per sample and per stage, parameters excluded (a convolution
  saves its weight, which is no extra memory); linear in the batch (a few tensors, such as TransOCR's position
  table, do not depend on it; per sample = batch 2 - batch 1).
- peak (``peak_live``): the largest sum of live tensors while one iteration runs forward, losses and backward
  (a ``TorchDispatchMode`` sees every tensor an operation creates, a finalizer sees it freed), parameters
  excluded; with checkpointing this includes the recomputation during the backward pass. Inference: the same
  peak of one forward under ``inference_mode``, on the inference network (LoRA merged, no MoM image branch).

Not measured: the CUDA context, cuDNN/cuBLAS workspaces and the caching allocator's fragmentation; the batch
that "fits" a GPU leaves ``reserve`` of its memory for them. fp32 only (the paper's precision; autocast does
not act on the meta device). The text prior runs under ``no_grad`` and keeps nothing for the backward pass; its
data-dependent greedy decoding cannot run on the meta device, so the measured forward takes its tokens as given.
"""
import weakref
from typing import Dict, Iterable, Mapping, Optional, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.text.alphabets import IDM_MAX_LEN
from tola_plugin.utils.tensor_memory import SavedTensors, parameter_storages, trainable_bytes, weight_bytes

OCR_TARGET_LENGTH = 25  # TransOCR targets of the datasets: 24 characters + END (data/text_labels.py)


class PeakLive(TorchDispatchMode):
    """Peak of the bytes of live tensors created inside the mode (``exclude``: storages never counted)."""

    def __init__(self, exclude: Iterable[int] = ()):
        super().__init__()
        self.exclude = set(exclude)
        self.live: Dict[int, int] = {}
        self.now = self.peak = 0

    def _freed(self, key: int) -> None:
        self.now -= self.live.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = id(storage)
                if key not in self.exclude and key not in self.live:
                    self.live[key] = storage.nbytes()
                    self.now += storage.nbytes()
                    weakref.finalize(storage, self._freed, key)
        self.peak = max(self.peak, self.now)
        return out


# ------------------------------------------------------------------------------------------- the models
def meta_network(net_opt: Mapping) -> TOLANet:
    """The TOLANet of an option file's ``network_g`` on the meta device: 'checkpoint' builds the architecture of
    the ``*_config`` entries (absent: the official sizes) without reading the files; 'demo' reads the shipped demo
    files' architecture; 'random' as given."""
    opt = {k: v for k, v in net_opt.items() if k != 'type'}
    if net_opt.get('type', 'TOLANet') != 'TOLANet':
        raise ValueError(f'network_g.type: the estimator measures TOLANet, got {net_opt.get("type")!r}')
    if opt.get('backbone_init', 'checkpoint') == 'checkpoint':
        opt.update(backbone_init='random')
        for key in ('difftsr_checkpoint', 'transocr_checkpoint'):
            opt.pop(key, None)
    with torch.device('meta'):
        net = TOLANet(**opt)

    def given_prior(lq, gt_tokens=None):  # see the module docstring: the prior is data-dependent and keeps nothing
        tokens = torch.zeros(lq.shape[0], IDM_MAX_LEN, dtype=torch.long, device=lq.device)
        return tokens, torch.ones(tokens.shape, device=lq.device), None

    net.predict_text_prior = given_prior
    return net


class TeacherForced(nn.Module):
    """TransOCR's teacher-forced forward without its target-id check (``.any()`` reads values: not on meta)."""

    def __init__(self, transocr):
        super().__init__()
        self.transocr = transocr
        self.training = False

    def forward(self, images, targets):
        start = torch.full_like(targets[:, :1], self.transocr.start_index)
        return self.transocr.decode(torch.cat([start, targets[:, :-1]], 1), self.transocr.encode(images))


def meta_losses(train_opt: Mapping) -> Dict[str, nn.Module]:
    """The loss modules of ``train`` moved to the meta device ({'pixel_opt': ..., ...}; weight 0 or absent: left
    out); LPIPS-VGG built with a random trunk (the same architecture; built on the CPU, where its loader checks the
    linear layers it reads)."""
    from basicsr.losses import build_loss
    losses = {}
    for key in ('pixel_opt', 'perceptual_opt', 'ocr_opt'):
        loss_opt = dict(train_opt.get(key) or {})
        if not loss_opt or loss_opt.get('loss_weight', 1.0) == 0:
            continue
        if key == 'perceptual_opt':
            loss_opt['pretrained_backbone'] = False
        losses[key] = build_loss(loss_opt).to('meta')
    return losses


# ------------------------------------------------------------------------------------- one iteration
def training_iteration(net: TOLANet, losses: Mapping[str, nn.Module], batch: int, size: Sequence[int],
                       backward: bool = True) -> torch.Tensor:
    """Forward, the losses of ``losses`` (summed as TOLAModel does) and backward on a meta batch."""
    lq = torch.rand(batch, 3, *size, device='meta')
    gt = torch.rand(batch, 3, *size, device='meta')
    output = net(lq)
    total = output.new_zeros(())
    if 'pixel_opt' in losses:
        total = total + losses['pixel_opt'](output, gt)
    if 'perceptual_opt' in losses:
        total = total + losses['perceptual_opt'](output, gt)[0]  # (perceptual, style), BasicSR's convention
    if 'ocr_opt' in losses:
        targets = torch.zeros(batch, OCR_TARGET_LENGTH, dtype=torch.long, device='meta')
        total = total + losses['ocr_opt'](output, targets, TeacherForced(net.transocr))
    if backward:
        total.backward()
    return total


def module_stages(net: TOLANet, losses: Mapping[str, nn.Module]) -> Dict[nn.Module, str]:
    stages = {net.vae.encoder: 'VAE encoder', net.idm: 'IDM', net.vae.decoder: 'VAE decoder'}
    if net.lrc is not None:
        stages[net.lrc] = 'LRC'
    if 'perceptual_opt' in losses:
        stages[losses['perceptual_opt']] = 'LPIPS-VGG'
    if 'ocr_opt' in losses:
        stages[losses['ocr_opt']] = 'TransOCR CE'  # the teacher-forced recognizer runs inside the loss
    return stages


def saved_activations(net: TOLANet, losses: Mapping[str, nn.Module], size: Sequence[int],
                      batch: int = 1) -> Dict[str, int]:
    """Bytes autograd keeps for the backward pass of one iteration on ``batch`` samples, by stage."""
    counter = SavedTensors(module_stages(net, losses), parameter_storages(net, *losses.values()))
    with counter():
        training_iteration(net, losses, batch, size, backward=False)
    return dict(counter.by_stage)


def _checkpoint(module, *args):
    """Non-reentrant recomputation (as TOLANet's default) without RNG bookkeeping (no RNG on the meta device)."""
    return torch.utils.checkpoint.checkpoint(module.__call__, *args, use_reentrant=False, preserve_rng_state=False)


def peak_training(net: TOLANet, losses: Mapping[str, nn.Module], size: Sequence[int], batch: int,
                  checkpointed: Sequence[str] = ()) -> int:
    """Peak bytes of live tensors during one training iteration (forward, losses, backward), weights excluded."""
    net.set_gradient_checkpointing(checkpointed, checkpoint_fn=_checkpoint)
    try:
        net.zero_grad(set_to_none=True)
        mode = PeakLive(parameter_storages(net, *losses.values()))
        with mode:
            training_iteration(net, losses, batch, size)
        return mode.peak
    finally:
        net.zero_grad(set_to_none=True)
        net.set_gradient_checkpointing(())


def peak_inference(net: TOLANet, size: Sequence[int], batch: int) -> int:
    """Peak bytes of live tensors of one inference forward (``inference_mode``), weights excluded."""
    mode = PeakLive(parameter_storages(net))
    with mode, torch.inference_mode():
        net(torch.rand(batch, 3, *size, device='meta'))
    return mode.peak


def network_demand(net_opt: Mapping, train_opt: Optional[Mapping] = None,
                   size: Optional[Sequence[int]] = None) -> Optional[tuple]:
    """(weight bytes, trainable bytes, LoRA bytes, bytes autograd keeps per training sample: batches 2 - 1, 0 without
    ``train_opt`` and ``size``) of a TOLANet block, for the launchers' start-up bound (basicsr_glue/resource_bounds.py,
    through ``TOLAModel.network_memory``); None for another network."""
    if net_opt.get('type') != 'TOLANet':
        return None
    net = meta_network(net_opt).to('meta')  # the demo backbone's files are read onto the CPU
    lora = sum(p.numel() * p.element_size() for name, p in net.named_parameters() if '.lora_' in name)
    per_sample = 0
    if train_opt is not None and size is not None:
        losses = meta_losses(train_opt)
        net.set_gradient_checkpointing(net.config.gradient_checkpointing, checkpoint_fn=_checkpoint)
        one, two = (sum(saved_activations(net, losses, size, b).values()) for b in (1, 2))
        per_sample = two - one
    return weight_bytes(net), trainable_bytes(net), lora, per_sample
