"""The GPU check's precision step: what each precision does where TOLA amplifies its error, on a trained model whose
output follows ẑ0: the demo backbone's frozen one-step route (no LoRA, no LRC: the image is the VAE decoder of ẑ0).

On the rendered validation lines (degraded x4, bicubic, on the 128x512 canvas), against the route in IEEE fp32 on
the same GPU (TF32 off), each row runs one stage or the whole route in another precision and reports the IDM's noise
error |Δε̂|, ẑ0's error |Δẑ0| (t = 999 multiplies the first by 101.6) as a fraction of the latent's own size |z_LR|
and of the LR latent's distance to the HR latent |z_LR - z_HR|, and the image's PSNR against fp32 (finiteness is
judged before any clamp). A row passes when finite and within its bounds (``BOUNDS``). Besides: the same route in
fp32 on the CPU against the GPU's (``FIDELITY_BOUND``)."""
import contextlib
import glob
import math
import os
from typing import Dict, List, Optional

import cv2
import torch

from tola_plugin.archs.precision import LOW_PRECISIONS, autocast, full_precision, precision_dtype, stage_dtypes
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.data.image_io import read_image_file
from tola_plugin.metrics.image_metrics import float_psnr
from tola_plugin.utils import cuda_math

DEMO_MODEL = 'options/demo/train_TOLA_demo.yml'  # its network_g, frozen: the demo backbone
LINES, DRY_RUN_LINES = 8, 1
# Bounds of each row, from the CPU's measurements on 8 of these lines (docs/inference.md, "Precision"; the figures and
# these bounds: docs/training_gpus.md, "The steps and the report"): fp16 (the precision `auto` may serve the IDM in)
# may move ẑ0 by 3x what was measured there and must stay above 40 dB. TF32 and bf16 rows are measurements: they are
# held only to a floor that tells a working kernel from a broken one.
BOUNDS = {
    'fp16': {'z0_of_z_lr': 0.04, 'psnr_db': 40.0},
    'tf32': {'psnr_db': 25.0},
    'bf16': {'psnr_db': 25.0},
}
# fp32 on the GPU against fp32 on the CPU, the same 8 lines: the largest |Δ| of the image in [0, 1]. Measured between
# CPU kernel sets on this route (AVX-512, AVX2, generic, one thread): 2.7e-5 at most, t = 999's x101.6 inside the
# figure; the GPU's IEEE fp32 kernels (TF32 off) are another summation order of the same arithmetic: 100x, 3e-3.
FIDELITY_BOUND = 3e-3
ROWS = (('idm', 'fp16'), ('idm', 'bf16'), ('vae_encoder', 'bf16'), ('vae_decoder', 'bf16'), ('route', 'tf32'),
        ('route', 'fp16'), ('route', 'bf16'))


def demo_frozen_route(root: str):
    """The demo backbone's frozen one-step TOLANet (fp32, eval, unclamped output)."""
    from basicsr.archs import build_network

    from tola_plugin.options.reader import read_option_file
    opt = dict(read_option_file(os.path.join(root, DEMO_MODEL))['network_g'])
    opt.update(idm_lora=False, vae_lora=False, lrc=None, clamp_output=False, precision='fp32')
    return build_network(opt).eval()


def degraded_lines(data: str, count: int):
    """(lr canvases, hr canvases) (N, 3, 128, 512) in [0, 1] of the carry ``data``'s first ``count`` validation
    lines (data/val): HR degraded by bicubic x4 down and back up (the frozen route's input; the HR latent for the
    distance)."""
    lr, hr = [], []
    for path in sorted(glob.glob(os.path.join(data, 'data', 'val', '*.png')))[:count]:
        img = read_image_file(path, order='RGB')
        small = cv2.resize(img, (img.shape[1] // 4, img.shape[0] // 4), interpolation=cv2.INTER_CUBIC)
        up = cv2.resize(small, (img.shape[1], img.shape[0]), interpolation=cv2.INTER_CUBIC)
        lr.append(torch.from_numpy(up).permute(2, 0, 1).float() / 255.0)
        hr.append(torch.from_numpy(img).permute(2, 0, 1).float() / 255.0)
    if not lr:
        raise FileNotFoundError(f'no validation lines (*.png) in {os.path.join(data, "data", "val")}')
    return torch.stack(lr), torch.stack(hr)


def compute_dtype(precision: str) -> torch.dtype:
    """The autocast dtype of a row: a low precision's own; fp32 for 'fp32', 'tf32' (fp32 with TF32 matmuls) and
    'auto' (the runtime's, not an autocast dtype)."""
    return precision_dtype(precision) if precision in LOW_PRECISIONS else torch.float32


@contextlib.contextmanager
def tf32(enabled: bool):
    """TF32 for CUDA matmuls and convolutions on (PyTorch's default for convolutions) or off, restored after."""
    before = cuda_math.tf32_allowed()
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before['matmul']
        torch.backends.cudnn.allow_tf32 = before['conv']


def reference(net, lq: torch.Tensor, hq: torch.Tensor) -> Dict[str, torch.Tensor]:
    """The fp32 route's intermediates on ``lq`` (and z_HR, the IDM's inputs), on the network's device."""
    captured = {}
    hook = net.idm.register_forward_hook(lambda m, a, k, o: captured.update(args=a, kwargs=k), with_kwargs=True)
    try:
        with torch.inference_mode(), tf32(False):
            out = net(lq, noise_seeds=list(range(len(lq))), return_intermediates=True)
            out['z_hr'] = net.vae.encode(hq).latent_dist.mode()
    finally:
        hook.remove()
    args = captured['args']
    out['idm_inputs'] = (args[0], args[1], args[2] if len(args) > 2 else captured['kwargs']['encoder_hidden_states'])
    return out


def row_of(net, ref: Dict, lq: torch.Tensor, stage: str, precision: str) -> Dict[str, torch.Tensor]:
    """(eps_hat, z0, image) with ``stage`` ('idm', 'vae_encoder', 'vae_decoder' or 'route') in ``precision``, the
    rest of the route as in fp32 (Algorithm 1's arithmetic in fp32, as TOLANet does)."""
    device = lq.device
    dtype = compute_dtype(precision)
    sa, s1 = float(net.sqrt_alpha_bar), float(net.sqrt_one_minus_alpha_bar)
    with torch.inference_mode(), tf32(precision == 'tf32'):
        if stage == 'route':
            switched = net.set_switches(precision=precision if precision in LOW_PRECISIONS else 'fp32')
            try:
                out = switched(lq, noise_seeds=list(range(len(lq))), return_intermediates=True)
            finally:
                net.set_switches(precision='fp32')
            return {'eps_hat': out['eps_hat'], 'z0': out['z0'], 'image': out['image']}
        z_t, z_lr, eps_hat, z0 = ref['z_t'], ref['z_lr'], ref['eps_hat'], ref['z0']
        if stage == 'vae_encoder':
            with autocast(dtype, device):
                z_lr = full_precision(net.vae.encode(lq).latent_dist.mode())
            z_t = sa * z_lr + s1 * ref['eps']
        if stage in ('vae_encoder', 'idm'):
            sample, t, context = ref['idm_inputs']
            if stage == 'vae_encoder':
                sample = torch.cat([z_t, z_lr], 1)
            with autocast(dtype if stage == 'idm' else torch.float32, device):
                eps_hat = full_precision(net.idm(sample, t, context))
            z0 = (z_t - s1 * eps_hat) / sa
        decoder = stage_dtypes(dtype)['vae_decoder'] if stage == 'vae_decoder' else torch.float32  # fp32 under fp16
        with autocast(decoder, device):
            image = full_precision(net.vae.decode((1.0 / LATENT_SCALE) * z0).sample)
    return {'eps_hat': eps_hat, 'z0': z0, 'image': image}


def compare(ref: Dict, got: Dict) -> Dict:
    """The row's errors against the fp32 route: mean |Δε̂|, mean |Δẑ0| (absolute, of |z_LR|, of |z_LR - z_HR|),
    the image's PSNR (clamped to [0, 1] after the finiteness check) and whether every value was finite."""
    finite = all(bool(torch.isfinite(got[k]).all()) for k in ('eps_hat', 'z0', 'image'))
    z_lr = float(ref['z_lr'].abs().mean())
    to_hr = float((ref['z_lr'] - ref['z_hr']).abs().mean())
    d_z0 = float((got['z0'] - ref['z0']).abs().mean()) if finite else math.inf
    psnr = float_psnr(got['image'].clamp(0, 1).cpu(), ref['image'].clamp(0, 1).cpu()) if finite else 0.0
    return {
        'finite': finite, 'eps_hat_mean_abs_error': float(
            (got['eps_hat'] - ref['eps_hat']).abs().mean()), 'z0_mean_abs_error': d_z0, 'z0_of_z_lr': d_z0 / z_lr,
        'z0_of_lr_to_hr': d_z0 / to_hr, 'image_psnr_db': 'identical' if math.isinf(psnr) else round(psnr, 2)
    }


def within(row: Dict, bounds: Optional[Dict]) -> bool:
    psnr = math.inf if row['image_psnr_db'] == 'identical' else row['image_psnr_db']
    bounds = bounds or {}
    return row['finite'] and row['z0_of_z_lr'] <= bounds.get('z0_of_z_lr', math.inf) and psnr >= bounds.get(
        'psnr_db', -math.inf)


def fidelity(net, lq: torch.Tensor, gpu_image: torch.Tensor) -> Dict:
    """The fp32 route on the CPU against the same on ``lq``'s device: largest |Δ| of the image, PSNR."""
    net_cpu = net.to('cpu')
    with torch.inference_mode():
        cpu_image = net_cpu(lq.cpu(), noise_seeds=list(range(len(lq))))
    diff = float((cpu_image - gpu_image.cpu()).abs().max())
    psnr = float_psnr(cpu_image.clamp(0, 1), gpu_image.cpu().clamp(0, 1))
    return {
        'image_max_abs_difference': diff, 'bound': FIDELITY_BOUND, 'passed': diff <= FIDELITY_BOUND,
        'image_psnr_db': 'identical' if math.isinf(psnr) else round(psnr, 2)
    }


def precision_step(root: str, data: str, dry_run: bool) -> Dict:
    """Every row of ``ROWS`` and the GPU-vs-CPU fidelity on the demo backbone's frozen route; -> the step's
    figures (``passed``: every row within its bounds and fp32 within ``FIDELITY_BOUND`` of the CPU's)."""
    device = torch.device('cpu' if dry_run else 'cuda')
    lq, hq = degraded_lines(data, DRY_RUN_LINES if dry_run else LINES)
    net = demo_frozen_route(root).to(device)
    lq, hq = lq.to(device), hq.to(device)
    ref = reference(net, lq, hq)
    rows: List[Dict] = []
    for stage, precision in ROWS:
        if dry_run and precision != 'bf16':
            continue  # fp16 and TF32 on a CPU: emulated (fp16: many times slower), the code path is bf16's
        row = {'stage': stage, 'precision': precision}
        row.update(compare(ref, row_of(net, ref, lq, stage, precision)))
        bounds = None if dry_run else BOUNDS.get(precision)  # a CPU emulates these precisions: no GPU bound
        row.update(bounds=bounds, passed=within(row, bounds))
        rows.append(row)
    lr_to_hr = float((ref['z_lr'] - ref['z_hr']).abs().mean())
    result = {
        'device': str(device), 'model': 'demo backbone, frozen one-step route (no LoRA, no LRC)', 'lines': len(lq),
        'z_lr_mean_abs': float(ref['z_lr'].abs().mean()), 'lr_to_hr_mean_abs': lr_to_hr, 'z0_to_hr_mean_abs': float(
            (ref['z0'] - ref['z_hr']).abs().mean()), 'rows': rows, 'fidelity': fidelity(net, lq, ref['image'])
    }
    result['passed'] = all(r['passed'] for r in rows) and result['fidelity']['passed']
    return result
