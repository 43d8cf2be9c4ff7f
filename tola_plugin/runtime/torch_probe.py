"""Runs TOLA's image stages (``image_stages.IMAGE_STAGES``: the text prior runs in fp32 on torch) on torch, each in its
precision, in a child process of the qualification (a kernel that crashes there ends the child, not the user's
run): ``python -m tola_plugin.runtime.torch_probe SPEC_JSON CASES_NPZ DEVICE PRECISIONS_JSON OUT_NPZ``. CASES holds
each stage's inputs (``<stage>.<i>``); PRECISIONS maps each image stage to its precision ('fp32', 'bf16', 'fp16');
OUT receives each stage's output (``<stage>``), computed as ``TOLANet.forward`` computes it in that precision
(``image_stages.run_torch_stage``)."""
import json
import sys

import numpy as np
import torch

from tola_plugin.archs.precision import precision_dtype
from tola_plugin.runtime.image_stages import IMAGE_STAGES, run_torch_stage, stage_modules
from tola_plugin.runtime.stage_source import load_stages


def probe(spec, cases_path: str, device: str, precisions, out_path: str) -> None:
    idm, vae, _ = load_stages(spec)
    device = torch.device(device)
    if device.type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = False  # IEEE fp32 where fp32 is asked (docs/training_gpus.md)
        torch.backends.cudnn.allow_tf32 = False
    modules = {name: module.to(device) for name, module in stage_modules(idm, vae).items()}
    with np.load(cases_path, allow_pickle=False) as cases:
        outputs = {}
        for stage in IMAGE_STAGES:
            count = sum(1 for key in cases.files if key.startswith(stage + '.'))
            inputs = [torch.from_numpy(cases[f'{stage}.{i}']) for i in range(count)]
            outputs[stage] = run_torch_stage(modules[stage], inputs, precision_dtype(precisions[stage]), device).numpy()
    np.savez(out_path, **outputs)


if __name__ == '__main__':
    probe(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5])
