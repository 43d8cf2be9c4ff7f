"""Image metrics: luminance PSNR/SSIM against hand computations, local-weights-only construction of
LPIPS/DISTS/FID (fake TORCH_HOME with random weights under the real file names), BasicSR registration."""
import copy
import os

import cv2
import numpy as np
import pytest
import torch
from scipy.signal import correlate2d

import tola_plugin  # noqa: F401  (registers the BasicSR metrics)
from tola_plugin import metric_weights as W
from tola_plugin.metrics.image_metrics import (PairedImageMetrics, build_paired_metric, fid_between_dirs,
                                               images_to_tensor)
from metric_weight_fakes import write_fake_metric_weights
from numerics import equivalent, rel_err, within

EPS = 1e-8  # pyiqa's PSNR adds it to the MSE
# pyiqa's PSNR with its float32 BT.601 coefficients against our float64 hand values: largest error measured 2.6e-7 dB
# (the same with every kernel set on both vendors), tolerance 3e-5 dB (115x; a wrong convention is >= 0.1 dB)
TOL_DB = 3e-5
# pyiqa's SSIM (Gaussian window built in float32) vs the float64 hand SSIM: measured 1.6e-9, tolerance 3e-7 (190x)
TOL_SSIM = 3e-7


def y_bt601(rgb01):
    """Hand luminance: ITU-R BT.601 limited-range Y of RGB in [0,1], in [0,1]."""
    r, g, b = rgb01[..., 0], rgb01[..., 1], rgb01[..., 2]
    return (16 + 65.481 * r + 128.553 * g + 24.966 * b) / 255


def hand_ssim(y1, y2, rounded=True, clipped=True):
    """Hand SSIM (Wang et al. 2004) on 8-bit luminance, 11x11 Gaussian sigma 1.5, 'valid' window positions, the
    contrast-structure term clipped at 0 (pyiqa's); ``rounded``/``clipped`` False: BasicSR's calculate_ssim."""
    y1, y2 = y1 * 255, y2 * 255
    if rounded:
        y1, y2 = np.round(y1), np.round(y2)
    ax = np.arange(11) - 5
    g = np.exp(-(ax[:, None]**2 + ax[None, :]**2) / (2 * 1.5**2))
    g /= g.sum()
    f = lambda x: correlate2d(x, g, mode='valid')  # noqa: E731
    c1, c2 = (0.01 * 255)**2, (0.03 * 255)**2
    mu1, mu2 = f(y1), f(y2)
    s11, s22, s12 = f(y1 * y1) - mu1**2, f(y2 * y2) - mu2**2, f(y1 * y2) - mu1 * mu2
    cs = (2 * s12 + c2) / (s11 + s22 + c2)
    cs = np.maximum(cs, 0) if clipped else cs
    return float((((2 * mu1 * mu2 + c1) / (mu1**2 + mu2**2 + c1)) * cs).mean())


@pytest.fixture(scope='module')
def exact_metrics():
    return PairedImageMetrics(('psnr', 'ssim'))


@pytest.fixture(scope='module')
def pair():
    rng = np.random.default_rng(0)
    ref = rng.integers(0, 256, (1, 40, 72, 3)).astype(np.uint8)
    out = np.clip(ref.astype(int) + rng.integers(-30, 31, ref.shape), 0, 255).astype(np.uint8)
    return out, ref


@pytest.mark.numerics
def test_psnr_is_bt601_luminance_without_crop(exact_metrics, pair):
    out, ref = pair
    got = exact_metrics(images_to_tensor(out), images_to_tensor(ref))['psnr'][0]
    mse = np.mean((y_bt601(out[0] / 255.0) - y_bt601(ref[0] / 255.0))**2)
    within(abs(got - 10 * np.log10(1 / (mse + EPS))), TOL_DB, 'PSNR vs hand value (dB)')
    # same convention as BasicSR's calculate_psnr(test_y_channel=True, crop_border=0) on BGR uint8 (BasicSR
    # rounds Y to 8 bits in float64 first: measured 2.9e-5 dB apart on every CPU, tolerance 3e-3 dB, 100x)
    from basicsr.metrics import calculate_psnr
    within(
        abs(got - calculate_psnr(out[0][..., ::-1], ref[0][..., ::-1], 0, test_y_channel=True)), 3e-3,
        'PSNR vs BasicSR (dB)')


@pytest.mark.numerics
def test_psnr_black_white_closed_form(exact_metrics):
    black = np.zeros((1, 16, 16, 3), np.uint8)
    white = np.full((1, 16, 16, 3), 255, np.uint8)
    got = exact_metrics(images_to_tensor(white), images_to_tensor(black))
    # YCbCr Y spans 16..235 of 255: PSNR = 20 log10(255/219) = 1.3219 dB (YIQ would give 0 dB)
    within(abs(got['psnr'][0] - 10 * np.log10(1 / ((219 / 255)**2 + EPS))), TOL_DB, 'black/white PSNR (dB)')
    assert got['psnr'][0] == pytest.approx(1.3219, abs=1e-4)  # to its printed digits
    yiq = PairedImageMetrics(('psnr', ), color_space='yiq')(images_to_tensor(white), images_to_tensor(black))
    within(abs(yiq['psnr'][0]), TOL_DB, 'black/white PSNR on YIQ (dB)')
    # constant images: SSIM = (2 mu1 mu2 + C1) / (mu1^2 + mu2^2 + C1) with Y = 16 and 235 (pyiqa's float32
    # Gaussian window does not sum to exactly 1, which leaves a variance residue at Y = 235: measured 6.9e-7 on
    # every CPU, tolerance 1e-4, 145x)
    c1 = (0.01 * 255)**2
    within(abs(got['ssim'][0] - (2 * 16 * 235 + c1) / (16**2 + 235**2 + c1)), 1e-4, 'black/white SSIM')


@pytest.mark.numerics
def test_ssim_matches_hand_computation(exact_metrics, pair):
    out, ref = pair
    got = exact_metrics(images_to_tensor(out), images_to_tensor(ref))['ssim'][0]
    within(abs(got - hand_ssim(y_bt601(out[0] / 255.0), y_bt601(ref[0] / 255.0))), TOL_SSIM, 'SSIM vs hand value')


@pytest.mark.numerics
def test_border_pixels_count(exact_metrics):
    ref = np.full((1, 20, 30, 3), 100, np.uint8)
    out = ref.copy()
    out[:, 0, :, :] = 110  # only the top row differs: a border crop would make the images identical
    got = exact_metrics(images_to_tensor(out), images_to_tensor(ref))['psnr'][0]
    mse = (y_bt601(np.full(3, 110 / 255)) - y_bt601(np.full(3, 100 / 255)))**2 * 30 / (20 * 30)
    within(abs(got - 10 * np.log10(1 / (mse + EPS))), TOL_DB, 'border-row PSNR (dB)')


@pytest.mark.numerics
def test_which_ssim_basicsr_log_and_evaluate(exact_metrics):
    """docs/own_data.md, "Which SSIM": BasicSR's calculate_ssim (the ssim of the launchers' log) is the hand SSIM on
    unrounded Y without the clip of negative contrast-structure terms; tools/evaluate.py's (pyiqa) rounds Y and
    clips, so on a poor restoration (anti-correlated to the reference) it is clearly higher."""
    from basicsr.metrics import calculate_ssim
    rng = np.random.default_rng(3)
    ref = rng.integers(0, 256, (1, 40, 72, 3)).astype(np.uint8)
    out = ref.copy()
    out[:, :, :36] = 255 - ref[:, :, :36]  # the left half anti-correlated: negative local structure terms there
    y_out, y_ref = y_bt601(out[0] / 255.0), y_bt601(ref[0] / 255.0)
    log_ssim = calculate_ssim(out[0][..., ::-1], ref[0][..., ::-1], 0, test_y_channel=True)
    # BasicSR computes Y in float32 (its bgr2ycbcr), the hand value in float64: measured 5.7e-10, tolerance 1e-7 (175x)
    within(abs(log_ssim - hand_ssim(y_out, y_ref, rounded=False, clipped=False)), 1e-7, 'BasicSR SSIM vs hand')
    evaluated = exact_metrics(images_to_tensor(out), images_to_tensor(ref))['ssim'][0]
    within(abs(evaluated - hand_ssim(y_out, y_ref)), TOL_SSIM, 'evaluate SSIM vs hand')
    assert log_ssim < evaluated - 0.1  # BasicSR's negative terms lower its mean; pyiqa's are 0


@pytest.mark.numerics
def test_basicsr_registered_psnr_ssim(pair):
    from basicsr.metrics import calculate_metric
    out, ref = pair
    bgr_out, bgr_ref = np.ascontiguousarray(out[0][..., ::-1]), np.ascontiguousarray(ref[0][..., ::-1])
    data = {'img': bgr_out, 'img2': bgr_ref}
    psnr = calculate_metric(data, {'type': 'calculate_tola_psnr', 'better': 'higher'})
    mse = np.mean((y_bt601(out[0] / 255.0) - y_bt601(ref[0] / 255.0))**2)
    within(abs(psnr - 10 * np.log10(1 / (mse + EPS))), TOL_DB, 'registered PSNR (dB)')
    ssim = calculate_metric(data, {'type': 'calculate_tola_ssim', 'crop_border': 0})
    within(abs(ssim - hand_ssim(y_bt601(out[0] / 255.0), y_bt601(ref[0] / 255.0))), TOL_SSIM, 'registered SSIM')
    with pytest.raises(ValueError, match='luminance'):
        calculate_metric(data, {'type': 'calculate_tola_psnr', 'test_y_channel': False})


@pytest.mark.parametrize('metric,missing', [('lpips', 'alexnet-owt-7be5be79.pth'), ('dists', 'vgg16-397923af.pth')])
def test_missing_weights_name_file_and_folder(tmp_path, monkeypatch, metric, missing):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        build_paired_metric(metric)
    assert missing in str(err.value)
    assert os.path.join(str(tmp_path), 'hub', 'checkpoints') in str(err.value)


def test_missing_fid_weights(tmp_path, monkeypatch):
    monkeypatch.setenv('TORCH_HOME', str(tmp_path))
    with pytest.raises(FileNotFoundError, match='pt_inception-2015-12-05-6726825d.pth') as err:
        fid_between_dirs(str(tmp_path), str(tmp_path))
    assert os.path.join(str(tmp_path), 'hub', 'pyiqa') in str(err.value)


def test_downloads_are_refused():
    import torch.hub
    with W.no_downloads():
        with pytest.raises(RuntimeError, match='refusing to download'):
            torch.hub.download_url_to_file('https://example.invalid/x.pth', '/tmp/never')


@pytest.fixture(scope='module')
def fake_home(tmp_path_factory):
    home = tmp_path_factory.mktemp('torch_home')
    write_fake_metric_weights(str(home))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv('TORCH_HOME', str(home))
        yield str(home)


@pytest.fixture(scope='module')
def learned_metrics(fake_home):
    return PairedImageMetrics(('lpips', 'dists'))


def test_fake_weight_files_are_small(fake_home):
    sizes = [os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(fake_home) for f in files]
    assert len(sizes) == 4 and sum(sizes) < 3_000_000


@pytest.mark.numerics
def test_lpips_dists_from_local_files(learned_metrics):
    rng = np.random.default_rng(3)
    ref = rng.integers(0, 256, (2, 64, 64, 3)).astype(np.uint8)
    out = ref.copy()
    out[1] = 255 - out[1]
    x, y = images_to_tensor(out), images_to_tensor(ref)
    scores = learned_metrics(x, y)
    for name in ('lpips', 'dists'):
        assert scores[name].shape == (2, )
        # identical pair: the same features subtracted, exactly 0 in any arithmetic; a score of a real difference
        # is >1e-4 (below)
        within(abs(scores[name][0]), 1e-5, f'{name} of an identical pair')
        assert scores[name][1] > scores[name][0] + 1e-4  # different pair
    # the LPIPS linear layers are the lpips wheel's, loaded for real
    import lpips
    stored = torch.load(
        os.path.join(os.path.dirname(lpips.__file__), 'weights', 'v0.1', 'alex.pth'), map_location='cpu',
        weights_only=True)
    own = learned_metrics._metrics['lpips'].net.state_dict()
    assert all(torch.equal(own[k], v) for k, v in stored.items())


def test_calibration_keys_that_do_not_land_are_an_error(fake_home, tmp_path, monkeypatch):
    """pyiqa loads calibration weights with strict=False; a file with foreign keys must not pass silently."""
    home = tmp_path / 'home'
    (home / 'hub' / 'pyiqa').mkdir(parents=True)
    (home / 'hub' / 'checkpoints').mkdir(parents=True)
    os.symlink(os.path.join(fake_home, 'hub', 'checkpoints', W.VGG16.name), home / 'hub' / 'checkpoints' / W.VGG16.name)
    torch.save({'gamma': torch.ones(1, 1475, 1, 1)}, home / 'hub' / 'pyiqa' / W.DISTS_WEIGHTS.name)
    monkeypatch.setenv('TORCH_HOME', str(home))
    with pytest.raises(ValueError, match='did not load'):
        build_paired_metric('dists')


@pytest.mark.numerics
def test_basicsr_registered_lpips(fake_home, learned_metrics):
    from basicsr.metrics import calculate_metric
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (48, 64, 3)).astype(np.uint8)
    b = 255 - a
    got = calculate_metric({'img': a, 'img2': b}, {'type': 'calculate_tola_lpips', 'better': 'lower', 'device': 'cpu'})
    ref = learned_metrics(images_to_tensor([a[..., ::-1].copy()]), images_to_tensor([b[..., ::-1].copy()]))['lpips'][0]
    # the same float32 network on the same pixels through two entry points: the same operations, exactly equal on
    # any CPU (pyiqa runs its networks in float32 only); a swapped channel order is >1e-3 off
    within(abs(got - ref), 1e-6, 'registered LPIPS vs PairedImageMetrics')


def low_rank_frechet(mu1, sigma1, mu2, sigma2, feats=None):
    """Exact Frechet distance when both covariances come from few samples: with S_i = A_i A_i^T,
    Tr sqrt(S1 S2) = nuclear norm of A1^T A2, so no 2048x2048 matrix square root (~1 min here) is needed."""
    a1, a2 = (np.asarray(f, dtype=np.float64) for f in feats)
    n1, n2 = (a1 - a1.mean(0)) / np.sqrt(len(a1) - 1), (a2 - a2.mean(0)) / np.sqrt(len(a2) - 1)
    tr_sqrt = np.linalg.svd(n1 @ n2.T, compute_uv=False).sum()
    diff = a1.mean(0) - a2.mean(0)
    return diff @ diff + (n1 * n1).sum() + (n2 * n2).sum() - 2 * tr_sqrt


def test_low_rank_frechet_equals_pyiqa():
    from pyiqa.archs.fid_arch import frechet_distance
    rng = np.random.default_rng(6)
    f1, f2 = rng.normal(size=(5, 12)), rng.normal(1.0, 2.0, size=(6, 12))
    args = (f1.mean(0), np.cov(f1, rowvar=False), f2.mean(0), np.cov(f2, rowvar=False))
    # float64 on both sides (scipy sqrtm vs SVD): ~1e-12 apart, rel 1e-6 is a loose float64 bound
    assert low_rank_frechet(*args, feats=(f1, f2)) == pytest.approx(frechet_distance(*args), rel=1e-6)


@pytest.mark.numerics
def test_fid_over_two_directories(fake_home, tmp_path, monkeypatch):
    from pyiqa.archs import fid_arch
    rng = np.random.default_rng(5)
    for sub in ('a', 'b', 'c'):
        (tmp_path / sub).mkdir()
    for i in range(3):
        img = rng.integers(0, 256, (32, 96, 3)).astype(np.uint8)
        cv2.imwrite(str(tmp_path / 'a' / f'{i}.png'), img)
        cv2.imwrite(str(tmp_path / 'b' / f'{i}.png'), img)
        cv2.imwrite(str(tmp_path / 'c' / f'{i}.png'), cv2.GaussianBlur(255 - img, (7, 7), 3))
    # Real pyiqa feature extraction (full InceptionV3 from the local file); the Frechet step is swapped for its
    # exact low-rank form (checked above) and records the features it was given.
    seen = []
    real_features = fid_arch.get_folder_features

    def spy_features(fdir, *args, **kwargs):
        feats = real_features(fdir, *args, **kwargs)
        seen.append((fdir, feats))
        return feats

    monkeypatch.setattr(fid_arch, 'get_folder_features', spy_features)
    monkeypatch.setattr(fid_arch, 'frechet_distance',
                        lambda *args: low_rank_frechet(*args, feats=(seen[-2][1], seen[-1][1])))
    same = fid_between_dirs(str(tmp_path / 'a'), str(tmp_path / 'b'))
    other = fid_between_dirs(str(tmp_path / 'a'), str(tmp_path / 'c'))
    # pyiqa reads staged copies (written through the package's image reader), restored side first
    assert [os.path.basename(d) for d, _ in seen] == ['restored', 'reference'] * 2
    assert all(f.shape == (3, 2048) for _, f in seen)  # pool3 features of every image, once per folder
    # identical folders: the features are bit-identical, so the float64 distance is rounding only (measured 0)
    within(abs(same) / max(other, 1.0), 1e-6, 'FID of identical folders / FID of different ones')
    assert other > 0


@pytest.mark.numerics
def test_lpips_equals_reference_lpips_package(fake_home, learned_metrics):
    """Same backbone file and linear layers: pyiqa's LPIPS-AlexNet equals the authors' `lpips` package."""
    import lpips
    with W.no_downloads():
        reference = lpips.LPIPS(net='alex', version='0.1', verbose=False).eval()
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (2, 48, 80, 3)).astype(np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-60, 61, a.shape), 0, 255).astype(np.uint8)
    x, y = images_to_tensor(a).double(), images_to_tensor(b).double()
    net = copy.deepcopy(learned_metrics._metrics['lpips'].net).double()  # the network our metric runs
    with torch.no_grad():  # two implementations of the same function: compared in float64
        ours, theirs = net(x, y).reshape(-1), reference.double()(x * 2 - 1, y * 2 - 1).reshape(-1)
    equivalent(ours, theirs, 'pyiqa LPIPS vs lpips package')
    # and the metric as evaluation runs it, in float32: measured 1.9e-6 relative (AVX2 kernels), tolerance 3e-4 (158x)
    within(rel_err(learned_metrics(x, y)['lpips'], theirs), 3e-4, 'LPIPS metric (float32) vs float64')
