"""Real-ESRGAN and BSRGAN chains: shapes, ranges, determinism, DiffTSR defaults, shift_pixel."""

import cv2
import numpy as np
import pytest

import tola_plugin  # noqa: F401  (registers; basicsr shim)
from tola_plugin.data.bsrgan_degradation import (BSRGAN_DEFAULTS, BSRGANDegradation, anisotropic_gaussian_kernel,
                                                 isotropic_gaussian_kernel, shift_pixel)
from tola_plugin.data.realesrgan_degradation import REALESRGAN_DEFAULTS, RealESRGANDegradation
from tola_plugin.data.sample_rng import sample_generator, seeded_global_rngs
from numerics import abs_err, equivalent, within


def _line_image():
    img = np.full((128, 512, 3), 240, np.uint8)
    cv2.putText(img, 'Text 2026', (12, 92), cv2.FONT_HERSHEY_SIMPLEX, 2.4, (20, 30, 40), 6)
    return img.astype(np.float32) / 255.0


@pytest.mark.parametrize('chain', [RealESRGANDegradation, BSRGANDegradation])
@pytest.mark.parametrize('scale', [1, 2, 4])
def test_chain_output_shape_range_and_determinism(chain, scale):
    deg, img = chain(), _line_image()
    out = deg(img, scale, sample_generator(3, 0, 7))
    assert out.shape == (128 // scale, 512 // scale, 3) and out.dtype == np.float32
    assert 0.0 <= out.min() and out.max() <= 1.0
    assert np.array_equal(out, deg(img, scale, sample_generator(3, 0, 7)))
    assert not np.array_equal(out, deg(img, scale, sample_generator(4, 0, 7)))


@pytest.mark.numerics
def test_realesrgan_output_is_on_8bit_levels():
    out = RealESRGANDegradation()(_line_image(), 2, sample_generator(0, 0, 0))
    # float32 k/255 times 255 is off its integer by <= 255 * 2^-24 = 1.5e-5 (measured 0 on every CPU); levels are
    # 1 apart
    within(abs_err(out * 255, np.round(out * 255)), 1e-3, 'distance from 8-bit levels')


def test_defaults_are_difftsr_softened_settings():
    r = REALESRGAN_DEFAULTS
    assert (r['final_sinc_prob'], r['gray_noise_prob'], r['gaussian_noise_prob'], r['gaussian_noise_prob2']) == \
        (0.4, 0.3, 0.3, 0.3)
    assert r['noise_range'] == [1.0, 20.0] and r['noise_range2'] == [1.0, 15.0]
    assert r['jpeg_range'] == r['jpeg_range2'] == [50.0, 95.0] and r['second_blur_prob'] == 0.3
    assert r['kernel_range'] == [7, 21] and r['blur_sigma'] == [0.2, 3.0] and r['blur_sigma2'] == [0.2, 1.5]
    b = BSRGAN_DEFAULTS
    assert (b['jpeg_prob'], b['aniso_blur_prob'], b['final_jpeg_prob'], b['scale2_prob']) == (0.8, 0.3, 0.4, 0.25)
    assert b['noise_level_range'] == [3, 25] and b['jpeg_quality_range'] == [30, 85]


def test_unknown_or_invalid_options_are_rejected():
    with pytest.raises(KeyError, match='unknown realesrgan option'):
        RealESRGANDegradation(final_sinc_probability=0.1)
    with pytest.raises(KeyError, match='unknown bsrgan option'):
        BSRGANDegradation(jpeg=0.1)
    with pytest.raises(ValueError, match='resize_prob'):
        RealESRGANDegradation(resize_prob=[0.5, 0.6, 0.1])
    with pytest.raises(ValueError, match='kernel_range'):
        RealESRGANDegradation(kernel_range=[8, 21])
    with pytest.raises(ValueError, match='divisible'):
        BSRGANDegradation()(np.zeros((30, 64, 3), np.float32), 4, sample_generator(0, 0, 0))


def test_options_change_the_chain():
    img = _line_image()
    clean = RealESRGANDegradation(noise_range=[0.0, 1e-6], noise_range2=[0.0, 1e-6], poisson_scale_range=[0, 1e-6],
                                  poisson_scale_range2=[0, 1e-6], jpeg_range=[100, 100], jpeg_range2=[100, 100],
                                  jpeg_backend='cv2')
    noisy = RealESRGANDegradation(gaussian_noise_prob=1.0, noise_range=[40.0, 40.0], gaussian_noise_prob2=1.0,
                                  noise_range2=[40.0, 40.0], gray_noise_prob=0.0, gray_noise_prob2=0.0)
    # flat background region of the scale-1 output: noise std follows the configured sigma
    flat_clean = clean(img, 1, sample_generator(0, 0, 1))[2:10, 400:500]
    flat_noisy = noisy(img, 1, sample_generator(0, 0, 1))[2:10, 400:500]
    assert flat_clean.std() < flat_noisy.std()


def test_shift_pixel_is_bilinear_half_pixel_shift():
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(6, 7))
    shifted = shift_pixel(x, 2)  # shift 0.5 towards the upper left
    expected = np.empty_like(x)
    for i in range(6):
        for j in range(7):
            y0, x0 = min(i + 0.5, 5), min(j + 0.5, 6)
            i0, j0 = int(np.floor(y0)), int(np.floor(x0))
            i1, j1 = min(i0 + 1, 5), min(j0 + 1, 6)
            wy, wx = y0 - i0, x0 - j0
            expected[i, j] = ((1 - wy) * (1 - wx) * x[i0, j0] + (1 - wy) * wx * x[i0, j1] + wy * (1 - wx) * x[i1, j0] +
                              wy * wx * x[i1, j1])
    # float64 on both sides (scipy's spline and the loop above): numpy's default tolerance is ~1e10x their error
    assert np.allclose(shifted, expected)
    assert np.allclose(shift_pixel(x, 1), x)
    rgb = np.stack([x, 2 * x, 3 * x], -1)
    assert np.allclose(shift_pixel(rgb, 2)[..., 2], 3 * shifted)


def test_kernels_are_normalized_and_oriented():  # float64 kernels
    assert np.isclose(isotropic_gaussian_kernel(15, 1.3).sum(), 1.0)
    assert isotropic_gaussian_kernel(5, 0.0)[2, 2] == 1.0
    k = anisotropic_gaussian_kernel(15, 0.0, 8.0, 0.5)  # wide along x
    assert np.isclose(k.sum(), 1.0) and k[7, :].sum() > k[:, 7].sum()


def test_seeded_global_rngs_restores_caller_state():
    import random

    import torch
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    threads = torch.get_num_threads()
    with seeded_global_rngs(sample_generator(0, 0, 0)):
        random.random(), np.random.rand(), torch.rand(5)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert torch.get_num_threads() == threads


@pytest.mark.numerics
def test_blur_equals_basicsr_filter2d():
    import torch

    from basicsr.data.degradations import random_mixed_kernels
    from basicsr.utils.img_process_util import filter2D

    from tola_plugin.data.realesrgan_degradation import blur
    np.random.seed(0)
    kernel = np.pad(random_mixed_kernels(['aniso'], [1.0], 13, (0.5, 3), (0.5, 3)), 4)
    # the same correlation by OpenCV and by torch, equal in exact arithmetic: a float64 image, and the float32
    # kernel that blur() applies, on both sides
    img = torch.from_numpy(_line_image()).permute(2, 0, 1)[None].contiguous().double()
    ours = blur(img, kernel)
    ref = filter2D(img, torch.from_numpy(kernel.astype(np.float32)).double()[None])
    assert ours.shape == ref.shape and ours.dtype == torch.float64
    equivalent(ours, ref, 'cv2 blur vs basicsr filter2D')
