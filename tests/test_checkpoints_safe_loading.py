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
from tola_plugin import metric_weights as W
from tola_plugin.assets.rendered_samples import samples_dir
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


# ------------------------------------------------------------------- issue 33 item 8: bad merged models, one line
@pytest.fixture(scope='module')
def merged_parts(tmp_path_factory):
    """A good tiny merged file: (path, its tensors, its metadata, its options)."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file

    from inference_testing import write_tiny_merged
    path = write_tiny_merged(tmp_path_factory.mktemp('merged') / 'good.safetensors')
    with safe_open(path, 'pt') as f:
        metadata = f.metadata()
    return path, load_file(path), metadata, json.loads(metadata['options'])


def _altered(case, state, metadata, options):
    """The tensors and metadata of the file of ``case``."""
    import json
    key = 'idm.conv_in.weight'
    return {
        'shape': ({**state, key: torch.zeros(1, 1, 1, 1)}, metadata),
        'dtype': ({**state, key: state[key].half()}, metadata),
        'missing tensor': ({k: v
                            for k, v in state.items() if k != key}, metadata),
        'other network': (state, {**metadata, 'options': json.dumps({'steps': 200, 'eta': 0.0})}),
        'extra keyword': (state, {**metadata, 'options': json.dumps({**options, 'lora_rnak': 4})}),
        'bad value': (state, {**metadata, 'options': json.dumps({**options, 'timestep': 'abc'})}),
        'malformed metadata': (state, {**metadata, 'options': '{not json'}),
        'missing metadata': (state, {'format': metadata['format']}),
        'no metadata': (state, None),
    }[case]


@pytest.mark.parametrize('case,needle', [
    ('shape', 'tensor idm.conv_in.weight is torch.float32 (1, 1, 1, 1), the network its options describe expects '
     'torch.float32 (16, 6, 3, 3)'),
    ('dtype', 'tensor idm.conv_in.weight is torch.float16, but idm.conv_in.bias is torch.float32: a merged file holds '
     'one precision'),
    ('missing tensor', "1 missing ['idm.conv_in.weight']"),
    ('other network', "options.steps: unknown option of TOLANet (did you mean 'timestep'?)"),
    ('extra keyword', "options.lora_rnak: unknown option of TOLANet (did you mean 'lora_rank'?)"),
    ('bad value', "do not build a TOLANet: TOLANet: timestep must be an integer in [0, 999], got 'abc'"),
    ('malformed metadata', 'metadata "options" is not JSON'),
    ('missing metadata', 'metadata "options" missing'),
    ('no metadata', 'is not a merged TOLA model (metadata format None'),
])
def test_a_bad_merged_model_is_one_line_naming_the_file(merged_parts, tmp_path, monkeypatch, capsys, case, needle):
    from safetensors.torch import save_file

    from tola_cli import infer
    _, state, metadata, options = merged_parts
    state, metadata = _altered(case, state, metadata, options)
    model = str(tmp_path / 'bad.safetensors')
    save_file(state, model, metadata=metadata)
    image = os.path.join(samples_dir(), 'line_1x4.png')
    monkeypatch.setattr('sys.argv', ['tola-infer'])
    with pytest.raises(SystemExit) as exit_info:
        infer.cli(['-i', image, '-o', str(tmp_path / 'out'), '--model', model, '--device', 'cpu', '--backend', 'torch'])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(err) == 1 and err[0].startswith('error: '), err
    assert model in err[0] and needle in err[0], err[0]
