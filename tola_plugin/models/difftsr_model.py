"""DiffTSRModel: the BasicSR glue of the 200-step DiffTSR route (``DiffTSRNet``, archs/difftsr_arch.py).

Test/validation only: feeds checked ``lq`` (and optional ``gt``) to the network with a generator re-seeded per
batch, keeps the text prior it read, and leaves validation (image saving, metrics) to BasicSR's SRModel.
"""
import torch

from basicsr.models.sr_model import SRModel
from basicsr.utils import get_root_logger
from basicsr.utils.dist_util import master_only
from basicsr.utils.registry import MODEL_REGISTRY

SAMPLER_DEFAULTS = {'seed': None, 'input_size': (128, 512)}


@MODEL_REGISTRY.register()
class DiffTSRModel(SRModel):
    """Test/validation-only BasicSR model running ``network_g`` (type ``DiffTSRNet``).

    Options:
        network_g: ``{type: DiffTSRNet, difftsr_checkpoint, transocr_checkpoint, steps, eta, latent, ...}``.
        sampler: {seed: null, input_size: [128, 512]}. ``seed`` re-seeds a generator for every batch (results
            independent of dataset order); null uses torch's global RNG. ``input_size`` is the required (H, W) of
            lq (the official canvas; the data pipeline resizes to it, as PairedTextDataset does); null accepts any
            multiple of the network's stride.
    After ``test()``: ``output`` (B,3,H,W) in [0,1] and ``text_prior`` (B,24), the IDM ids TransOCR read.
    """

    top_option_keys = frozenset({'sampler'})  # beyond SRModel's (options/schema.py)

    def __init__(self, opt):
        if opt.get('is_train'):
            raise ValueError('DiffTSRModel is test/validation only (is_train must be false); train TOLA instead')
        if (opt.get('network_g') or {}).get('type') != 'DiffTSRNet':
            raise ValueError(f'DiffTSRModel: network_g.type must be DiffTSRNet, got '
                             f'{(opt.get("network_g") or {}).get("type")!r}')
        if (opt.get('path') or {}).get('pretrain_network_g'):
            raise ValueError('DiffTSRModel: path.pretrain_network_g is not used (the weights are '
                             'network_g.difftsr_checkpoint and network_g.transocr_checkpoint)')
        sampler = dict(opt.get('sampler') or {})
        unknown = set(sampler) - set(SAMPLER_DEFAULTS)
        if unknown:
            raise ValueError(f'sampler: unknown option(s) {sorted(unknown)}; expected {sorted(SAMPLER_DEFAULTS)}')
        self.sampler_opt = {**SAMPLER_DEFAULTS, **sampler}
        super().__init__(opt)
        self.net_g.eval()
        get_root_logger().info(f'DiffTSRModel: sampler {self.sampler_opt}, input stride {self.bare_net.stride}')

    @property
    def bare_net(self):
        """DiffTSRNet without its DDP/DataParallel wrapper."""
        return self.get_bare_model(self.net_g)

    def feed_data(self, data):
        lq = data['lq']
        size, stride = self.sampler_opt['input_size'], self.bare_net.stride
        if lq.dim() != 4 or lq.shape[1] != 3 or lq.shape[2] % stride or lq.shape[3] % stride or (
                size is not None and tuple(lq.shape[2:]) != tuple(size)):
            want = f'(B,3,{size[0]},{size[1]})' if size is not None else f'(B,3,H,W), H, W multiples of {stride}'
            raise ValueError(f'DiffTSRModel: lq must be {want} (sampler.input_size), got {tuple(lq.shape)}')
        if lq.min() < -1e-3 or lq.max() > 1 + 1e-3:
            raise ValueError(f'DiffTSRModel: lq must be RGB in [0, 1], got range [{lq.min():.3f}, {lq.max():.3f}]')
        self.lq = lq.to(self.device)
        if 'gt' in data:
            self.gt = data['gt'].to(self.device)

    @torch.no_grad()
    def test(self):
        """Restore ``lq``: ``output`` and ``text_prior`` (the bare network: validation runs on rank 0 only)."""
        seed = self.sampler_opt['seed']
        # a CPU generator: the same noise on every device (diffusers' randn_tensor draws on the CPU, then moves it)
        generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        self.output, self.text_prior = self.bare_net(self.lq, generator=generator, return_text_prior=True)

    def model_to_device(self, net):
        """To the device, unwrapped: nothing is trained, and validation runs on rank 0 alone (DDP refuses a
        network without trainable parameters)."""
        return net.to(self.device)

    @master_only
    def print_network(self, net):
        """One line instead of BasicSR's full module dump (thousands of lines for the 874M-parameter IDM)."""
        total = sum(p.numel() for p in self.get_bare_model(net).parameters())
        get_root_logger().info(f'Network: {type(self.get_bare_model(net)).__name__}, parameters: {total:,d} (frozen)')

    def save(self, epoch, current_iter):
        raise NotImplementedError('DiffTSRModel is test-only; nothing to save')
