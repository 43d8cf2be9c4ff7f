"""TOLA's tensor stages (IDM, VAE encoder, VAE decoder) on ONNX Runtime: the ``backend='onnxruntime'`` of
``TOLANet.load_for_inference``.

``export_onnx_stages`` writes the three stages of a merged (LoRA folded) network as ONNX files with torch's exporter
(the batch size stays dynamic, the image size is fixed at export), plus a manifest; ``load_onnx_stages`` opens them
as modules with the interface Algorithm 1 calls (``idm(sample, t, C)``, ``vae.encode(x).latent_dist``,
``vae.decode(z).sample``), so ``TOLANet.forward`` runs unchanged. ONNX Runtime's CPU
kernels are measured faster than eager PyTorch on these stages (docs/inference.md); results agree with eager fp32
within 1e-5 relative. CPU and fp32 only. ``onnx`` is needed to export, ``onnxruntime`` to run.
"""
import json
import os
import tempfile
import warnings
from typing import Dict, Sequence

import torch
from diffusers.models.autoencoders.vae import DecoderOutput, DiagonalGaussianDistribution
from diffusers.models.modeling_outputs import AutoencoderKLOutput
from torch import nn

MANIFEST = 'manifest.json'
OPSET = 18
FORMAT = 'tola_plugin.onnx_stages/1'
#: file of each stage, its input names and output name
STAGES = {
    'idm': ('idm.onnx', ('sample', 'timestep', 'context'), 'eps'),
    'vae_encoder': ('vae_encoder.onnx', ('image', ), 'moments'),
    'vae_decoder': ('vae_decoder.onnx', ('latent', ), 'image')
}


class _IDMStage(nn.Module):

    def __init__(self, idm):
        super().__init__()
        self.idm = idm

    def forward(self, sample, timestep, context):
        return self.idm(sample, timestep, context)


class _EncoderStage(nn.Module):
    """x -> the posterior's moments (mean and log-variance, unclamped) = quant_conv(encoder(x))."""

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, image):
        return self.vae.encode(image).latent_dist.parameters


class _DecoderStage(nn.Module):

    def __init__(self, vae):
        super().__init__()
        self.vae = vae

    def forward(self, latent):
        return self.vae.decode(latent).sample


def export_onnx_stages(net, folder: str, height: int = 128, width: int = 512, tag: str = '') -> Dict:
    """Write the IDM, VAE encoder and VAE decoder of the merged TOLANet ``net`` to ``folder`` (new or empty) for
    (B, 3, height, width) images; ``tag`` is stored in the manifest (``TOLANet.save_merged`` pairs the folder with
    its merged file through it). Returns the manifest."""
    if net.has_lora('idm') or net.has_lora('vae'):
        raise ValueError('export_onnx_stages: merge LoRA first (TOLANet.merge_lora)')
    if height % 4 or width % 4 or height < 32 or width < 32:
        raise ValueError(f'export_onnx_stages: height and width must be multiples of 4 and >= 32, got {height}x{width}')
    import onnx  # the exporter needs it; fail before writing anything
    if os.path.isdir(folder) and os.listdir(folder):
        raise FileExistsError(f'ONNX stages folder {folder!r} exists and is not empty; remove it or choose another')
    os.makedirs(folder, exist_ok=True)
    device = next(net.idm.parameters()).device
    image = torch.rand(2, 3, height, width, device=device)
    latent = torch.randn(2, net.vae.config.latent_channels, height // 4, width // 4, device=device)
    sample = torch.cat([latent, latent], 1)
    timestep = torch.full((2, ), net.timestep, dtype=torch.long, device=device)
    context = torch.randn(2, 24, net.context_dim, device=device)
    jobs = {
        'idm': (_IDMStage(net.idm), (sample, timestep, context)), 'vae_encoder': (_EncoderStage(net.vae), (image, )),
        'vae_decoder': (_DecoderStage(net.vae), (latent, ))
    }
    for name, (module, args) in jobs.items():
        filename, inputs, output = STAGES[name]
        target = os.path.join(folder, filename)
        with tempfile.TemporaryDirectory(dir=folder) as scratch, torch.no_grad(), warnings.catch_warnings():
            # torch's TorchScript-based exporter: seconds where the dynamo one takes minutes on these U-Nets. Its
            # TracerWarnings name diffusers' shape-dependent branches, which the trace fixes: at a fixed image size
            # they only concern batches of 64 or more (a .contiguous() call), the same values either way
            warnings.simplefilter('ignore', torch.jit.TracerWarning)
            warnings.filterwarnings('ignore', message='Constant folding')  # slices with steps, left to the runtime
            raw = os.path.join(scratch, filename)
            torch.onnx.export(module.eval(), args, raw, dynamo=False, opset_version=OPSET, input_names=list(inputs),
                              output_names=[output], dynamic_axes={k: {0: 'batch'}
                                                                   for k in list(inputs) + [output]})
            if len(os.listdir(scratch)) == 1:
                os.replace(raw, target)
            else:  # > 2 GB: the exporter wrote one file per weight; keep them in one data file beside the graph
                onnx.save_model(
                    onnx.load(raw), target, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=filename + '.data')
    manifest = {
        'format': FORMAT, 'height': height, 'width': width, 'tag': tag,
        'latent_channels': int(net.vae.config.latent_channels)
    }
    with open(os.path.join(folder, MANIFEST), 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=2)
    return manifest


def read_manifest(folder: str) -> Dict:
    """The manifest of an ONNX stages folder; FileNotFoundError / ValueError name the folder and the fix."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(f'no ONNX stages at {folder!r} (missing {MANIFEST}); write them with '
                                'tools/export_merged.py --onnx, or use backend torch')
    with open(path, encoding='utf-8') as f:
        manifest = json.load(f)
    if manifest.get('format') != FORMAT:
        raise ValueError(f'{path!r}: format {manifest.get("format")!r}, expected {FORMAT!r}')
    missing = [STAGES[s][0] for s in STAGES if not os.path.isfile(os.path.join(folder, STAGES[s][0]))]
    if missing:
        raise FileNotFoundError(f'ONNX stages folder {folder!r} lacks {missing}; export it again')
    return manifest


class OnnxStage(nn.Module):
    """One ONNX Runtime session with a tensor-in, tensor-out forward (CPU, fp32)."""

    def __init__(self, path: str, inputs: Sequence[str], output: str, size: Sequence[int], threads: int):
        super().__init__()
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
        self.inputs, self.output, self.path, self.size = tuple(inputs), output, path, tuple(size)

    def run(self, *tensors: torch.Tensor) -> torch.Tensor:
        feeds = {}
        for name, tensor in zip(self.inputs, tensors):
            if tensor.device.type != 'cpu':
                raise RuntimeError(f'{self.path}: the onnxruntime backend runs on the CPU, got a {tensor.device} '
                                   'tensor; use backend torch on a GPU')
            feeds[name] = tensor.detach().float().contiguous().numpy() if tensor.is_floating_point() \
                else tensor.detach().long().contiguous().numpy()
        return torch.from_numpy(self.session.run([self.output], feeds)[0])


class OnnxIDM(nn.Module):
    """The IDM on ONNX Runtime: ``forward(sample, timestep, encoder_hidden_states) -> eps``, as DiffTSRIDMUNet."""

    def __init__(self, stage: OnnxStage):
        super().__init__()
        self.stage = stage

    def forward(self, sample, timestep, encoder_hidden_states):
        timestep = torch.as_tensor(timestep, dtype=torch.long).expand(sample.shape[0]).contiguous()
        return self.stage.run(sample, timestep, encoder_hidden_states)


class OnnxVAE(nn.Module):
    """The VAE on ONNX Runtime: ``encode(x).latent_dist`` and ``decode(z).sample``, as diffusers' AutoencoderKL."""

    def __init__(self, encoder: OnnxStage, decoder: OnnxStage):
        super().__init__()
        self.encoder_stage, self.decoder_stage = encoder, decoder

    def encode(self, image):
        size = tuple(image.shape[-2:])
        if size != self.encoder_stage.size:
            raise ValueError(f'the ONNX stages were exported for {self.encoder_stage.size[0]}x'
                             f'{self.encoder_stage.size[1]} images, got {size[0]}x{size[1]}; export them for this '
                             'size (tools/export_merged.py --onnx-size) or use backend torch')
        return AutoencoderKLOutput(latent_dist=DiagonalGaussianDistribution(self.encoder_stage.run(image)))

    def decode(self, latent):
        return DecoderOutput(sample=self.decoder_stage.run(latent))


def load_onnx_stages(folder: str, threads: int = 0):
    """(OnnxIDM, OnnxVAE, manifest) of an ``export_onnx_stages`` folder; ``threads`` 0 = torch's thread count."""
    manifest = read_manifest(folder)
    threads = threads or torch.get_num_threads()
    size = (manifest['height'], manifest['width'])
    stages = {
        name: OnnxStage(os.path.join(folder, filename), inputs, output, size, threads)
        for name, (filename, inputs, output) in STAGES.items()
    }
    return OnnxIDM(stages['idm']), OnnxVAE(stages['vae_encoder'], stages['vae_decoder']), manifest
