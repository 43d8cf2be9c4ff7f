"""TransOCR architecture: sizes, official LayerNorm / PE, preprocessing, decoding consistency, gradients."""
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from basicsr.archs import build_network
from basicsr.utils.registry import ARCH_REGISTRY

import tola_plugin  # noqa: F401  (registers the arch)
from tola_plugin.archs.precision import StageDtypes
from tola_plugin.archs.transocr_arch import EndFlag, TransOCR, TransOCRLayerNorm, cuda_copy
from tola_plugin.ocr.transocr_recognizer import read_text
from tola_plugin.runtime.routed_stages import RoutedStages
from tola_plugin.runtime.text_prior_stages import prior_stage_modules
from tola_plugin.text.alphabets import TRANSOCR_END, encode_transocr, transocr_classes
from tola_plugin.text.text_prior import difftsr_prediction_text, transocr_to_idm
from numerics import EXACT_TOL, abs_err, assert_clear_argmax, equivalent, within

DATA = os.path.join(os.path.dirname(__file__), 'data', 'transocr')
MANIFEST = os.path.join(DATA, 'transocr_manifest.tsv')  # every key and shape of the official model (docs/transocr.md)
TINY = dict(embed_dim=16, pe_max_len=64, stem_channels=(4, 8), stage_channels=(8, 8, 16, 16), stage_blocks=(1, 2, 1, 1),
            num_heads=2, ff_dim=32)


def tiny(seed=0, **opts):
    torch.manual_seed(seed)
    model = TransOCR(**{**TINY, **opts})
    # non-trivial BatchNorm statistics, so eval-mode BN is not the identity
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    return model.eval()


def test_full_size_counts_and_manifest():
    model = TransOCR()
    assert sum(p.numel() for p in model.parameters()) == 83_904_779
    state = model.state_dict()
    assert len(state) == 314
    assert sum(v.numel() for v in state.values()) == 87_520_435
    manifest = [line.split('\t') for line in open(MANIFEST, encoding='utf-8').read().splitlines()]
    assert [k for k, _ in manifest] == list(state)
    for key, shape in manifest:
        assert list(state[key].shape) == eval(shape), key  # noqa: S307  (manifest shapes are '[a, b]')
    assert state['pe.pe'].shape == (1, 7000, 512)


def test_registered_and_buildable_from_options():
    assert ARCH_REGISTRY.get('TransOCR') is TransOCR
    model = build_network({'type': 'TransOCR', **TINY})
    assert isinstance(model, TransOCR) and model.decoder.pff.w_1.out_features == 32


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match='preprocess'):
        TransOCR(**TINY, preprocess='bicubic')
    with pytest.raises(ValueError, match='num_heads'):
        TransOCR(**{**TINY, 'num_heads': 3})
    with pytest.raises(ValueError, match='stage_blocks'):
        TransOCR(**{**TINY, 'stage_blocks': (1, 1, 1)})


def test_layernorm_is_the_official_unbiased_std_form():
    norm = TransOCRLayerNorm(8)
    with torch.no_grad():
        norm.a_2.uniform_(0.5, 1.5)
        norm.b_2.uniform_(-0.5, 0.5)
    x = torch.randn(3, 5, 8) * 3 + 1
    expected = norm.a_2 * (x - x.mean(-1, keepdim=True)) / (x.std(-1, unbiased=True, keepdim=True) + 1e-6) + norm.b_2
    torch.testing.assert_close(norm(x), expected, rtol=0, atol=0)  # the same operations in the same order
    # and it is NOT torch's LayerNorm (biased variance inside a sqrt)
    assert not torch.allclose(norm(x), F.layer_norm(x, (8, ), norm.a_2, norm.b_2, eps=1e-6), atol=1e-4)


@pytest.mark.numerics
def test_positional_table_matches_the_sinusoid():
    pe = TransOCR(**TINY).pe.pe[0].double()
    position = torch.arange(64, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, 16, 2, dtype=torch.float64) * -(math.log(10000.0) / 16))
    # float32 table vs float64: measured 8.8e-7, but the float32 angle (up to 63 rad) may be off by up to
    # 63 * 2^-24 = 3.8e-6 on any CPU, so the tolerance is 1e-4; a wrong frequency or phase is O(1) off
    within(abs_err(pe[:, 0::2], torch.sin(position * div)), 1e-4, 'sin columns vs float64')
    within(abs_err(pe[:, 1::2], torch.cos(position * div)), 1e-4, 'cos columns vs float64')
    with pytest.raises(ValueError, match='positional table'):
        TransOCR(**TINY).pe(65)


def test_difftsr_preprocess_is_nearest_stride_and_benchmark_is_pil_like():
    x = torch.rand(2, 3, 128, 512)
    model = TransOCR(**TINY)
    assert torch.equal(model.preprocess(x), x[:, :, ::4, ::2])
    assert float(model.preprocess(x).min()) >= 0.0  # [0, 1] kept, no normalisation
    from PIL import Image
    image = Image.open(os.path.join(DATA, 'lr_real_7.png')).convert('RGB')
    array = np.asarray(image, dtype=np.float32) / 255.0
    pil = np.asarray(image.resize((256, 32), Image.BILINEAR), dtype=np.float32) / 255.0
    pil = torch.from_numpy((pil - 0.5) / 0.5).permute(2, 0, 1)[None]
    ours = TransOCR(**TINY, preprocess='benchmark').preprocess(torch.from_numpy(array).permute(2, 0, 1)[None])
    assert ours.shape == (1, 3, 32, 256)
    # PIL rounds its output to uint8; ours stays float: agree within one uint8 step in [-1, 1] units (PIL is
    # integer arithmetic, ours float32 with ~1e-6 error: no kernel dependence at this scale)
    assert float((ours - pil).abs().max()) <= 2.0 / 255.0
    with pytest.raises(ValueError, match=r'\(B, C, H, W\)'):
        model.preprocess(torch.rand(3, 128, 512))


def test_encoder_output_size():
    model = tiny()
    with torch.no_grad():
        memory = model.encode(torch.rand(2, 3, 128, 512))
    assert memory.shape == (2, 32, 32)  # (2 x 16) image tokens of width 2 * embed_dim


# Greedy decoding and teacher forcing run the decoder on other sequence lengths (and the incremental mode on other
# GEMM shapes): equal in exact arithmetic, so the models and images below are float64 (docs/testing.md).


@pytest.mark.numerics
@pytest.mark.parametrize('incremental', [False, True])
def test_greedy_equals_teacher_forcing_on_its_own_output(incremental):
    model = tiny().double()
    images = torch.rand(3, 3, 128, 512, dtype=torch.float64)
    with torch.no_grad():
        ids, probs = model.greedy_decode(images, max_steps=10, incremental=incremental)
        logits = model(images, ids)  # decoder input = START + ids[:, :-1]
    assert ids.shape == probs.shape == (3, 10) and ids.dtype == torch.long
    soft = torch.softmax(logits, -1)
    assert_clear_argmax(logits, EXACT_TOL * float(logits.abs().max()), 'tiny TransOCR steps')
    assert torch.equal(soft.argmax(-1), ids)
    equivalent(probs, soft.max(-1).values, 'greedy vs teacher-forced step probabilities')
    assert float(probs.min()) > 0.0 and float(probs.max()) <= 1.0


def test_stop_at_end_stops_once_every_image_has_ended(monkeypatch):
    model = tiny()
    images = torch.rand(2, 3, 128, 512)
    # the scripted argmax of each step for images 0 and 1: image 0 ends at step 1, image 1 at step 3
    steps = [[5, 6], [TRANSOCR_END, 7], [8, 9], [9, TRANSOCR_END], [1, 1], [2, 2]]

    def scripted(tokens, position, cache):
        assert tokens.shape == (2, 1) and tokens[:, 0].tolist() == ([0, 0] if position == 0 else steps[position - 1])
        logits = torch.zeros(2, model.num_classes)
        logits[torch.arange(2), torch.tensor(steps[position])] = 10.0 + position
        return logits

    monkeypatch.setattr(model, 'decode_step', scripted)
    ids, probs = model.greedy_decode(images, max_steps=6, stop_at_end=True)
    assert ids.T.tolist() == steps[:4] and probs.shape == (2, 4)
    full_ids, full_probs = model.greedy_decode(images, max_steps=6)
    assert full_ids.T.tolist() == steps and torch.equal(full_probs[:, :4], probs)
    # the text prior reads the same tokens and confidences from both
    for got, want in zip(transocr_to_idm(ids, probs), transocr_to_idm(full_ids, full_probs)):
        assert torch.equal(got, want)
    # while an image has not ended, all steps run
    steps[3] = [9, 7]
    assert model.greedy_decode(images, max_steps=6, stop_at_end=True)[0].shape == (2, 6)


def test_a_late_end_check_decodes_one_step_more_and_the_same_text(monkeypatch):
    """``late_stop`` reads step k's "every image ended" after step k + 1 is queued (no wait on a GPU per step): the
    same steps, one more, and the text prior and ``read_text`` read the same; never past ``max_steps``."""
    model = tiny()
    images = torch.rand(2, 3, 128, 512)
    steps = [[5, 6], [TRANSOCR_END, 7], [8, 9], [9, TRANSOCR_END], [1, 1], [2, 2]]

    def scripted(tokens, position, cache):
        logits = torch.zeros(2, model.num_classes)
        logits[torch.arange(2), torch.tensor(steps[position])] = 10.0 + position
        return logits

    monkeypatch.setattr(model, 'decode_step', scripted)
    now_ids, now_probs = model.greedy_decode(images, max_steps=6, stop_at_end=True)
    late_ids, late_probs = model.greedy_decode(images, max_steps=6, stop_at_end=True, late_stop=True)
    assert now_ids.shape == (2, 4) and late_ids.T.tolist() == steps[:5]
    assert torch.equal(late_ids[:, :4], now_ids) and torch.equal(late_probs[:, :4], now_probs)
    for got, want in zip(transocr_to_idm(late_ids, late_probs), transocr_to_idm(now_ids, now_probs)):
        assert torch.equal(got, want)
    assert model.greedy_decode(images, max_steps=4, stop_at_end=True, late_stop=True)[0].shape == (2, 4)
    with pytest.raises(ValueError, match='needs stop_at_end=True'):
        model.greedy_decode(images, max_steps=4, late_stop=True)  # nothing to read late: not silently ignored


def test_the_end_flag_waits_only_for_the_step_before_on_simulated_cuda():
    """CUDA simulated: each copy's wait is recorded; pushing step k waits for step k - 1's copy only (step k's kernels
    are queued by then), and returns that step's flag."""
    waited, copies = [], []

    def copy(flag):
        number = len(copies)
        copies.append(number)
        return flag.clone(), lambda: waited.append(number)

    flag = EndFlag('cuda', copy=copy)
    assert flag.push(torch.tensor([True, False])) is False and waited == []  # no step before the first
    assert flag.push(torch.tensor([True, True])) is False and waited == [0]  # step 0's flag: not all ended
    assert flag.push(torch.tensor([True, True])) is True and waited == [0, 1]  # step 1's: all ended
    assert copies == [0, 1, 2]
    assert EndFlag('cpu').copy(torch.tensor(True))[1] is None  # the CPU's flag is there at once: no wait
    assert EndFlag(torch.device('cuda', 0)).copy is cuda_copy


@pytest.mark.numerics
def test_incremental_decoding_equals_full_rerun():
    model = tiny(seed=3).double()
    images = torch.rand(2, 3, 64, 256, dtype=torch.float64)
    with torch.no_grad():
        ids_a, probs_a = model.greedy_decode(images, max_steps=12, incremental=False)
        ids_b, probs_b = model.greedy_decode(images, max_steps=12, incremental=True)
        logits = model(images, ids_a)
    assert_clear_argmax(logits, EXACT_TOL * float(logits.abs().max()), 'tiny TransOCR steps')
    assert torch.equal(ids_a, ids_b)
    equivalent(probs_b, probs_a, 'incremental vs full-prefix step probabilities')


@pytest.mark.numerics
def test_the_text_prior_stages_compute_the_torch_route():
    """The two stages another runtime runs (encoder -> cross-attention keys/values; full prefix -> last logits),
    driven by the one greedy loop as the routed stage runner drives them, equal the torch decoding (float64), with
    the early stop at END; the encoder's output stays with the runner (only a handle is passed to each step)."""
    model = tiny(seed=5).double()
    modules = prior_stage_modules(model)
    images = torch.rand(2, 3, 128, 512, dtype=torch.float64)
    kept, calls = {}, []

    def runner(stage, *tensors):
        calls.append(stage)
        if stage == 'text_encoder':
            kept['memory'] = modules[stage](*tensors)
            return 'memory'
        tokens, handle = tensors
        assert handle == 'memory' and tokens.shape == (2, len(calls) - 1) and tokens.dtype == torch.long
        return modules[stage](tokens, kept[handle])

    net, fp32 = SimpleNamespace(transocr=model), StageDtypes.uniform(torch.float32)
    routed = RoutedStages(runner, fp32, 'routed')
    with torch.no_grad():
        for stop_at_end in (False, True):
            calls.clear()
            ids, probs = routed.read_text(net, images, 12, incremental=True, stop_at_end=stop_at_end)
            ref_ids, ref_probs = model.greedy_decode(images, max_steps=12, stop_at_end=stop_at_end)
            assert torch.equal(ids, ref_ids)
            equivalent(probs, ref_probs, 'text prior stages vs torch greedy decoding')
            assert calls == ['text_encoder'] + ['text_decoder'] * ids.shape[1]
        # images that read END at once: the loop stops after one step
        ended = torch.full((2, model.num_classes), -10.0, dtype=torch.float64)
        ended[:, model.end_index] = 10.0
        ids, _ = RoutedStages(lambda stage, *t: 'memory' if stage == 'text_encoder' else ended, fp32,
                              'routed').read_text(net, images, 12, incremental=True, stop_at_end=True)
        assert ids.tolist() == [[model.end_index]] * 2


@pytest.mark.numerics
def test_teacher_forcing_input_and_padding():
    model = tiny().double()
    images = torch.rand(2, 3, 128, 512, dtype=torch.float64)
    row0 = encode_transocr('中国')  # [c, c, END]
    row1 = encode_transocr('a')  # [c, END] + pad
    targets = torch.tensor([row0, row1 + [-100]])
    with torch.no_grad():
        logits = model(images, targets)
        memory = model.encode(images)
        expected = model.decode(torch.tensor([[0] + row0[:-1], [0] + row1]), memory)
    assert logits.shape == (2, 3, 7937)
    # the same decoder on the same prefix, in float64
    equivalent(logits[0], expected[0], 'teacher-forced row 0')
    equivalent(logits[1, :2], expected[1, :2], 'teacher-forced row 1 (valid part)')
    loss = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100)
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match='target ids'):
        model(images, torch.tensor([[7937, TRANSOCR_END], [1, TRANSOCR_END]]))
    with pytest.raises(ValueError, match='targets must be'):
        model(images, torch.tensor([1, TRANSOCR_END]))


def test_gradients_reach_the_input_image():
    model = tiny()
    for p in model.parameters():
        p.requires_grad_(False)
    images = torch.rand(2, 3, 128, 512, requires_grad=True)
    _, probs = model.greedy_decode(images, max_steps=5)
    probs.sum().backward()
    assert images.grad is not None and torch.isfinite(images.grad).all() and images.grad.abs().sum() > 0
    images.grad = None
    targets = torch.tensor([encode_transocr('中国'), encode_transocr('ab')])
    loss = F.cross_entropy(model(images, targets).transpose(1, 2), targets, ignore_index=-100)
    loss.backward()
    assert images.grad.abs().sum() > 0
    # 'difftsr' preprocessing is a nearest resize: only the sampled pixels receive gradient
    assert images.grad[:, :, 1::4].abs().sum() == 0 and images.grad[:, :, ::4, ::2].abs().sum() > 0


def _rigged(token):
    """A tiny model whose generator always prefers ``token``."""
    model = tiny()
    with torch.no_grad():
        model.generator_word.proj.weight.zero_()
        model.generator_word.proj.bias.zero_()
        model.generator_word.proj.bias[token] = 20.0
    return model


def test_read_text_and_the_difftsr_string():
    """ocr's read_text (the one TransOCR reader) cuts at the first END and drops START; DiffTSR's own string (the
    text prior's, text/text_prior.py) reads the 23-step window and writes START as letters."""
    a = transocr_classes().index('a')
    images = torch.rand(1, 3, 128, 512)

    def texts(model):
        return [r.text for r in read_text(model, images)]

    def difftsr_string(model):
        ids, probs = model.greedy_decode(images, max_steps=24, stop_at_end=True)
        return difftsr_prediction_text(ids[0].tolist(), probs[0].tolist())[0]

    assert texts(_rigged(a)) == ['a' * 24] and difftsr_string(_rigged(a)) == 'a' * 23  # the 23-step window
    assert texts(_rigged(TRANSOCR_END)) == ['']
    assert texts(_rigged(0)) == [''] and difftsr_string(_rigged(0)) == 'START' * 23  # START is not a character
    with pytest.raises(ValueError, match='7937-class'):
        read_text(tiny(num_classes=50), images)


def test_dropout_only_in_train_mode():
    model = tiny()
    images = torch.rand(1, 3, 128, 512)
    targets = torch.tensor([encode_transocr('ab')])
    with torch.no_grad():
        a, b = model(images, targets), model(images, targets)
        assert torch.equal(a, b)  # eval: deterministic
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.train()
        torch.manual_seed(0)
        c = model(images, targets)
    assert not torch.allclose(a, c)  # PE / attention / FFN dropout (p = 0.1) act in train mode


def test_frozen_option_keeps_eval_mode_and_passes_image_gradients():
    model = tiny(frozen=True)
    parent = torch.nn.Sequential(model)
    parent.train()
    assert not model.training and not any(m.training for m in model.modules())
    assert not any(p.requires_grad for p in model.parameters())
    images = torch.rand(1, 3, 128, 512, requires_grad=True)
    model.greedy_decode(images, 3)[1].sum().backward()
    assert images.grad.abs().sum() > 0
    assert tiny().train().training  # default: ordinary nn.Module behaviour
