"""TOLAModel: BasicSR's SRModel for TOLANet, overriding only what TOLA changes.

- Only LoRA and LRC are optimised (everything else in TOLANet is frozen); AdamW is added to BasicSR
  1.4.2's Adam-only ``get_optimizer``.
- Objective: L1 + LPIPS-VGG + 0.02 · OCR CE (any term may be left out by omitting its option block).
- Gradient clipping (``train.grad_clip_norm``, 1.0) after the backward pass.
- Gradient accumulation (``train.accumulate_grad_batches``, 1): each iteration's batch is run as k micro-batches
  whose gradients add up to the whole batch's, then one optimizer step: the same samples, iterations, schedule
  and exact resume as without it, with the activation memory of batch / k (docs/training_gpus.md).
- Precision: fp32 (the paper) or bf16; fp16 is refused (no loss scaling).
- Checkpoints (``models/net_g_*.pth``) hold only the adaptation state (peft LoRA state + LRC) and the settings
  it was trained with (LoRA rank, alpha, targets, LRC options), written atomically; loading one checks those
  settings against the network and restores the state into a freshly built TOLANet. Optimizer/scheduler
  states are BasicSR's ``.state`` files.
- Option keys outside SRModel's and ``train_option_keys`` / ``val_option_keys`` are errors at start
  (options/checks.py).
- Validation and test draw ε from a per-image seed (file name + ``val.noise_seed``), so every run and
  every variant restores an image with the same noise.
"""
import os
from collections import OrderedDict
from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel

from basicsr.losses import build_loss
from basicsr.models.sr_model import SRModel
from basicsr.utils import get_root_logger
from basicsr.utils.dist_util import master_only
from basicsr.utils.registry import MODEL_REGISTRY

from tola_plugin.archs.precision import check_training_precision, requested_dtype
from tola_plugin.archs.tola_arch import image_noise_seed
from tola_plugin.checkpoints.tola import write_adaptation_checkpoint
from tola_plugin.losses.ocr_ce_loss import IGNORE_INDEX
from tola_plugin.metrics.text_metrics import recognition_scores
from tola_plugin.ocr.transocr_recognizer import read_text


@MODEL_REGISTRY.register()
class TOLAModel(SRModel):
    """Options beyond SRModel's (under ``train``): ``pixel_opt`` (L1Loss), ``perceptual_opt`` (LPIPSLoss),
    ``ocr_opt`` (OCRCELoss), ``grad_clip_norm`` (1.0; ~ disables), optimizer ``type: AdamW``. Under ``val``:
    ``noise_seed`` (0), the base of the per-image ε seeds."""

    #: During ``nondist_validation`` with ``val.ocr_metrics``: ``(predictions, transcriptions)``, two lists that
    #: ``test()`` extends with what the frozen TransOCR reads on each restored batch and the batch's labels
    #: (BasicSR's validation loop calls ``test()`` per batch and keeps no outputs); None otherwise.
    ocr_records = None

    # the option keys TOLAModel reads beyond SRModel's (options/schema.py)
    train_option_keys = frozenset({'ocr_opt', 'grad_clip_norm', 'accumulate_grad_batches'})
    val_option_keys = frozenset({'noise_seed', 'ocr_metrics', 'ocr_lower'})

    @staticmethod
    def network_memory(net_opt, train_opt=None, size=None):
        """What a network block asks of memory, measured on the meta device (``memory_estimate.network_demand``),
        for the launchers' start-up bound (basicsr_glue/resource_bounds.py reaches it through the model registry)."""
        from tola_plugin.models.memory_estimate import network_demand
        return network_demand(net_opt, train_opt, size)

    # ------------------------------------------------------------------------------ training setup
    def init_training_settings(self):
        train_opt = self.opt['train']
        if train_opt.get('ema_decay', 0) > 0:
            raise ValueError('TOLAModel: train.ema_decay must be 0: an EMA copy of TOLANet would duplicate the '
                             'frozen ~1B-parameter backbone (and the paper uses no EMA)')
        self.net_g.train()
        self.cri_pix = self._build_optional_loss('pixel_opt')
        self.cri_perceptual = self._build_optional_loss('perceptual_opt')
        self.cri_ocr = self._build_optional_loss('ocr_opt')
        if self.cri_pix is None and self.cri_perceptual is None and self.cri_ocr is None:
            raise ValueError('TOLAModel: train needs at least one of pixel_opt, perceptual_opt, ocr_opt')
        self.grad_clip_norm = train_opt.get('grad_clip_norm', 1.0)
        self.accumulate_grad_batches = self._accumulation(train_opt.get('accumulate_grad_batches', 1))
        check_training_precision(requested_dtype(self.bare_net.precision, self.device))
        self.setup_optimizers()
        self.setup_schedulers()

    def _accumulation(self, k):
        """``train.accumulate_grad_batches``: a positive integer dividing the training batch."""
        batch = self.opt['datasets']['train']['batch_size_per_gpu']
        if isinstance(k, bool) or not isinstance(k, int) or k < 1 or batch % k:
            raise ValueError(f'train.accumulate_grad_batches: expected a positive integer dividing '
                             f'datasets.train.batch_size_per_gpu ({batch}), got {k!r}')
        return k

    def _build_optional_loss(self, key):
        """The loss of ``train[key]`` on the model's device, or None when absent or weighted 0 (not computed)."""
        loss_opt = self.opt['train'].get(key)
        if not loss_opt or loss_opt.get('loss_weight', 1.0) == 0:
            return None
        return build_loss(loss_opt).to(self.device)

    def setup_optimizers(self):
        """One optimizer over the trainable tensors (LoRA + LRC) only; the frozen ones are just counted."""
        train_opt = self.opt['train']
        params = [p for p in self.net_g.parameters() if p.requires_grad]
        if not params:
            raise ValueError('TOLAModel: the network has nothing to train (no LoRA and no LRC); use a test option '
                             'file for frozen controls such as the frozen one-step baseline')
        counts = self.bare_net.trainable_parameter_counts()
        get_root_logger().info(f'Trainable parameters: {counts} (everything else is frozen)')
        optim_opt = dict(train_opt['optim_g'])
        optim_type = optim_opt.pop('type')
        self.optimizer_g = self.get_optimizer(optim_type, params, **optim_opt)
        self.optimizers.append(self.optimizer_g)

    def get_optimizer(self, optim_type, params, lr, **kwargs):
        """BasicSR 1.4.2 knows only Adam; TOLA trains with AdamW (lr 5e-5, betas (0.9, 0.999), wd 0.01)."""
        if optim_type == 'AdamW':
            return torch.optim.AdamW(params, lr, **kwargs)
        return super().get_optimizer(optim_type, params, lr, **kwargs)

    def update_learning_rate(self, current_iter, warmup_iter=-1):
        """BasicSR's linear warm-up stops one step short (it sets lr·i/w only for i < w and never restores the
        base lr, so a constant schedule would stay at lr·(w-1)/w); finish it at i = w."""
        super().update_learning_rate(current_iter, warmup_iter)
        if warmup_iter > 0 and current_iter == warmup_iter:
            self._set_lr(self._get_init_lr())

    @property
    def bare_net(self):
        """TOLANet without its DDP/DataParallel wrapper."""
        return self.get_bare_model(self.net_g)

    # ------------------------------------------------------------------------------------- steps
    def feed_data(self, data):
        self.lq = data['lq'].to(self.device)
        self.gt = data['gt'].to(self.device) if 'gt' in data else None
        self.idm_tokens = data['idm_tokens'].to(self.device) if 'idm_tokens' in data else None
        self.ocr_target = data['ocr_target'].to(self.device) if 'ocr_target' in data else None
        self.lq_paths = data.get('lq_path')
        self.texts = data.get('text')
        if self.gt is None:
            del self.gt  # SRModel's visuals/metrics test hasattr(self, 'gt')

    def optimize_parameters(self, current_iter):
        """One optimizer step on the batch: forward and backward per micro-batch (``accumulate_grad_batches``; each
        micro-batch's loss weighted by its share of the batch, so the gradients add up to the whole batch's), then
        clipping and the step. Under DDP only the last micro-batch's backward synchronises the gradients."""
        self.optimizer_g.zero_grad()
        batch = self.lq.shape[0]
        k = self.accumulate_grad_batches
        if batch % k:
            raise ValueError(f'TOLAModel: a batch of {batch} cannot be split into accumulate_grad_batches = {k}')
        if self.cri_ocr is not None and self.ocr_target is None:
            raise KeyError("TOLAModel: ocr_opt needs the dataset's 'ocr_target'")
        # the OCR CE averages over the batch's target tokens: every micro-batch divides by the whole batch's count
        ocr_tokens = None if k == 1 or self.cri_ocr is None else int((self.ocr_target != IGNORE_INDEX).sum())
        loss_dict, outputs, size = OrderedDict(), [], batch // k
        for i in range(k):
            part = slice(i * size, (i + 1) * size)
            last = i == k - 1
            ddp = isinstance(self.net_g, DistributedDataParallel)
            sync = self.net_g.no_sync() if ddp and not last else nullcontext()
            with sync:
                output = self.net_g(self.lq[part], gt_tokens=None if self.idm_tokens is None else self.idm_tokens[part])
                losses = self._losses(output, part, share=size / batch, ocr_tokens=ocr_tokens)
                sum(losses.values()).backward()
            for name, value in losses.items():
                loss_dict[name] = loss_dict[name] + value.detach() if name in loss_dict else value.detach()
            outputs.append(output.detach())
        self.output = outputs[0] if k == 1 else torch.cat(outputs)
        if self.grad_clip_norm:
            torch.nn.utils.clip_grad_norm_(self.optimizer_g.param_groups[0]['params'], self.grad_clip_norm)
        self.optimizer_g.step()
        self.log_dict = self.reduce_loss_dict(loss_dict)

    def _losses(self, output, part, share, ocr_tokens):
        """The weighted loss terms of ``output``, the micro-batch ``part`` (``share`` of the batch): L1 and LPIPS are
        means over the micro-batch scaled by its share (x 1.0, exact, without accumulation); the OCR CE sums its
        tokens and divides by the batch's ``ocr_tokens`` (None: the loss's own mean over this micro-batch)."""
        losses = OrderedDict()
        if self.cri_pix is not None:
            losses['l_pix'] = self.cri_pix(output, self.gt[part]) * share
        if self.cri_perceptual is not None:
            losses['l_lpips'] = self.cri_perceptual(output, self.gt[part])[0] * share  # (perceptual, style)
        if self.cri_ocr is not None:
            # the conditioning recognizer doubles as the (frozen, eval-mode) OCR-loss recognizer
            losses['l_ocr'] = self.cri_ocr(output, self.ocr_target[part], self.bare_net.transocr, num_tokens=ocr_tokens)
        return losses

    def test(self):
        """Restore ``self.lq`` with per-image seeded ε (same noise for the same file in every run/variant); while
        ``ocr_records`` is set, also record what TransOCR reads on the restored images."""
        seeds = None
        if self.lq_paths is not None:
            base = self.opt.get('val', {}).get('noise_seed', 0)
            seeds = [image_noise_seed(os.path.basename(p), base) for p in self.lq_paths]
        # the bare network, not the DDP wrapper: validation runs on rank 0 only, and DDP's forward would start a
        # buffer broadcast (TransOCR's BatchNorm statistics) that the other ranks never join
        net = self.bare_net
        net.eval()
        with torch.no_grad():
            self.output = net(self.lq, gt_tokens=self.idm_tokens, noise_seeds=seeds)
            if not bool(torch.isfinite(self.output).all()):  # never saved nor scored (docs/inference.md)
                names = ', '.join(self.lq_paths or []) or 'this batch'
                raise FloatingPointError(f'TOLANet returned non-finite pixels (NaN or infinity) for {names} '
                                         f'(precision {net.precision}); nothing written')
            if self.ocr_records is not None and self.texts is not None:
                # the frozen TransOCR (the paper's T-ACC/T-NED recognizer) reads the restored images
                self.ocr_records[0].extend(read.text for read in read_text(self.bare_net.transocr, self.output))
                self.ocr_records[1].extend(self.texts)
        net.train()

    def nondist_validation(self, dataloader, current_iter, tb_logger, save_img):
        """BasicSR's validation (image metrics, saved images) plus TransOCR ACC/NED of the restored images when
        ``val.ocr_metrics`` (default true) and the dataset carries transcriptions ('text')."""
        self.ocr_records = ([], []) if self.opt['val'].get('ocr_metrics', True) else None
        try:
            super().nondist_validation(dataloader, current_iter, tb_logger, save_img)
            if self.ocr_records is not None and self.ocr_records[1]:
                preds, gts = self.ocr_records
                scores = recognition_scores(preds, gts, lower=self.opt['val'].get('ocr_lower', False))
                name = dataloader.dataset.opt['name']
                get_root_logger().info(f'Validation {name}: TransOCR ACC {scores["acc"]:.4f}, '
                                       f'NED {scores["ned"]:.4f} on {scores["n"]} images')
                self.ocr_metric_results = {'ocr_acc': scores['acc'], 'ocr_ned': scores['ned']}
                if tb_logger:
                    for key, value in self.ocr_metric_results.items():
                        tb_logger.add_scalar(f'metrics/{name}/{key}', value, current_iter)
        finally:
            self.ocr_records = None

    # ------------------------------------------------------------------------- save / load / log
    @master_only
    def save_network(self, net, net_label, current_iter, param_key='params'):
        """Save only the adaptation state (LoRA + LRC) as ``{param_key: state, 'tola_adaptation': settings}``
        (tensors and plain values only), atomically."""
        if isinstance(net, list) or isinstance(param_key, list):
            raise ValueError('TOLAModel saves a single network (no EMA)')
        name = 'latest' if current_iter == -1 else current_iter
        path = os.path.join(self.opt['path']['models'], f'{net_label}_{name}.pth')
        bare = self.get_bare_model(net)
        write_adaptation_checkpoint(path, bare.adaptation_state_dict(), bare.adaptation_config(), param_key)

    def load_network(self, net, load_path, strict=True, param_key='params'):
        """Load an adaptation-state checkpoint written by ``save_network`` (strict; ``strict_load_g`` must stay
        true: a partial adaptation state would silently leave adapters at their initial values)."""
        if not strict:
            raise ValueError('TOLAModel: strict_load_g: false is not supported for adaptation checkpoints')
        self.get_bare_model(net).load_adaptation_checkpoint(load_path, param_key,
                                                            what='TOLA adaptation checkpoint (path.pretrain_network_g)')
        get_root_logger().info(f'Loaded TOLA adaptation state from {load_path} [{param_key}]')

    @master_only
    def print_network(self, net):
        """One line instead of BasicSR's full module dump (thousands of lines for the 874M-parameter IDM)."""
        bare = self.get_bare_model(net)
        total = sum(p.numel() for p in bare.parameters())
        get_root_logger().info(f'Network: {type(net).__name__} - {type(bare).__name__}, parameters: {total:,d}, '
                               f'trainable: {bare.trainable_parameter_counts()}')
