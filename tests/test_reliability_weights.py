"""Problem 1 (issue "Nothing lost, nothing run, nothing silent"): no weight file can run pickled code.

A file carrying a malicious ``__reduce__`` is planted, one at a time, in place of every file the evaluation
metrics, the validation metric and the LPIPS loss read (torchvision's ImageNet trunks, pyiqa's DISTS and FID
files, the lpips wheel's linear layers). Each must be refused with its path before anything in it runs.
"""
import os
import shutil

import pytest
import torch

from basicsr.losses import build_loss

import tola_plugin  # noqa: F401
from tola_plugin.checkpoints import metric_weights as W
from metric_weight_fakes import write_fake_metric_weights


class Payload:
    """Unpickling this object creates a folder: proof that code ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker, )


def plant(path, marker):
    torch.save({'weight': torch.zeros(1), 'payload': Payload(marker)}, path)


@pytest.fixture(scope='module')
def clean_home(tmp_path_factory):
    """A TORCH_HOME with (fake, small) copies of every metric file, plus a copy of the lpips wheel's files."""
    home = tmp_path_factory.mktemp('torch_home')
    write_fake_metric_weights(str(home))
    wheel = home / 'lpips_wheel'
    for weight in (W.LPIPS_ALEX_LINEAR, W.LPIPS_VGG_LINEAR):
        os.makedirs(wheel / os.path.dirname(weight.name), exist_ok=True)
        shutil.copy(os.path.join(W.store_dir(W.LPIPS_WHEEL), weight.name), wheel / weight.name)
    return home


@pytest.fixture
def home(clean_home, tmp_path, monkeypatch):
    """A private copy of the clean home, pointed at by TORCH_HOME and by the lpips wheel store."""
    copy = tmp_path / 'home'
    shutil.copytree(clean_home, copy)
    monkeypatch.setenv('TORCH_HOME', str(copy))
    real_store_dir = W.store_dir
    monkeypatch.setattr(W, 'store_dir', lambda store: str(copy / 'lpips_wheel')
                        if store == W.LPIPS_WHEEL else real_store_dir(store))
    return copy


def build_metric(name):
    from tola_plugin.metrics.image_metrics import build_paired_metric
    return build_paired_metric(name)


def fid(tmp_path):
    from tola_plugin.metrics.image_metrics import fid_between_dirs
    return fid_between_dirs(str(tmp_path), str(tmp_path))


def validation_dists(tmp_path):
    import numpy as np

    from tola_plugin.metrics import tola_iqa_metric
    tola_iqa_metric._metric.cache_clear()  # built networks are cached per process
    img = np.zeros((32, 32, 3), np.uint8)
    return tola_iqa_metric.calculate_tola_dists(img, img)


CASES = {  # what reads the file -> (the file, how to make it read)
    'evaluate dists: torchvision VGG16': (W.VGG16, lambda tmp: build_metric('dists')),
    'evaluate dists: pyiqa DISTS weights': (W.DISTS_WEIGHTS, lambda tmp: build_metric('dists')),
    'evaluate lpips: torchvision AlexNet': (W.ALEXNET, lambda tmp: build_metric('lpips')),
    'evaluate lpips: lpips linear layers': (W.LPIPS_ALEX_LINEAR, lambda tmp: build_metric('lpips')),
    'evaluate fid: pyiqa InceptionV3': (W.FID_INCEPTION, fid),
    'validation calculate_tola_dists': (W.DISTS_WEIGHTS, validation_dists),
    'LPIPSLoss: torchvision VGG16': (W.VGG16, lambda tmp: build_loss({'type': 'LPIPSLoss'})),
    'LPIPSLoss: lpips linear layers': (W.LPIPS_VGG_LINEAR, lambda tmp: build_loss({'type': 'LPIPSLoss'})),
}


@pytest.mark.parametrize('case', sorted(CASES))
def test_a_weight_file_carrying_code_is_refused_by_name(case, home, tmp_path):
    weight, read = CASES[case]
    path = os.path.join(W.store_dir(weight.store), weight.name)
    marker = str(tmp_path / 'code_ran')
    plant(path, marker)
    with pytest.raises(ValueError) as err:
        read(tmp_path)
    assert not os.path.exists(marker), f'{case}: the pickled code ran'
    assert path in str(err.value), str(err.value)


def test_library_loads_are_weights_only_inside_the_guard(tmp_path):
    """pyiqa and torchvision pass weights_only=False; inside the guard that cannot run code, and outside it
    torch.load is torch's own again."""
    from tola_plugin.utils.checkpoint_io import UnsafeCheckpointError, weights_only_loads
    original = torch.load
    path, marker = str(tmp_path / 'evil.pth'), str(tmp_path / 'code_ran')
    plant(path, marker)
    with weights_only_loads():
        with weights_only_loads():  # nesting keeps the guard
            pass
        with pytest.raises(UnsafeCheckpointError, match='evil.pth'):
            torch.load(path, weights_only=False)
        fine = str(tmp_path / 'fine.pth')
        torch.save({'w': torch.ones(2)}, fine)
        assert torch.equal(torch.load(fine, weights_only=False)['w'], torch.ones(2))
    assert torch.load is original
    assert not os.path.exists(marker)


def test_basicsr_load_network_is_weights_only(tmp_path):
    """BasicSR's own ``load_network`` (stock archs, path.pretrain_network_g) refuses a pickled-code file."""
    from basicsr.models.base_model import BaseModel
    path, marker = str(tmp_path / 'net_g_evil.pth'), str(tmp_path / 'code_ran')
    plant(path, marker)
    model = BaseModel.__new__(BaseModel)
    model.opt = {'dist': False, 'num_gpu': 0}
    with pytest.raises(ValueError, match='net_g_evil.pth'):
        model.load_network(torch.nn.Linear(1, 1), path, strict=True, param_key='params')
    assert not os.path.exists(marker)
