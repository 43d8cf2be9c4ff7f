"""Loading transocr.pth: both official layouts at full size from the manifest, and every bad-file case."""
import os
import pickle

import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs.backbone_builder import load_transocr
from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.checkpoints.transocr import transocr_state_dict

DATA = os.path.join(os.path.dirname(__file__), 'data', 'transocr')
MANIFEST = os.path.join(DATA, 'transocr_manifest.tsv')  # every key and shape of the official model (docs/transocr.md)
TINY = dict(embed_dim=16, pe_max_len=64, stem_channels=(4, 8), stage_channels=(8, 8, 16, 16), stage_blocks=(1, 1, 1, 1),
            num_heads=2, ff_dim=32, num_classes=40)


def manifest_state():
    """Official-layout tensors with the manifest's keys and shapes; distinct constant values per tensor."""
    state = {}
    for index, line in enumerate(open(MANIFEST, encoding='utf-8').read().splitlines()):
        key, shape = line.split('\t')
        shape = [int(s) for s in shape.strip('[]').split(',') if s.strip()]
        if key.endswith('num_batches_tracked'):
            state[key] = torch.tensor(index, dtype=torch.long)
        else:
            state[key] = torch.full(shape, float(index) / 1000.0)
    return state


@pytest.mark.parametrize('layout', ['state_dict', 'dataparallel'])
def test_full_size_manifest_loads_strictly(tmp_path, layout):
    state = manifest_state()
    assert len(state) == 314 and sum(v.numel() for v in state.values()) == 87_520_435
    path = tmp_path / 'transocr.pth'
    if layout == 'state_dict':
        torch.save({'state_dict': state}, path)
    else:
        torch.save({f'module.{k}': v for k, v in state.items()}, path)
    model = load_transocr(str(path))
    os.remove(path)
    assert not model.training
    loaded = model.state_dict()
    for key in ('embedding_word.lut.weight', 'pe.pe', 'encoder.layer3.5.bn2.running_var', 'decoder.mul_layernorm3.a_2',
                'generator_word.proj.bias'):
        assert torch.equal(loaded[key], state[key]), key  # the checkpoint's values, incl. its PE table
    assert int(loaded['encoder.bn1.num_batches_tracked']) == int(state['encoder.bn1.num_batches_tracked'])


def test_layout_rewrites():
    state = TransOCR(**TINY).state_dict()
    expected = dict(state)
    assert transocr_state_dict({f'module.module.{k}': v for k, v in state.items()}).keys() == expected.keys()
    assert transocr_state_dict({'state_dict': state}).keys() == expected.keys()
    assert transocr_state_dict(state).keys() == expected.keys()  # our own bare state dict


def _tiny_file(tmp_path, mutate=None, name='transocr.pth'):
    state = dict(TransOCR(**TINY).state_dict())
    if mutate:
        state = mutate(state)
    path = tmp_path / name
    torch.save({'state_dict': state}, path)
    return str(path)


def test_tiny_round_trip(tmp_path):
    torch.manual_seed(1)
    source = TransOCR(**TINY)
    path = tmp_path / 'ocr.pth'
    torch.save({f'module.{k}': v for k, v in source.state_dict().items()}, path)
    model = load_transocr(str(path), **TINY)
    images = torch.rand(1, 3, 128, 512)
    source.eval()
    with torch.no_grad():
        assert torch.equal(model.greedy_decode(images, 4)[0], source.greedy_decode(images, 4)[0])


def test_missing_file_says_where_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_transocr(str(tmp_path / 'checkpoints' / 'transocr.pth'))
    message = str(err.value)
    assert 'transocr.pth' in message and 'DiffTSR.ckpt' in message and 'checkpoints/transocr.pth' in message


def test_truncated_file_is_refused(tmp_path):
    path = _tiny_file(tmp_path)
    data = open(path, 'rb').read()
    with open(path, 'wb') as handle:
        handle.write(data[:len(data) // 2])
    with pytest.raises(ValueError, match='truncated, corrupt, or carrying code'):
        load_transocr(path, **TINY)


def test_wrong_key_is_refused(tmp_path):

    def rename(state):
        state['decoder.pff.w_9.weight'] = state.pop('decoder.pff.w_1.weight')
        return state

    with pytest.raises(KeyError, match=r'decoder\.pff\.w_1\.weight') as err:
        load_transocr(_tiny_file(tmp_path, rename), **TINY)
    assert 'w_9' in str(err.value) and 'TransOCR' in str(err.value)


def test_wrong_shape_is_refused(tmp_path):

    def reshape(state):
        state['generator_word.proj.bias'] = torch.zeros(41)
        return state

    with pytest.raises(ValueError, match=r'generator_word\.proj\.bias.*\(41,\).*\(40,\)'):
        load_transocr(_tiny_file(tmp_path, reshape), **TINY)


def test_full_size_checkpoint_into_tiny_config_is_refused(tmp_path):
    path = _tiny_file(tmp_path)
    with pytest.raises(KeyError, match='175 missing key'):
        load_transocr(path)  # default (full-size) architecture vs tiny weights


class _Payload:
    """Unpickling this would run code (create a marker file)."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, 'w'))


def test_pickle_carrying_code_is_refused_and_not_run(tmp_path):
    marker = tmp_path / 'pwned'
    path = tmp_path / 'transocr.pth'
    with open(path, 'wb') as handle:
        pickle.dump({'state_dict': {'x': _Payload(str(marker))}}, handle)
    with pytest.raises(ValueError, match='carrying code'):
        load_transocr(str(path), **TINY)
    assert not marker.exists()


def test_other_bad_layouts(tmp_path):
    path = tmp_path / 'list.pth'
    torch.save([torch.zeros(1)], path)
    with pytest.raises(ValueError, match='expected a dict of tensors'):
        load_transocr(str(path), **TINY)
    state = dict(TransOCR(**TINY).state_dict())
    mixed = {('module.' + k if i % 2 else k): v for i, (k, v) in enumerate(state.items())}
    with pytest.raises(KeyError, match='DataParallel prefix'):
        transocr_state_dict(mixed)
    with pytest.raises(ValueError, match='not a tensor'):
        transocr_state_dict({'state_dict': {**state, 'encoder.conv1.weight': 3}})
    with pytest.raises(ValueError, match='empty'):
        transocr_state_dict({'state_dict': {}})
