"""The CPU backend of the inference entry points: TOLA's tensor stages (IDM, VAE encoder, VAE decoder) on OpenVINO.

``use_openvino(net, source)`` replaces ``net.idm`` and ``net.vae`` of an inference TOLANet by modules with the
interface Algorithm 1 calls (``idm(sample, t, C)``, ``vae.encode(x).latent_dist``, ``vae.decode(z).sample``), so
``TOLANet.forward`` runs unchanged; the text prior, the MoM text encoder and the LRC stay in torch. Each stage runs
the precision of the forward's autocast at the call (fp32 without autocast, bf16 under bf16 autocast: the
network's ``precision``), so ``set_switches(precision=...)`` works as with torch. Measured on a 2-core AMD EPYC at
full size: 1.4-1.8x eager torch in fp32 and 2.8-3.4x in bf16 (docs/inference.md, "Backends").

The stages are converted from the torch modules (``ov.convert_model``, batch and image size dynamic) once per
model and cached on disk (``utils/user_cache.py``: ``openvino/<key>/``), ``key`` being the SHA-256 of the merged file
(or of the stage tensors for a network built from an option file) and the OpenVINO version. A cache entry holds
each stage as OpenVINO IR (``<stage>.xml`` + ``.bin``, fp32 weights: portable across CPUs) plus a manifest with
each file's size and SHA-256. An entry that is incomplete, of another format or version, or whose files fail their
size or hash check, is converted again (in a private folder, renamed into place when complete). Compiling an IR for
this CPU and a precision (``INFERENCE_PRECISION_HINT``) is cached by OpenVINO itself (its ``CACHE_DIR``,
``openvino/compiled/``: keyed by the model, the settings, the CPU's instruction set and the OpenVINO version, loaded
memory-mapped), so one entry serves every precision and every machine that shares the folder.
"""
import hashlib
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import Dict, Optional, Sequence

import numpy as np
import torch
from diffusers.models.autoencoders.vae import DecoderOutput, DiagonalGaussianDistribution
from diffusers.models.modeling_outputs import AutoencoderKLOutput
from torch import nn

from tola_plugin.utils.atomic_files import read_json_dict, write_json
from tola_plugin.utils.user_cache import cache_path, cache_root

FORMAT = 'tola_plugin.openvino_stages/2'
MANIFEST = 'manifest.json'
HASHES = 'file_hashes.json'  # merged file -> SHA-256, reused while its size, mtime and inode are unchanged
STAGES = ('vae_encoder', 'vae_decoder', 'idm')  # conversion order: the largest last (peak memory)
HINTS = {torch.float32: 'f32', torch.bfloat16: 'bf16', torch.float16: 'f16'}
CHUNK = 1 << 24


def openvino_missing() -> str:
    """Why the OpenVINO backend cannot run here ('' when it can)."""
    try:
        import openvino  # noqa: F401
    except ImportError as err:
        return f'openvino is not installed ({err}); pip install "tola-plugin[openvino]"'
    return ''


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(CHUNK), b''):
            digest.update(block)
    return digest.hexdigest()


def _stat_key(path: str) -> Dict:
    st = os.stat(path)
    return {'size': st.st_size, 'mtime_ns': st.st_mtime_ns, 'inode': st.st_ino, 'device': st.st_dev}


def file_sha256(path: str) -> str:
    """SHA-256 of the file ``path``; remembered in the cache (``HASHES``) with its size, mtime and inode, so an
    unchanged file is hashed once (a 4 GB merged file takes a few seconds)."""
    real = os.path.realpath(path)
    memo_path = cache_path('openvino', HASHES)
    memo = read_json_dict(memo_path) or {}
    stat = _stat_key(real)
    known = memo.get(real)
    if isinstance(known, dict) and {k: known.get(k) for k in stat} == stat and isinstance(known.get('sha256'), str):
        return known['sha256']
    digest = _sha256(real)
    memo[real] = dict(stat, sha256=digest)
    try:
        write_json(memo_path, memo)
    except OSError:
        pass  # a read-only cache: hashed again next time
    return digest


def tensors_sha256(modules: Sequence[nn.Module]) -> str:
    """SHA-256 of the names, dtypes, shapes and values of every tensor of ``modules`` (a network that has no merged
    file: built from an option file and a checkpoint)."""
    digest = hashlib.sha256()
    for index, module in enumerate(modules):
        for name, tensor in sorted(module.state_dict().items()):
            t = tensor.detach().cpu().contiguous()
            digest.update(f'{index}.{name}:{t.dtype}:{tuple(t.shape)};'.encode())
            digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b'')
    return digest.hexdigest()


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


def _conversion_jobs(idm, vae, context_dim: int) -> Dict:
    """stage -> (torch module, example inputs, input shapes with -1 = dynamic) for ``ov.convert_model``."""
    import openvino as ov
    latent = int(vae.config.latent_channels)
    gen = torch.Generator().manual_seed(0)
    image = torch.rand(2, 3, 32, 128, generator=gen)
    z = torch.randn(2, latent, 8, 32, generator=gen)
    sample = torch.randn(2, int(idm.config.in_channels), 8, 32, generator=gen)
    timestep = torch.full((2, ), 999, dtype=torch.long)
    context = torch.randn(2, 24, context_dim, generator=gen)
    dynamic = ov.PartialShape
    return {
        'vae_encoder': (_EncoderStage(vae), (image, ), [dynamic([-1, 3, -1, -1])]),
        'vae_decoder': (_DecoderStage(vae), (z, ), [dynamic([-1, latent, -1, -1])]),
        'idm': (idm, (sample, timestep, context),
                [dynamic([-1, int(idm.config.in_channels), -1, -1]),
                 dynamic([-1]),
                 dynamic([-1, -1, context_dim])])
    }


def compiled_cache_dir() -> str:
    """OpenVINO's own cache of compiled models (``CACHE_DIR``), inside ours."""
    path = os.path.join(cache_root(), 'openvino', 'compiled')
    os.makedirs(path, exist_ok=True)
    return path


def _say(message: str) -> None:
    print(f'tola-plugin: {message}', file=sys.stderr, flush=True)


class StageCache:
    """The cache entry of one model: ``<cache>/openvino/<key>/`` with ``<stage>.xml`` / ``.bin`` (OpenVINO IR of
    the converted stage) and ``manifest.json`` (format, key, OpenVINO version, each file's size and SHA-256)."""

    def __init__(self, key: str):
        import openvino as ov
        self.key, self.version = key, ov.__version__
        self.folder = os.path.join(cache_root(), 'openvino', key[:32])

    def path(self, stage: str) -> str:
        """The IR of ``stage`` (its weights beside it, same name with .bin)."""
        return os.path.join(self.folder, f'{stage}.xml')

    @staticmethod
    def files() -> Sequence[str]:
        return [f'{stage}.{ext}' for stage in STAGES for ext in ('xml', 'bin')]

    def valid(self) -> bool:
        """Whether the entry is complete and intact (sizes checked; hashes when a file's mtime changed)."""
        manifest = read_json_dict(os.path.join(self.folder, MANIFEST))
        if not manifest or manifest.get('format') != FORMAT or manifest.get('key') != self.key \
                or manifest.get('openvino') != self.version or not isinstance(manifest.get('files'), dict):
            return False
        for name in self.files():
            entry, path = manifest['files'].get(name), os.path.join(self.folder, name)
            if not isinstance(entry, dict) or not os.path.isfile(path):
                return False
            stat = os.stat(path)
            if stat.st_size != entry.get('bytes'):
                return False
            if stat.st_mtime_ns != entry.get('mtime_ns') and _sha256(path) != entry.get('sha256'):
                return False
        return True

    def build(self, idm, vae, context_dim: int) -> None:
        """Convert the three stages from the torch modules and write the entry, replacing an invalid one. Built in
        a private folder beside it and renamed into place when complete: two processes converting the same model
        at once (two test workers, two servers) never see each other's half-written files; the later one keeps the
        entry that is already there."""
        import openvino as ov
        parent = os.path.dirname(self.folder)
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=os.path.basename(self.folder) + '.building-', dir=parent)
        try:
            start = time.perf_counter()
            _say(f'converting the IDM and VAE for OpenVINO once for this model (about a minute at full size); '
                 f'cached in {self.folder}')
            for stage, (module, example, shapes) in _conversion_jobs(idm, vae, context_dim).items():
                with torch.no_grad(), warnings.catch_warnings():
                    # the trace's TracerWarnings name diffusers' shape checks (asserts, the >= 64 batch branch of a
                    # .contiguous() call): the same values either way; shapes stay dynamic (``input``)
                    warnings.simplefilter('ignore', torch.jit.TracerWarning)
                    warnings.simplefilter('ignore', FutureWarning)  # torch.jit.trace's deprecation, OpenVINO's call
                    model = ov.convert_model(module.eval(), example_input=example, input=shapes)
                # fp32 weights as converted: the precision is chosen when the IR is compiled
                ov.save_model(model, os.path.join(staging, f'{stage}.xml'), compress_to_fp16=False)
                del model
            files = {}
            for name in self.files():
                path = os.path.join(staging, name)
                stat = os.stat(path)
                files[name] = {'bytes': stat.st_size, 'mtime_ns': stat.st_mtime_ns, 'sha256': _sha256(path)}
            manifest = {
                'format': FORMAT, 'key': self.key, 'openvino': self.version, 'torch': torch.__version__, 'files': files,
                'seconds': round(time.perf_counter() - start, 1)
            }
            write_json(os.path.join(staging, MANIFEST), manifest)
            if self.valid():  # another process finished first: keep its entry
                return
            if os.path.lexists(self.folder):  # invalid (stale, corrupt, other version): out of the way first
                aside = tempfile.mkdtemp(prefix=os.path.basename(self.folder) + '.stale-', dir=parent)
                os.replace(self.folder, os.path.join(aside, 'entry'))
                shutil.rmtree(aside, ignore_errors=True)
            try:
                os.rename(staging, self.folder)
            except OSError:
                if not self.valid():  # not a faster twin's valid entry: a real failure
                    raise
            _say(f'OpenVINO stages converted in {manifest["seconds"]:.0f} s')
        finally:
            shutil.rmtree(staging, ignore_errors=True)


class OpenVINOStage:
    """One stage: its cached IR, compiled per precision on first use (``threads`` threads, one stream, latency
    hint; the compiled model cached by OpenVINO in ``openvino/compiled/``), run on CPU tensors."""

    def __init__(self, cache: StageCache, stage: str, threads: int):
        self.cache, self.stage, self.threads = cache, stage, threads
        self.compiled: Dict[str, object] = {}
        self.requests: Dict[str, object] = {}

    def load(self, dtype: torch.dtype):
        """The infer request of this stage compiled for ``dtype`` (compiled, or read from OpenVINO's cache, once
        per dtype)."""
        hint = HINTS.get(dtype)
        if hint is None:
            raise ValueError(f'the OpenVINO backend runs fp32, bf16 or fp16, got {dtype}')
        if hint not in self.requests:
            import openvino as ov
            core = ov.Core()
            core.set_property({'CACHE_DIR': compiled_cache_dir()})
            config = {
                'INFERENCE_PRECISION_HINT': hint, 'INFERENCE_NUM_THREADS': self.threads, 'NUM_STREAMS': 1,
                'PERFORMANCE_HINT': 'LATENCY'
            }
            compiled = core.compile_model(self.cache.path(self.stage), 'CPU', config)
            self.compiled[hint], self.requests[hint] = compiled, compiled.create_infer_request()
        return self.requests[hint]

    def run(self, *tensors: torch.Tensor) -> torch.Tensor:
        """Run on ``tensors`` in the precision of the current CPU autocast (fp32 without autocast)."""
        dtype = torch.get_autocast_dtype('cpu') if torch.is_autocast_enabled('cpu') else torch.float32
        feeds = []
        for tensor in tensors:
            if tensor.device.type != 'cpu':
                raise RuntimeError(f'the OpenVINO backend runs on the CPU, got a {tensor.device} tensor; use backend '
                                   'torch on a GPU')
            tensor = tensor.detach()
            feeds.append((tensor.float() if tensor.is_floating_point() else tensor.long()).contiguous().numpy())
        result = self.load(dtype).infer(feeds)
        return torch.from_numpy(np.array(result[0], dtype=np.float32, copy=True))


class OpenVINOIDM(nn.Module):
    """The IDM on OpenVINO: ``forward(sample, timestep, encoder_hidden_states) -> eps``, as DiffTSRIDMUNet."""

    def __init__(self, stage: OpenVINOStage):
        super().__init__()
        self.stage = stage

    def forward(self, sample, timestep, encoder_hidden_states):
        timestep = torch.as_tensor(timestep, dtype=torch.long).expand(sample.shape[0]).contiguous()
        return self.stage.run(sample, timestep, encoder_hidden_states)


class OpenVINOVAE(nn.Module):
    """The VAE on OpenVINO: ``encode(x).latent_dist`` and ``decode(z).sample``, as diffusers' AutoencoderKL."""

    def __init__(self, encoder: OpenVINOStage, decoder: OpenVINOStage, config):
        super().__init__()
        self.encoder_stage, self.decoder_stage, self.config = encoder, decoder, config

    def encode(self, image):
        return AutoencoderKLOutput(latent_dist=DiagonalGaussianDistribution(self.encoder_stage.run(image)))

    def decode(self, latent):
        return DecoderOutput(sample=self.decoder_stage.run(latent))


def uses_openvino(net) -> bool:
    """Whether ``net``'s tensor stages run on OpenVINO (``use_openvino``)."""
    return isinstance(getattr(net, 'idm', None), OpenVINOIDM)


def use_openvino(net, source: Optional[str] = None, dtypes: Sequence[torch.dtype] = (torch.float32, ),
                 threads: int = 0):
    """Run the IDM and VAE of the inference TOLANet ``net`` (CPU) on OpenVINO, in place (returns ``net``).

    source: the merged file ``net`` was loaded from (the cache key is its SHA-256); None: the key is the hash of the
        stage tensors. dtypes: precisions to load now (others load on first use). threads: 0 = torch's count.
    On a cache miss the stages are converted from ``net``'s torch modules (their weights are read then; a hit never
    reads them: the merged file's pages stay on disk)."""
    import openvino as ov
    if uses_openvino(net):
        return net
    if not getattr(net, 'inference_only', False):
        raise ValueError('use_openvino: prepare the network for inference first (TOLANet.load_for_inference or '
                         'prepare_for_inference)')
    if next(net.idm.parameters()).device.type != 'cpu':
        raise ValueError('use_openvino: the OpenVINO backend runs on the CPU; the network is on '
                         f'{next(net.idm.parameters()).device}')
    digest = file_sha256(source) if source else tensors_sha256([net.idm, net.vae])
    cache = StageCache(f'{digest}-openvino{ov.__version__}')
    if not cache.valid():
        cache.build(net.idm, net.vae, net.context_dim)
    threads = threads or torch.get_num_threads()
    stages = {name: OpenVINOStage(cache, name, threads) for name in STAGES}
    for stage in stages.values():
        for dtype in dtypes:
            stage.load(dtype)
    net.idm = OpenVINOIDM(stages['idm'])
    net.vae = OpenVINOVAE(stages['vae_encoder'], stages['vae_decoder'], net.vae.config)
    return net
