"""Numerical equivalence of our TransOCR + text prior with the official code, on seeded random weights.

Fixture ``tests/data/transocr/official_outputs.npz`` was produced by ``tests/data/transocr/generate_fixture.py``,
run outside the repo against the official DiffTSR code (commit f9839633, ``model/TDM/models/transocr.py`` and
``text_prediction.py``, CPU, fp32): the full-size official model loaded with ``official_random_state()``
below (saved as ``{'state_dict': ...}``), fed two of DiffTSR's own LR test images.
"""
import math
import os

import numpy as np
import pytest
import torch

import tola_plugin  # noqa: F401
from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.text.text_prior import transocr_to_idm
from tola_plugin.utils.transocr_checkpoint import load_transocr

DATA = os.path.join(os.path.dirname(__file__), 'data', 'transocr')
SEED = 20261122
TOL = 1e-5


def official_random_state(shapes, base_pe):
    """Deterministic official-layout weights: key i drawn from its own generator seeded SEED + i.

    ``shapes``: ordered {key: shape} (the manifest order); ``base_pe``: the sinusoidal table, perturbed by
    0.01 noise so the test proves the checkpoint's ``pe.pe`` is the one used. Scales keep activations O(1).
    """
    state = {}
    for index, (key, shape) in enumerate(shapes.items()):
        gen = torch.Generator().manual_seed(SEED + index)
        shape = tuple(shape)
        if key.endswith('num_batches_tracked'):
            value = torch.tensor(0, dtype=torch.long)
        elif key.endswith('running_var'):
            value = 0.5 + torch.rand(shape, generator=gen)
        elif key.endswith('running_mean'):
            value = 0.1 * torch.randn(shape, generator=gen)
        elif key == 'pe.pe':
            value = base_pe + 0.01 * torch.randn(shape, generator=gen)
        elif key == 'embedding_word.lut.weight':
            value = torch.randn(shape, generator=gen)
        elif len(shape) >= 2:
            # the generator 4x larger so that step probabilities spread over (0, 1), not all ~1/7937
            gain = 4.0 if key == 'generator_word.proj.weight' else 1.0
            value = torch.randn(shape, generator=gen) * (gain / math.sqrt(math.prod(shape[1:])))
        elif key.endswith('.weight') or key.endswith('a_2'):  # BatchNorm / LayerNorm gains
            value = 1.0 + 0.1 * torch.randn(shape, generator=gen)
        else:  # biases
            value = 0.1 * torch.randn(shape, generator=gen)
        state[key] = value
    return state


def rel_err(ours, ref):
    ours, ref = np.asarray(ours, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(ours - ref).max() / max(np.abs(ref).max(), 1e-30))


@pytest.fixture(scope='module')
def fixture():
    return dict(np.load(os.path.join(DATA, 'official_outputs.npz')))


@pytest.fixture(scope='module')
def model_and_images(tmp_path_factory, fixture):
    """Our full-size TransOCR loaded through the real loader from the official layout, and the inputs."""
    import cv2
    fresh = TransOCR()
    shapes = {k: v.shape for k, v in fresh.state_dict().items()}
    state = official_random_state(shapes, fresh.pe.pe)
    del fresh
    # the weights must be the ones the fixture was made with (guards against RNG changes across torch versions)
    checksum = np.array([float(state[k].double().sum()) for k in ('encoder.conv1.weight', 'pe.pe',
                                                                  'generator_word.proj.weight')])
    np.testing.assert_allclose(checksum, fixture['weight_checksum'], rtol=1e-9)
    path = tmp_path_factory.mktemp('transocr') / 'transocr.pth'
    torch.save({'state_dict': state}, path)
    del state
    model = load_transocr(str(path))
    os.remove(path)
    images = []
    for name in ('lr_synth_0.png', 'lr_real_7.png'):
        bgr = cv2.imread(os.path.join(DATA, name), cv2.IMREAD_COLOR)
        images.append(torch.from_numpy(bgr[:, :, ::-1].copy()).permute(2, 0, 1).float() / 255.0)
    images = torch.stack(images)
    np.testing.assert_allclose(images.double().sum((1, 2, 3)).numpy(), fixture['image_checksum'], rtol=1e-12)
    return model, images


def test_official_preprocess_equals_strided_slice(model_and_images, fixture):
    model, images = model_and_images
    pre = model.preprocess(images)
    assert tuple(pre.shape) == (2, 3, 32, 256)
    np.testing.assert_array_equal(pre.numpy(), fixture['preprocessed'])
    assert torch.equal(pre, images[:, :, ::4, ::2])  # SPEC appendix: nearest 128x512 -> 32x256


def test_encoder_matches_official(model_and_images, fixture):
    model, images = model_and_images
    with torch.no_grad():
        feature = model.encoder(model.preprocess(images))
    assert tuple(feature.shape) == (2, 1024, 2, 16)
    assert rel_err(feature, fixture['conv_feature']) <= TOL


def test_teacher_forced_logits_match_official(model_and_images, fixture):
    model, images = model_and_images
    targets = torch.from_numpy(fixture['targets'])
    assert (targets == -100).any(), 'the fixture should exercise padding'
    with torch.no_grad():
        logits = model(images, targets)
    assert tuple(logits.shape) == tuple(fixture['teacher_logits'].shape)
    valid = (targets != -100).numpy()  # rows after END are ignored by the CE loss and not compared
    assert rel_err(logits.numpy()[valid], fixture['teacher_logits'][valid]) <= TOL


@pytest.mark.parametrize('incremental', [True, False])
def test_greedy_and_text_prior_match_official(model_and_images, fixture, incremental):
    model, images = model_and_images
    with torch.no_grad():
        ids, probs = model.greedy_decode(images, max_steps=24, incremental=incremental)
    np.testing.assert_array_equal(ids.numpy(), fixture['greedy_ids'])
    # the default (official full re-run) is bit-identical; the incremental shortcut rounds differently
    assert rel_err(probs, fixture['greedy_probs']) <= (1e-4 if incremental else TOL)
    tokens, conf = transocr_to_idm(ids, probs)
    np.testing.assert_array_equal(tokens.numpy(), fixture['official_label_index'])
    assert float(conf.max()) <= 1.0 and float(conf.min()) >= 0.0


def test_official_postprocessing_on_crafted_sequences(fixture):
    """Crafted greedy sequences (END cuts, START inside the text, '\\xad', unknown and traditional characters,
    a length-changing conversion, > 23 tokens) fed through the official predict() with a stub recognizer."""
    ids = torch.from_numpy(fixture['crafted_ids'])
    probs = torch.from_numpy(fixture['crafted_probs'])
    tokens, conf = transocr_to_idm(ids, probs)
    np.testing.assert_array_equal(tokens.numpy(), fixture['crafted_label_index'])
    assert (conf >= 0).all() and (conf <= 1).all()
