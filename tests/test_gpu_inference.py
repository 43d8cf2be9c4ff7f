"""Inference on GPU machines, tested on a CPU with CUDA simulated: the 200-step route drawing its noise from a CPU
generator for tensors on another device (the entry points' device, backend and TF32: test_inference_openvino.py)."""
import torch

from tola_plugin.archs.difftsr_arch import difftsr_sample
from tola_plugin.archs.diffusion_schedule import make_ldm_scheduler
from tola_plugin.archs.tola_arch import TOLANet
from tola_testing import tiny_net_opt


def test_200_step_route_draws_from_a_cpu_generator_on_another_device(monkeypatch):
    """CUDA refuses ``torch.randn(generator=<CPU generator>, device='cuda')``; the same rule is imposed here on the
    meta device standing in for the GPU. Every draw of the route (posterior, q-sample, DDIM steps) goes through
    diffusers' randn_tensor, which draws on the generator's device and moves the noise."""
    real_randn = torch.randn

    def randn_as_cuda(*size, generator=None, device=None, **kwargs):
        if generator is not None and device is not None and torch.device(device).type != generator.device.type:
            raise RuntimeError(f"Expected a '{torch.device(device).type}' device type for generator but found "
                               f"'{generator.device.type}'")
        return real_randn(*size, generator=generator, device=device, **kwargs)

    monkeypatch.setattr(torch, 'randn', randn_as_cuda)
    with torch.device('meta'):
        net = TOLANet(**tiny_net_opt(idm_lora=False, vae_lora=False))
    lq = torch.rand(1, 3, 32, 128, device='meta')
    c_t = torch.zeros(1, 24, dtype=torch.long, device='meta')
    out = difftsr_sample(net.idm, net.vae, net.mom, lq, c_t, make_ldm_scheduler('ddim', 3), 0.2,
                         generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 3, 32, 128) and out.device.type == 'meta'
