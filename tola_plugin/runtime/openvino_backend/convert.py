"""Converts TOLA's stages to OpenVINO IR, in a child process of ``stages.StageCache.build`` (OpenVINO never
loads into the user's process): ``python -m tola_plugin.runtime.openvino_backend.convert SPEC_JSON OUT_DIR`` reads
the IDM, VAE and TransOCR of ``stage_source.load_modules(SPEC)`` and writes ``<stage>.xml`` / ``.bin`` for each stage
into OUT_DIR (fp32 weights: the precision is chosen when the IR is compiled; batch, image size and the text prior's
decoded length dynamic). The folder is not named ``openvino``: a script run by path beside it would import it as
OpenVINO."""
import json
import os
import sys
import warnings

import torch

from tola_plugin.runtime.image_stages import STAGES, stage_modules
from tola_plugin.runtime.openvino_backend.no_telemetry import block_openvino_telemetry
from tola_plugin.runtime.stage_source import load_modules
from tola_plugin.runtime.text_prior_stages import TextEncoderStage, prior_stage_modules

block_openvino_telemetry()  # before OpenVINO is imported (no_telemetry.py says why)


def conversion_jobs(idm, vae, context_dim: int, transocr):
    """stage -> (example inputs, input shapes with -1 = dynamic) for ``ov.convert_model``."""
    import openvino as ov
    latent = int(vae.config.latent_channels)
    gen = torch.Generator().manual_seed(0)
    image = torch.rand(2, 3, 32, 128, generator=gen)
    z = torch.randn(2, latent, 8, 32, generator=gen)
    channels = int(idm.config.in_channels)
    sample = torch.randn(2, channels, 8, 32, generator=gen)
    timestep = torch.full((2, ), 999, dtype=torch.long)
    context = torch.randn(2, 24, context_dim, generator=gen)
    dynamic = ov.PartialShape
    network_input = transocr.preprocess(torch.rand(2, 3, 64, 256, generator=gen))
    memory = TextEncoderStage(transocr)(network_input)
    tokens = torch.randint(0, transocr.num_classes, (2, 5), generator=gen)
    return {
        'text_encoder': ((network_input, ), [dynamic([-1, *network_input.shape[1:]])]),
        'text_decoder': ((tokens, memory), [dynamic([-1, -1]), dynamic([-1, *memory.shape[1:]])]),
        'vae_encoder': ((image, ), [dynamic([-1, 3, -1, -1])]), 'vae_decoder': ((z, ), [dynamic([-1, latent, -1, -1])]),
        'idm': ((sample, timestep, context),
                [dynamic([-1, channels, -1, -1]),
                 dynamic([-1]), dynamic([-1, -1, context_dim])])
    }


PROGRESS = 'progress'  # a stdout line ``progress <stage> <its weight> <total weight>`` per converted stage


def convert(spec, out_dir: str) -> None:
    """Convert every stage; after each, one PROGRESS line on stdout (weight: the stage's parameters, which its
    conversion time follows) for the parent's progress bar (``stages.StageCache.build``)."""
    import openvino as ov
    idm, vae, context_dim, transocr = load_modules(spec)
    modules = dict(stage_modules(idm, vae), **prior_stage_modules(transocr))
    weights = {stage: max(1, sum(p.numel() for p in modules[stage].parameters())) for stage in STAGES}
    with torch.no_grad():
        jobs = conversion_jobs(idm, vae, context_dim, transocr)
    for stage in STAGES:
        example, shapes = jobs[stage]
        with torch.no_grad(), warnings.catch_warnings():
            # the trace's TracerWarnings name diffusers' shape checks (asserts, the >= 64 batch branch of a
            # .contiguous() call) and TransOCR's positional-table bound: the same values either way; shapes stay
            # dynamic (``input``)
            warnings.simplefilter('ignore', torch.jit.TracerWarning)
            warnings.simplefilter('ignore', FutureWarning)  # torch.jit.trace's deprecation, OpenVINO's call
            model = ov.convert_model(modules[stage].eval(), example_input=example, input=shapes)
        ov.save_model(model, os.path.join(out_dir, f'{stage}.xml'), compress_to_fp16=False)
        del model
        print(f'{PROGRESS} {stage} {weights[stage]} {sum(weights.values())}', flush=True)


if __name__ == '__main__':
    convert(json.loads(sys.argv[1]), sys.argv[2])
