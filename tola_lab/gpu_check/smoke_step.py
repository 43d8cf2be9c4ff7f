"""The GPU check's first step, seconds before anything expensive: the tests' tiny TOLANet on the GPU takes one
training step of ``TOLAModel`` (L1 + LPIPS-VGG on a random trunk + OCR CE; LoRA and LRC must change) and restores one
line (finite before the clamp). A failure here, from version skew in the image or a driver that cannot run the
kernels, ends the check at once: every later step would fail the same way, slower."""
import os
from typing import Dict

import torch

from tola_lab.gpu_check.configs import training_options


def smoke_step(root: str, data: str, dry_run: bool) -> Dict:
    from basicsr.data import build_dataset
    from basicsr.models import build_model
    opt = training_options(root, data, 'tiny', on_gpu=not dry_run, name='gpu_check_smoke', total_iter=1, freq=0,
                           batch=2, precision='fp32', checkpointing=(), accumulate=1, workers=0, lr=1e-3, lpips=True)
    opt.update(num_gpu=0 if dry_run else 1, dist=False, rank=0, world_size=1, is_train=True, auto_resume=False)
    folders = ('experiments_root', 'models', 'training_states', 'log', 'visualization')
    opt['path'].update({k: os.path.join('experiments', opt['name']) for k in folders})
    model = build_model(opt)
    device = next(model.bare_net.parameters()).device
    data_set = build_dataset(opt['datasets']['train'])
    items = [data_set[i] for i in range(2)]
    batch = {k: torch.stack([it[k] for it in items]) for k in items[0] if torch.is_tensor(items[0][k])}
    before = {k: v.detach().clone() for k, v in model.bare_net.adaptation_state_dict().items()}
    model.feed_data(batch)
    model.optimize_parameters(1)
    after = model.bare_net.adaptation_state_dict()
    changed = sum(not torch.equal(before[k], after[k]) for k in before)
    losses = {k: float(v) for k, v in model.log_dict.items()}
    net = model.bare_net.eval()
    net.set_switches(clamp_output=False)
    with torch.inference_mode():
        out = net(batch['lq'][:1].to(device), noise_seeds=[0])
    finite = bool(torch.isfinite(out).all())
    return {
        'passed': device.type == ('cpu' if dry_run else 'cuda') and changed > 0 and finite
        and all(torch.isfinite(torch.tensor(v)) for v in losses.values()), 'device': str(device), 'losses': losses,
        'adaptation_tensors_changed': f'{changed} of {len(before)}', 'restored_finite': finite,
        'restored_range': [round(float(out.min()), 3), round(float(out.max()), 3)]
    }
