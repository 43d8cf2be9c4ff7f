"""Local weight files of the learned image metrics and the LPIPS loss, checked before any network is built.

pyiqa and torchvision download missing weights on first use. The evaluation must run offline, so every
file is looked up in its cache folder first and a missing one is a FileNotFoundError naming the file, the
folder it belongs in and where to get it. While a metric is built, downloading is disabled outright
(``no_downloads``), so a file we did not anticipate fails loudly instead of being fetched.

pyiqa and torchvision read their files with ``torch.load(weights_only=False)``, which runs any code pickled
into the file. Every file is therefore read weights-only before a library sees it (``require_metric_weights``
refuses a file that needs code, naming it), and the libraries' own loads run weights-only inside
``no_downloads`` (``checkpoint_io.weights_only_loads``).

Folders (both follow ``$TORCH_HOME``, default ``~/.cache/torch``):
- torchvision backbones: ``torch.hub.get_dir()/checkpoints``
- pyiqa calibration / FID weights: ``torch.hub.get_dir()/pyiqa``

A run's option file is checked at start (``require_run_weights``, called by the launchers' option parser): every
validation metric and training loss that reads a weight file, ours and BasicSR's ``PerceptualLoss``, is looked up,
and the missing ones are one error naming each file, where it comes from, and the ``--force_yml`` override that runs
without that part.
"""
import contextlib
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

import torch

from tola_plugin.utils.checkpoint_io import check_weights_file, safe_torch_load, weights_only_loads

TORCHVISION = 'torchvision'
PYIQA = 'pyiqa'
LPIPS_WHEEL = 'lpips-wheel'


@dataclass(frozen=True)
class WeightFile:
    """One pretrained file: exact cache name, which store it lives in, what it is, where to get it."""
    name: str
    store: str
    what: str
    url: str


ALEXNET = WeightFile('alexnet-owt-7be5be79.pth', TORCHVISION, 'torchvision AlexNet IMAGENET1K_V1 (LPIPS backbone)',
                     'https://download.pytorch.org/models/alexnet-owt-7be5be79.pth')
VGG16 = WeightFile('vgg16-397923af.pth', TORCHVISION, 'torchvision VGG16 IMAGENET1K_V1 (DISTS backbone)',
                   'https://download.pytorch.org/models/vgg16-397923af.pth')
# The LPIPS v0.1 AlexNet linear heads ship inside the `lpips` wheel; pyiqa's LPIPS_v0.1_alex-df73285e.pth holds
# the same tensors under the same keys (docs/evaluation.md, "Weight files"), so no download is ever needed for them.
LPIPS_ALEX_LINEAR = WeightFile('weights/v0.1/alex.pth', LPIPS_WHEEL, 'LPIPS v0.1 AlexNet linear layers',
                               'the lpips==0.1.4 wheel (pip install lpips)')
LPIPS_VGG_LINEAR = WeightFile('weights/v0.1/vgg.pth', LPIPS_WHEEL, 'LPIPS v0.1 VGG linear layers (LPIPS loss)',
                              'the lpips==0.1.4 wheel (pip install lpips)')
DISTS_WEIGHTS = WeightFile(
    'DISTS_weights-f5e65c96.pth', PYIQA, 'DISTS alpha/beta weights',
    'https://huggingface.co/chaofengc/IQA-PyTorch-Weights/resolve/main/'
    'DISTS_weights-f5e65c96.pth')
FID_INCEPTION = WeightFile(
    'pt_inception-2015-12-05-6726825d.pth', PYIQA, 'FID InceptionV3 (pytorch-fid port)',
    'https://huggingface.co/chaofengc/IQA-PyTorch-Weights/resolve/main/'
    'pt_inception-2015-12-05-6726825d.pth')

# Which files each learned metric needs. PSNR and SSIM need none.
METRIC_WEIGHTS = {
    'lpips': (ALEXNET, LPIPS_ALEX_LINEAR),
    'dists': (VGG16, DISTS_WEIGHTS),
    'fid': (FID_INCEPTION, ),
}
# Files of the training loss LPIPS-VGG (losses/lpips_loss.py): the trunk only with pretrained_backbone.
LPIPS_LOSS_WEIGHTS = (VGG16, LPIPS_VGG_LINEAR)
# The registered BasicSR metrics (metrics/tola_iqa_metric.py, ``val.metrics.<name>.type``) that need weight files,
# and the metric whose files they are.
METRIC_TYPES = {'calculate_tola_lpips': 'lpips', 'calculate_tola_dists': 'dists'}
# Where BasicSR's VGGFeatureExtractor (its PerceptualLoss, ESRGAN) looks first, relative to the current directory;
# otherwise torchvision's cache.
BASICSR_VGG_DIR = os.path.join('experiments', 'pretrained_models')


def torchvision_cache_dir() -> str:
    """Folder torchvision loads ImageNet backbones from (read at call time, like torchvision does)."""
    return os.path.join(torch.hub.get_dir(), 'checkpoints')


def pyiqa_cache_dir() -> str:
    """Folder pyiqa loads its calibration and FID weights from."""
    return os.path.join(torch.hub.get_dir(), 'pyiqa')


def store_dir(store: str) -> str:
    if store == TORCHVISION:
        return torchvision_cache_dir()
    if store == PYIQA:
        return pyiqa_cache_dir()
    if store == LPIPS_WHEEL:
        import lpips
        return os.path.dirname(os.path.abspath(lpips.__file__))
    raise ValueError(f'unknown weight store {store!r}')


def weight_path(weight: WeightFile) -> str:
    return os.path.join(store_dir(weight.store), weight.name)


def require_weight_files(user: str, files) -> Dict[str, str]:
    """Check that each ``WeightFile`` of ``files`` exists and reads weights-only; return {file name: path}.

    Raises FileNotFoundError naming the file, the folder it must be in, and where to get it, or
    ``UnsafeCheckpointError`` (a ValueError) naming a file that is corrupt or needs pickled code to load.
    ``user`` (the metric or loss) starts the message.
    """
    paths = {}
    for weight in files:
        path = weight_path(weight)
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f'{user}: {weight.what} not found: expected file {weight.name!r} in folder '
                f'{os.path.dirname(path)!r} (set TORCH_HOME to change the cache root). Nothing is downloaded at '
                f'run time; copy the file there from {weight.url}')
        check_weights_file(path, f'{user}: {weight.what}')
        paths[weight.name] = path
    return paths


def require_metric_weights(metric: str) -> Dict[str, str]:
    """``require_weight_files`` for every file ``metric`` needs ({} for PSNR/SSIM)."""
    return require_weight_files(metric, METRIC_WEIGHTS.get(metric, ()))


def assert_loaded(net: torch.nn.Module, path: str, what: str) -> None:
    """pyiqa and lpips load calibration weights with strict=False; make sure every tensor of the file really
    landed in ``net`` (a file with foreign keys must not leave random layers behind silently)."""
    stored = safe_torch_load(path, what)
    stored = stored.get('params', stored) if isinstance(stored, dict) else stored
    own = net.state_dict()
    for key, value in stored.items():
        key = key[len('module.'):] if key.startswith('module.') else key
        if key not in own or own[key].shape != value.shape or not torch.equal(own[key].cpu(), value.cpu()):
            raise ValueError(f'{what} from {path!r}: tensor {key!r} did not load into {type(net).__name__}')


def _refuse_download(url, *args, **kwargs):
    raise RuntimeError(f'refusing to download {url!r}: evaluation weights must be local files '
                       f'(see tola_plugin/metric_weights.py and docs/evaluation.md)')


@contextlib.contextmanager
def no_downloads() -> Iterator[None]:
    """Build pyiqa/torchvision/lpips networks with downloading disabled, every ``torch.load`` weights-only, and
    pyiqa pointed at ``pyiqa_cache_dir()``.

    pyiqa fixes its cache folder when it is imported; re-pointing it here makes both libraries follow the
    current ``$TORCH_HOME``. The download functions are swapped for one that raises, restored on exit.
    """
    import torch.hub
    try:
        from pyiqa.utils import download_util
    except ImportError:  # pyiqa is an evaluation extra (the GPU check's image lacks it): none of its code can run
        download_util = None
    saved_hub = torch.hub.download_url_to_file
    torch.hub.download_url_to_file = _refuse_download
    if download_util is not None:
        saved = (download_util.DEFAULT_CACHE_DIR, download_util.download_url_to_file)
        download_util.DEFAULT_CACHE_DIR = pyiqa_cache_dir()
        download_util.download_url_to_file = _refuse_download
    try:
        with weights_only_loads():
            yield
    finally:
        torch.hub.download_url_to_file = saved_hub
        if download_util is not None:
            download_util.DEFAULT_CACHE_DIR, download_util.download_url_to_file = saved


def vgg_weight_file(vgg_type: str) -> WeightFile:
    """torchvision's ImageNet file of BasicSR's ``PerceptualLoss(vgg_type=...)`` (e.g. vgg19-dcbb9e9d.pth for
    ESRGAN's 'vgg19'), named by torchvision's own weights table."""
    import torchvision.models
    weights = getattr(torchvision.models, f'{str(vgg_type).upper()}_Weights', None)
    if weights is None:
        raise ValueError(f'PerceptualLoss: vgg_type {vgg_type!r} is not a torchvision VGG')
    url = weights.IMAGENET1K_V1.url
    return WeightFile(
        os.path.basename(url), TORCHVISION, f'torchvision {vgg_type} IMAGENET1K_V1 (BasicSR PerceptualLoss)', url)


def run_weight_files(opt: Mapping) -> List[Tuple[str, str, Tuple[WeightFile, ...]]]:
    """``(where, override, files)`` for every part of a parsed option dict that reads weight files: ``where`` names the
    entry (``val.metrics.lpips (calculate_tola_lpips)``), ``override`` is the ``--force_yml`` entry that leaves it out
    (``val:metrics:lpips=~``)."""
    parts = []
    if opt.get('is_train'):
        for key, loss in (opt.get('train') or {}).items():
            kind = loss.get('type') if isinstance(loss, Mapping) else None
            if kind is not None and loss.get('loss_weight', 1.0) == 0:
                continue  # off: TOLAModel builds no loss of weight 0 (the demo's LPIPS-VGG without its file)
            if kind == 'LPIPSLoss':
                files = LPIPS_LOSS_WEIGHTS if loss.get('pretrained_backbone', True) else (LPIPS_VGG_LINEAR, )
            elif kind == 'PerceptualLoss':
                vgg = vgg_weight_file(loss.get('vgg_type', 'vgg19'))
                files = () if os.path.isfile(os.path.join(BASICSR_VGG_DIR, vgg.name)) else (vgg, )
            else:
                continue
            parts.append((f'train.{key} ({kind})', f'train:{key}=~', files))
    for name, metric in (((opt.get('val') or {}).get('metrics')) or {}).items():
        kind = metric.get('type') if isinstance(metric, Mapping) else None
        if kind in METRIC_TYPES:
            parts.append((f'val.metrics.{name} ({kind})', f'val:metrics:{name}=~', METRIC_WEIGHTS[METRIC_TYPES[kind]]))
    return parts


def require_run_weights(opt: Mapping) -> None:
    """Check the weight files of every part of a run (``run_weight_files``) before anything is built. The missing
    ones are one FileNotFoundError, one line per file (the part that reads it, the file, its folder, where it comes
    from), then the choice: copy them there, or run without those parts (their ``--force_yml`` overrides). A corrupt
    file or one that needs pickled code is ``require_weight_files``' error."""
    missing, overrides = [], []
    for where, override, files in run_weight_files(opt):
        absent = [w for w in files if not os.path.isfile(weight_path(w))]
        for weight in absent:
            missing.append(f'- {where}: {weight.name} in {os.path.dirname(weight_path(weight))} (from {weight.url})')
        if absent:
            overrides.append(override)
        else:
            require_weight_files(where, files)
    if missing:
        raise FileNotFoundError('weight files of this run are missing (nothing is downloaded at run time):\n' +
                                '\n'.join(missing) + '\nCopy them there (TORCH_HOME sets the folder), or run without '
                                f'{"that part" if len(overrides) == 1 else "those parts"}: --force_yml '
                                f'{" ".join(overrides)}')


def missing_metric_weights(metric: str) -> Optional[str]:
    """None when every file ``metric`` needs is present, else the message ``require_metric_weights`` raises
    (which file, which folder, where to get it)."""
    try:
        require_metric_weights(metric)
    except FileNotFoundError as err:
        return str(err)
    return None
