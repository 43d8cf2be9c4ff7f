"""Regenerate the backbone equivalence fixtures from the OFFICIAL DiffTSR code (not run by pytest).

The official modules are imported from a throw-away copy of YuzheZhang-1999/DiffTSR outside this repo
(``OFFICIAL_DIFFTSR=/tmp/official``), with ``pytorch_lightning`` stubbed (only a base class is used) and run on
CPU in float32. Needs ``einops`` and ``omegaconf`` (use a separate venv), e.g.::

    git --git-dir=<mirror of YuzheZhang-1999/DiffTSR> archive HEAD | tar x -C /tmp/official
    export OMP_NUM_THREADS=1 OFFICIAL_DIFFTSR=/tmp/official
    /tmp/offvenv/bin/python tests/data/backbone/make_backbone_fixtures.py

Only the generated arrays are kept: the official-layout key/shape lists of the tiny configs, the inputs and
the official outputs (``official_tiny.safetensors`` + ``official_tiny.json``). Weights are NOT stored: they are
re-created by ``random_official_weights`` (seeded torch.randn) in the test, and a per-component checksum
guards against drift.
"""
import json
import os
import sys
import types
from typing import Dict, Sequence, Tuple

import torch

SEED = 1234
HERE = os.path.dirname(os.path.abspath(__file__))

# tiny official configs (LDM names) and the matching configs of our modules
TINY_OFFICIAL = {
    'idm': dict(image_size=[8, 32], in_channels=6, out_channels=3, model_channels=32, attention_resolutions=[8, 4, 2],
                num_res_blocks=2, channel_mult=[1, 2, 3, 4], num_heads=8, resblock_updown=True,
                use_spatial_transformer=True, transformer_depth=1, context_dim=32, use_checkpoint=False, legacy=False),
    'vae': dict(
        embed_dim=3, ddconfig=dict(double_z=True, z_channels=3, resolution=128, in_channels=3, out_ch=3, ch=32,
                                   ch_mult=[1, 2, 4], num_res_blocks=2, attn_resolutions=[], dropout=0.0)),
    'mom': dict(
        num_classes=6736, context_dim=16,
        unet=dict(image_size=[8, 32], in_channels=6, out_channels=3, model_channels=32, attention_resolutions=[0],
                  num_res_blocks=2, channel_mult=[1,
                                                  2], num_heads=4, resblock_updown=True, use_spatial_transformer=True,
                  transformer_depth=1, context_dim=16, use_checkpoint=False, legacy=False),
        bert=dict(n_embed=32, n_layer=2, vocab_size=6736, max_seq_len=24, use_tokenizer=False)),
}
TINY_OURS = {
    'idm': dict(block_out_channels=[32, 64, 96, 128], attention_levels=[False, True, True, True], attention_heads=8,
                cross_attention_dim=32),
    'vae': dict(block_out_channels=[32, 64, 128]),
    'mom': dict(context_dim=16, unet_block_out_channels=[32, 64], unet_heads=4, text_dim=32, text_depth=2),
}


def random_official_weights(layout: Sequence[Tuple[str, Sequence[int]]], seed: int) -> Dict[str, torch.Tensor]:
    """Deterministic, well-scaled random tensors for an official-layout key list (same in script and test)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, shape in layout:
        w = torch.randn(tuple(shape), generator=g)
        if len(shape) >= 2:
            w = w / (torch.Size(shape).numel() // shape[0])**0.5
        elif key.endswith('weight'):
            w = 1 + 0.1 * w  # norm gains
        else:
            w = 0.1 * w
        out[key] = w
    return out


def checksum(sd: Dict[str, torch.Tensor]) -> float:
    return float(sum(v.double().abs().sum() for v in sd.values()))


def _official_modules():
    root = os.environ.get('OFFICIAL_DIFFTSR', '/tmp/official')
    sys.path.insert(0, root)
    pl = types.ModuleType('pytorch_lightning')
    pl.LightningModule = torch.nn.Module
    sys.modules['pytorch_lightning'] = pl
    from model import DiffTSR as difftsr_module
    from model.IDM.models.autoencoder import AutoencoderKL
    from model.IDM.modules.diffusionmodules.openaimodel import UNetModel
    from model.IDM.modules.encoders.modules import BERTEmbedder
    from model.MoM.MoM import MoM_model
    return AutoencoderKL, UNetModel, BERTEmbedder, MoM_model, difftsr_module


def build_official():
    AutoencoderKL, UNetModel, _, MoM_model, _ = _official_modules()
    cfg = TINY_OFFICIAL
    idm = UNetModel(**cfg['idm'])
    vae = AutoencoderKL(**cfg['vae'])
    enc_target = 'model.IDM.modules.encoders.modules.BERTEmbedder'
    mom = MoM_model(
        MoM_Unet={'target': 'model.IDM.modules.diffusionmodules.openaimodel.UNetModel',
                  'params': cfg['mom']['unet']}, MoM_Transformer={'target': enc_target, 'params': cfg['mom']['bert']},
        num_classes=cfg['mom']['num_classes'], context_dim=cfg['mom']['context_dim'])
    nets = {'idm': idm, 'vae': vae, 'mom': mom}
    layout, sums = {}, {}
    for i, (name, net) in enumerate(nets.items()):
        layout[name] = [[k, list(v.shape)] for k, v in net.state_dict().items()]
        sd = random_official_weights(layout[name], SEED + i)
        net.load_state_dict(sd, strict=True)
        net.eval()
        sums[name] = checksum(sd)
    return nets, layout, sums


class _FixedText:
    """Stands in for DiffTSR's Text_Prediction: returns fixed IDM tokens."""

    def __init__(self, tokens):
        self.tokens = tokens

    def predict(self, image):
        return self.tokens


def official_route(nets, lq_uint8, tokens, seed, steps=200, eta=0.2):
    """DiffTSR_pipline.DiffTSR_sample on CPU with the tiny modules; returns (z_LR, z_0, decoded float)."""
    difftsr_module = _official_modules()[4]
    pipe = object.__new__(difftsr_module.DiffTSR_pipline)
    pipe.register_buffer = lambda name, attr: setattr(pipe, name, attr)  # the original forces CUDA
    pipe.device, pipe.scale_factor, pipe.num_classes = 'cpu', 0.18215, 6736
    pipe.IDM_Unet, pipe.MoM_module, pipe.VAE_model = nets['idm'], nets['mom'], nets['vae']
    pipe.Text_Prediction = _FixedText(tokens)
    pipe.IDM_ddpm_schedule_init(timesteps=1000, schedule='linear', linear_start=0.0015, linear_end=0.0205,
                                cosine_s=8e-3)
    pipe.IDM_ddim_schedule_init(ddim_num_steps=steps, ddim_discretize='uniform', ddim_eta=eta, verbose=False)
    record = {}
    vae = nets['vae']
    encode, decode = vae.encode, vae.decode

    def rec_encode(x):
        post = encode(x)
        sample = post.sample

        def rec_sample():
            record['z_lr'] = sample()
            return record['z_lr']

        post.sample = rec_sample
        return post

    def rec_decode(z):
        record['z0_unscaled'] = z
        record['decoded'] = decode(z)
        return record['decoded']

    vae.encode, vae.decode = rec_encode, rec_decode
    torch.manual_seed(seed)
    out = pipe.DiffTSR_sample(lq_uint8)
    vae.encode, vae.decode = encode, decode
    return record, out


def main():
    torch.set_grad_enabled(False)
    torch.backends.cudnn.allow_tf32 = False
    nets, layout, sums = build_official()
    g = torch.Generator().manual_seed(SEED + 100)
    arrays = {}
    # IDM
    arrays['idm.x'] = torch.randn(2, 6, 8, 32, generator=g)
    arrays['idm.t'] = torch.tensor([999, 10])
    arrays['idm.context'] = torch.randn(2, 24, 32, generator=g)
    arrays['idm.eps'] = nets['idm'](arrays['idm.x'], timesteps=arrays['idm.t'], context=arrays['idm.context'])
    # VAE
    arrays['vae.image'] = torch.rand(2, 3, 32, 128, generator=g)
    post = nets['vae'].encode(arrays['vae.image'])
    arrays['vae.mean'], arrays['vae.logvar'] = post.mean, post.logvar
    arrays['vae.z'] = torch.randn(2, 3, 8, 32, generator=g)
    arrays['vae.decoded'] = nets['vae'].decode(arrays['vae.z'])
    # MoM
    arrays['mom.c_t'] = torch.randint(0, 6736, (2, 24), generator=g)
    arrays['mom.c_t'][:, 18:] = 6735  # padding, as a real prior has
    arrays['mom.z_lr'] = torch.randn(2, 3, 8, 32, generator=g)
    arrays['mom.z_t'] = torch.randn(2, 3, 8, 32, generator=g)
    arrays['mom.t'] = torch.tensor([996, 1])
    i_cond, c_cond = nets['mom'](arrays['mom.c_t'], arrays['mom.z_lr'].clone(), arrays['mom.z_t'].clone(),
                                 arrays['mom.t'])
    arrays['mom.i_cond'], arrays['mom.c_cond'] = i_cond, c_cond
    # whole route (fixed tokens stand in for TransOCR; noise from torch.manual_seed(route_seed))
    lq = (torch.rand(32, 128, 3, generator=g) * 255).round().to(torch.uint8)
    tokens = arrays['mom.c_t'][:1].clone()
    route_seed, route_steps = 7, 200  # the official sampler length (fast on one thread)
    record, out = official_route(nets, lq.numpy(), tokens, route_seed, steps=route_steps)
    arrays['route.lq_uint8'] = lq
    arrays['route.tokens'] = tokens
    arrays['route.z_lr'] = record['z_lr']
    arrays['route.z0_unscaled'] = record['z0_unscaled']
    arrays['route.decoded'] = record['decoded']
    arrays['route.out_uint8'] = torch.from_numpy(out.copy())

    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in arrays.items()}, os.path.join(HERE, 'official_tiny.safetensors'))
    meta = {
        'seed': SEED, 'route_seed': route_seed, 'route_steps': route_steps, 'route_eta': 0.2,
        'official_commit': 'f9839633f5dbcd7cd80ed0a7609edd6ff5d3b5f5', 'torch': torch.__version__, 'checksums': sums,
        'ours': TINY_OURS, 'official': TINY_OFFICIAL, 'layout': layout
    }
    with open(os.path.join(HERE, 'official_tiny.json'), 'w') as f:
        json.dump(meta, f)
    print({k: tuple(v.shape) for k, v in arrays.items()})


if __name__ == '__main__':
    main()
