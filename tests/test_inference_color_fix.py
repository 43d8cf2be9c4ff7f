"""Colour kept (``--color-fix``): what each fix keeps of the input and of the network's output."""
import numpy as np
import pytest
import torch

from tola_plugin.inference.color_fix import (ADAIN_EPS, COLOR_FIXES, LUMA_WEIGHTS, adain_color_fix, apply_color_fix,
                                             luma_color_fix, wavelet_color_fix, wavelet_low_frequency)
from tola_plugin.inference.pipeline import TOLAPipeline
from inference_testing import StandInRestorer
from numerics import equivalent

REACH = 1 + 2 + 4 + 8 + 16  # pixels the 5-level wavelet's low band reaches on each side


def pair(shape=(2, 3, 96, 160), seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (0.25 + 0.5 * torch.rand(*shape, generator=gen, dtype=torch.float64),
            0.25 + 0.5 * torch.rand(*shape, generator=gen, dtype=torch.float64))


@pytest.mark.numerics
def test_adain_takes_the_inputs_channel_statistics_and_keeps_the_outputs_shape():
    restored, reference = pair()
    restored = restored * 0.5 + 0.2  # a tint and a contrast change, within [0, 1]: nothing clamped
    fixed = adain_color_fix(restored, reference)
    dims = (2, 3)
    var_r, var_ref = restored.var(dims, keepdim=True), reference.var(dims, keepdim=True)
    equivalent(fixed.mean(dims), reference.mean(dims), 'adain: channel means are the input\'s')
    equivalent(
        fixed.var(dims, keepdim=True), var_r / (var_r + ADAIN_EPS) * (var_ref + ADAIN_EPS),
        'adain: channel spreads are the input\'s (up to eps)')
    equivalent((fixed - reference.mean(dims, keepdim=True)) / (var_ref + ADAIN_EPS).sqrt(),
               (restored - restored.mean(dims, keepdim=True)) / (var_r + ADAIN_EPS).sqrt(),
               'adain: the standardised output is unchanged')


@pytest.mark.numerics
def test_wavelet_undoes_a_colour_shift_and_keeps_fine_detail():
    restored, reference = pair()
    tint = torch.tensor([0.1, -0.05, 0.02], dtype=torch.float64).view(1, 3, 1, 1)
    equivalent(wavelet_color_fix(reference + tint, reference), reference, 'wavelet: a global tint is undone')
    checker = 0.05 * (-1.0)**(torch.arange(96).view(-1, 1) + torch.arange(160).view(1, -1)).double()
    fixed = wavelet_color_fix(reference + checker, reference)  # finest detail on the input's colours
    inner = (..., slice(REACH, -REACH), slice(REACH, -REACH))
    equivalent(fixed[inner], (reference + checker)[inner], 'wavelet: one-pixel detail kept (away from the edges)')
    assert wavelet_low_frequency(restored).shape == restored.shape


@pytest.mark.numerics
def test_luma_keeps_the_inputs_chroma_and_wavelets_luma():
    """Issue 49: 'wavelet' keeps the network's fine colour (the demo model's purple ink). 'luma' takes every pixel's
    chroma from the input (B - Y and R - Y, BT.601) and its luma from 'wavelet' (nothing clamped here)."""
    restored, reference = pair()
    purple = torch.tensor([0.1, -0.1, 0.1], dtype=torch.float64).view(1, 3, 1, 1)
    checker = 0.05 * (-1.0)**(torch.arange(96).view(-1, 1) + torch.arange(160).view(1, -1)).double()
    restored = (restored - 0.5) * 0.3 + 0.5 + purple * (checker > 0)  # strokes (the checker) turned purple
    fixed = luma_color_fix(restored, reference)
    weights = torch.tensor(LUMA_WEIGHTS, dtype=torch.float64).view(1, 3, 1, 1)

    def luma(x):
        return (x * weights).sum(1)

    for channel in (0, 2):  # R - Y and B - Y: the input's
        equivalent(fixed[:, channel] - luma(fixed), reference[:, channel] - luma(reference), 'luma: chroma kept')
    equivalent(luma(fixed), luma(wavelet_color_fix(restored, reference)), "luma: wavelet's luma")
    assert not torch.allclose(luma(fixed), luma(reference))  # the network's strokes are there, in luma


def test_apply_checks_its_arguments():
    restored, reference = pair(shape=(1, 3, 8, 8))
    assert apply_color_fix('none', restored, reference) is restored  # the paper's outputs, untouched
    assert COLOR_FIXES == ('none', 'wavelet', 'luma', 'adain')
    with pytest.raises(ValueError, match='color_fix must be one of'):
        apply_color_fix('histogram', restored, reference)
    with pytest.raises(ValueError, match='differ'):
        apply_color_fix('adain', restored, reference[..., :4])
    with pytest.raises(ValueError, match='color_fix'):
        TOLAPipeline(StandInRestorer(), color_fix='auto')


def test_pipeline_matches_the_outputs_colours_to_the_input():
    """An 'inverting' network: adain, wavelet and luma (the default of the user's tools) bring each channel's mean
    back to the input's, none keeps the inversion."""
    rng = np.random.default_rng(0)
    line = np.clip(rng.normal((200, 120, 40), 10, (32, 128, 3)), 0, 255).astype(np.uint8)
    plain = TOLAPipeline(StandInRestorer(invert=True), batch_size=1, color_fix='none')(line).image.astype(float)
    default = TOLAPipeline(StandInRestorer(invert=True), batch_size=1)(line).image.astype(float)
    fixed = TOLAPipeline(StandInRestorer(invert=True), batch_size=1, color_fix='adain')(line).image.astype(float)
    wave = TOLAPipeline(StandInRestorer(invert=True), batch_size=1, color_fix='wavelet')(line).image.astype(float)
    luma = TOLAPipeline(StandInRestorer(invert=True), batch_size=1, color_fix='luma')(line).image.astype(float)
    target = line.reshape(-1, 3).mean(0)
    assert np.abs(plain.reshape(-1, 3).mean(0) - (255 - target)).max() < 3  # the network's own (inverted) colours
    assert np.abs(fixed.reshape(-1, 3).mean(0) - target).max() < 3  # 8-bit rounding and resizing only
    assert np.abs(wave.reshape(-1, 3).mean(0) - target).max() < 3
    assert np.abs(luma.reshape(-1, 3).mean(0) - target).max() < 3
    assert np.array_equal(default, luma)  # the user's tools keep the input's colours unless asked not to
