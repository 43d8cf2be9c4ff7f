"""tola-evaluate, tola-diagnose and tola-plot-results (aliases tools/evaluate.py, ...) end to end on tiny inputs
with known answers."""
import json
import os
import shutil

import cv2
import numpy as np
import pytest
from PIL import Image
from test_eval_recognizers import SOFTMAX_TOL, cjk_font, forced, render_line, tiny_transocr  # noqa: E402

from tola_cli import diagnose, evaluate, plot_results  # tools/diagnose.py, ...: their aliases in a clone
from tola_plugin.commands.evaluation import records as R
from tola_plugin.commands.evaluation.runner import evaluate_methods
from tola_plugin.inference.prior_csv import read_prior_csv, write_prior_csv
from tola_plugin.metrics.text_metrics import ned
from tola_plugin.utils.atomic_files import write_json
from figure_testing import annotations, capture_figures, grid_cells, scatter_points  # noqa: E402
from numerics import within  # noqa: E402

LINES = {'a.png': '文字识别', 'b.png': 'Hello 2024', 'c.png': '北京欢迎你'}


@pytest.fixture(scope='module')
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp('evalset')
    font = cjk_font()
    for sub in ('hr', 'same', 'blur'):
        (root / sub).mkdir()
    with open(root / 'labels.tsv', 'w', encoding='utf-8') as f:
        for name, text in LINES.items():
            img = render_line(text, font)
            cv2.imwrite(str(root / 'hr' / name), img)
            cv2.imwrite(str(root / 'same' / name), img)
            cv2.imwrite(str(root / 'blur' / name), cv2.GaussianBlur(img, (5, 5), 1.5))
            f.write(f'{name}\t{text}\n')
    return root


@pytest.mark.numerics
def test_evaluate_cli_two_methods(dataset, tmp_path, capsys):
    out = tmp_path / 'eval'
    assert evaluate.main([
        '--method', f'same={dataset / "same"}', '--method', f'blur={dataset / "blur"}', '--reference',
        str(dataset / 'hr'), '--labels',
        str(dataset / 'labels.tsv'), '--metrics', 'psnr,ssim,ppocrv4', '--out',
        str(out), '--no-progress'
    ]) == 0
    summary = json.loads((out / 'summary.json').read_text(encoding='utf-8'))
    same, blur = summary['summary']['same'], summary['summary']['blur']
    assert list(same) == ['psnr', 'ssim', 'p_acc', 'p_ned']  # paper order
    # identical images: MSE is exactly 0, so PSNR = 10 log10(1 / 1e-8) and SSIM = 1 up to float32 rounding
    # of the log and the ratios (measured 0 on all three kernel sets; one float32 ulp is 6e-8 relative)
    within(abs(same['psnr'] - 80.0) / 80.0, 1e-6, 'PSNR of identical images')
    within(abs(same['ssim'] - 1.0), 1e-6, 'SSIM of identical images')
    assert same['p_acc'] == pytest.approx(1.0) and same['p_ned'] == pytest.approx(1.0)
    assert blur['psnr'] < 40 and blur['ssim'] < 1
    assert summary['protocol']['luma_color_space'] == 'ycbcr' and summary['protocol']['border_crop'] == 0
    assert summary['protocol']['n_images'] == 3 and summary['protocol']['lower_case'] is False
    rows = R.read_per_image_csv(str(out / summary['per_image']['blur']))
    assert sorted(rows) == sorted(LINES)
    assert set(rows['b.png']) == {'filename', 'gt', 'psnr', 'ssim', 'p_pred', 'p_conf', 'p_acc', 'p_ned'}
    assert rows['b.png']['gt'] == 'Hello 2024'
    table = (out / 'summary.md').read_text(encoding='utf-8')
    assert '| Method | PSNR↑ | SSIM↑ | P-ACC↑ | P-NED↑ |' in table and '| same | 80.0000 | 1.0000 |' in table
    assert table in capsys.readouterr().out


@pytest.mark.numerics
def test_evaluate_transocr_known_answer(dataset, tmp_path):
    """A TransOCR that always emits END reads every image as '': ACC 0 and NED 0 against non-empty labels."""
    model = tiny_transocr()
    p_end = forced(model, 7936)
    summary = evaluate_methods({'same': str(dataset / 'same')}, str(tmp_path), labels_path=str(dataset / 'labels.tsv'),
                               transocr_model=model, progress=False, metrics=['transocr'])
    assert summary == {'same': {'t_acc': 0.0, 't_ned': 0.0}}
    rows = R.read_per_image_csv(str(tmp_path / 'per_image' / 'same.csv'))
    assert all(r['t_pred'] == '' for r in rows.values())
    for r in rows.values():
        within(abs(r['t_conf'] - p_end) / p_end, SOFTMAX_TOL, 'END confidence in the per-image CSV')


@pytest.mark.end_to_end  # the evaluation tool's whole run; each metric: the tests above
def test_all_nine_metrics_end_to_end(dataset, tmp_path, monkeypatch):
    """Table 1's nine metrics through one call, learned metrics from a fake local TORCH_HOME."""
    from pyiqa.archs import fid_arch
    from test_eval_image_metrics import low_rank_frechet

    from metric_weight_fakes import write_fake_metric_weights
    write_fake_metric_weights(str(tmp_path / 'home'))
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'home'))
    seen = []
    real_features = fid_arch.get_folder_features

    def spy_features(*args, **kwargs):
        seen.append(real_features(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(fid_arch, 'get_folder_features', spy_features)
    monkeypatch.setattr(fid_arch, 'frechet_distance', lambda *a: low_rank_frechet(*a, feats=(seen[-2], seen[-1])))
    model = tiny_transocr()
    forced(model, 7936)
    summary = evaluate_methods({'blur': str(dataset / 'blur')}, str(tmp_path / 'out'),
                               reference_dir=str(dataset / 'hr'), labels_path=str(dataset / 'labels.tsv'),
                               transocr_model=model, progress=False)
    keys = ['psnr', 'ssim', 'lpips', 'dists', 'fid', 't_acc', 't_ned', 'p_acc', 'p_ned']
    blur = summary['blur']
    assert list(blur) == keys  # the paper's order
    assert blur['lpips'] > 0 and blur['dists'] > 0 and blur['fid'] > 0
    assert len(seen) == 2 and all(f.shape == (3, 2048) for f in seen)  # FID once over the two folders
    assert blur['t_acc'] == 0.0 and blur['t_ned'] == 0.0  # the forced-END TransOCR reads ''
    table = (tmp_path / 'out' / 'summary.md').read_text(encoding='utf-8')
    assert '| Method | PSNR↑ | SSIM↑ | LPIPS↓ | DISTS↓ | FID↓ | T-ACC↑ | T-NED↑ | P-ACC↑ | P-NED↑ |' \
        in table


def test_filename_mismatch_lists_names(dataset, tmp_path):
    partial = tmp_path / 'partial'
    shutil.copytree(dataset / 'same', partial)
    os.remove(partial / 'b.png')
    cv2.imwrite(str(partial / 'extra.png'), np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError) as err:
        evaluate_methods({'p': str(partial)}, str(tmp_path / 'o'), reference_dir=str(dataset / 'hr'), metrics=['psnr'],
                         progress=False)
    msg = str(err.value)
    assert "method 'p'" in msg and 'b.png' in msg and 'extra.png' in msg and 'reference' in msg


def test_missing_inputs_and_size_mismatch(dataset, tmp_path):
    with pytest.raises(ValueError, match='needs a reference folder'):
        evaluate_methods({'s': str(dataset / 'same')}, str(tmp_path), metrics=['lpips'])
    with pytest.raises(ValueError, match='--transocr-checkpoint'):
        evaluate_methods({'s': str(dataset / 'same')}, str(tmp_path), labels_path=str(dataset / 'labels.tsv'),
                         metrics=['transocr'])
    small = tmp_path / 'small'
    small.mkdir()
    for name in LINES:
        cv2.imwrite(str(small / name), np.zeros((64, 256, 3), np.uint8))
    with pytest.raises(ValueError, match='differ in size.*add --upscale'):
        evaluate_methods({'s': str(small)}, str(tmp_path / 'o'), reference_dir=str(dataset / 'hr'), metrics=['psnr'],
                         progress=False)
    for name in LINES:
        cv2.imwrite(str(small / name), np.zeros((64, 200, 3), np.uint8))
    with pytest.raises(ValueError, match='200x64 is not the reference.s 512x128 divided by a whole factor'):
        evaluate_methods({'s': str(small)}, str(tmp_path / 'o'), reference_dir=str(dataset / 'hr'), metrics=['psnr'],
                         progress=False, upscale=True)


def test_bicubic_row_of_the_lr_folder(dataset, tmp_path, capsys):
    """--method Bicubic=LR_DIR --upscale: the x4 LR lines resized to the references with PIL bicubic (TOLA's input
    resize), scored as any method; methods at the references' size are left as they are."""
    lr = tmp_path / 'lr_x4'
    lr.mkdir()
    for name in LINES:
        hr = cv2.imread(str(dataset / 'hr' / name))
        cv2.imwrite(str(lr / name), cv2.resize(hr, (hr.shape[1] // 4, hr.shape[0] // 4), interpolation=cv2.INTER_AREA))
    out = tmp_path / 'eval'
    argv = [
        '--method', f'Bicubic={lr}', '--method', f'same={dataset / "same"}', '--reference',
        str(dataset / 'hr'), '--metrics', 'psnr,ssim', '--out',
        str(out), '--no-progress'
    ]
    assert evaluate.main(argv + ['--upscale']) == 0
    summary = json.loads((out / 'summary.json').read_text(encoding='utf-8'))
    assert summary['protocol']['upscaled'] == {'Bicubic': 4}
    assert 'Bicubic: images upscaled x4' in capsys.readouterr().err
    by_hand = tmp_path / 'by_hand'  # PIL bicubic of each LR line, written by this test
    by_hand.mkdir()
    for name in LINES:
        rgb = np.asarray(Image.open(lr / name).convert('RGB').resize((512, 128), Image.BICUBIC))
        assert np.array_equal(cv2.imread(str(out / 'upscaled' / 'Bicubic' / name))[..., ::-1], rgb)
        Image.fromarray(rgb).save(by_hand / name)
    evaluate_methods({'by_hand': str(by_hand)}, str(tmp_path / 'eval_by_hand'), reference_dir=str(dataset / 'hr'),
                     metrics=['psnr', 'ssim'], progress=False)
    expected = json.loads((tmp_path / 'eval_by_hand' / 'summary.json').read_text(encoding='utf-8'))['summary']
    assert summary['summary']['Bicubic'] == expected['by_hand'] and summary['summary']['Bicubic']['psnr'] < 40
    assert summary['summary']['same']['psnr'] == pytest.approx(80.0)  # untouched: identical to the references
    with pytest.raises(ValueError, match='add --upscale'):
        evaluate.main(argv)


def test_labels_manifest_errors(tmp_path):
    path = tmp_path / 'labels.tsv'
    path.write_text('a.png\tx\na.png\ty\n', encoding='utf-8')
    with pytest.raises(ValueError, match='repeats'):
        R.read_labels(str(path))
    path.write_text('a.png\t \n', encoding='utf-8')
    with pytest.raises(ValueError, match='empty'):
        R.read_labels(str(path))


# ------------------------------------------------------------------------------------------- diagnostics
GT = ['汉字', '北京', 'abc', 'KFC肯德基', '123', 'hello']
PRED_A = ['汉字', '北平', 'ab', 'KFC肯德基', '1234', 'hallo']  # 2/6 right: 2 sub, 1 del, 1 ins
PRED_B = ['汉字', '北京', 'abc', 'KFC肯德鸡', '123', 'hello']  # 5/6 right: 1 sub
PRIOR = [('汉字', 0.9), ('北平', 0.6), ('ab', 0.3), ('KFC肯德基', 0.8), ('1234', 0.1), ('hello', 0.75)]


@pytest.fixture
def evaluated(tmp_path):
    names = [f'{i}.png' for i in range(6)]
    per_image = {}
    for method, preds, offset in (('A', PRED_A, 0.0), ('B', PRED_B, 1.0)):
        rows = [{
            'filename': n, 'gt': g, 'psnr': 20.0 + i + offset, 't_pred': p, 't_conf': 0.5, 't_acc': float(p == g),
            't_ned': ned(p, g)
        } for i, (n, g, p) in enumerate(zip(names, GT, preds))]
        R.write_per_image_csv(str(tmp_path / 'eval' / 'per_image' / f'{method}.csv'), rows)
        per_image[method] = f'per_image/{method}.csv'
    write_json(
        str(tmp_path / 'eval' / 'summary.json'),
        {'protocol': {'lower_case': False}, 'summary': {}, 'per_image': per_image})
    write_prior_csv(
        str(tmp_path / 'prior.csv'),
        [{'filename': n, 'prior_text': t, 'prior_confidence': c, 'prior_token_confidences': [c] * len(t)}
         for n, (t, c) in zip(names, PRIOR)])
    return tmp_path


# diagnostics are float64 arithmetic on exact inputs: pytest.approx's default (1e-6 relative) is ~1e9x their rounding
def test_diagnose_known_answers(evaluated, monkeypatch):
    figures = capture_figures(monkeypatch)
    out = evaluated / 'diag'
    assert diagnose.main([
        '--eval-dir',
        str(evaluated / 'eval'), '--baseline', 'A', '--method', 'B', '--prior-csv',
        str(evaluated / 'prior.csv'), '--out',
        str(out), '--resamples', '500', '--plots'
    ]) == 0
    res = json.loads((out / 'diagnostics.json').read_text(encoding='utf-8'))
    paired = {r['metric']: r for r in res['paired']}
    assert paired['psnr']['change'] == pytest.approx(1.0) and paired['psnr']['low'] == pytest.approx(1.0)
    acc = paired['t_acc']
    assert acc['change'] == pytest.approx(5 / 6 - 2 / 6)
    assert (acc['mcnemar']['only_a'], acc['mcnemar']['only_b']) == (1, 4)
    assert acc['mcnemar']['p_value'] == pytest.approx(2 * 6 / 32)  # 2 * P(X <= 1 | n = 5)
    bins = {r['bin']: r for r in res['confidence_bins']}
    assert [bins[b]['n'] for b in ('[0,.25)', '[.25,.50)', '[.50,.75)', '[.75,1]')] == [1, 1, 1, 3]
    assert bins['[.75,1]']['prior_acc'] == 1.0 and bins['[0,.25)']['prior_acc'] == 0.0
    assert (bins['[.75,1]']['acc_a'], bins['[.75,1]']['acc_b']) == pytest.approx((2 / 3, 2 / 3))
    cats = {r['category']: r for r in res['categories']}
    assert {c: cats[c]['n'] for c in cats} == {'Chinese': 2, 'English': 2, 'Mixed': 1, 'Num./Other': 1}
    assert (cats['Mixed']['acc_a'], cats['Mixed']['acc_b']) == (1.0, 0.0)
    edits = {r['method']: r for r in res['edits']}
    assert (edits['A']['substitutions'], edits['A']['deletions'], edits['A']['insertions']) == (2, 1, 1)
    assert edits['A']['gt_chars'] == 21 and edits['A']['edits_per_100'] == pytest.approx(400 / 21)
    assert edits['B']['total'] == 1 and edits['B']['edits_per_100'] == pytest.approx(100 / 21)
    strata = {r['stratum']: r for r in res['prior_strata']}
    assert strata['correct']['n'] == 3 and strata['correct']['mean_confidence'] == pytest.approx((0.9 + 0.8 + 0.75) / 3)
    assert strata['wrong']['acc_a'] == 0.0 and strata['wrong']['acc_b'] == 1.0
    assert strata['correct']['psnr_b'] - strata['correct']['psnr_a'] == pytest.approx(1.0)
    behaviour = {(r['method'], r['stratum']): (r['n'], r['exact_gt'], r['copy'], r['other'])
                 for r in res['prior_behaviour']}
    assert behaviour == {('A', 'correct'): (3, 2, None, 1), ('A', 'wrong'): (3, 0, 3, 0),
                         ('B', 'correct'): (3, 2, None, 1), ('B', 'wrong'): (3, 3, 0, 0)}
    md = (out / 'diagnostics.md').read_text(encoding='utf-8')
    assert '| Statistic | Correct prior | Wrong prior |' in md and '| N | 3 | 3 |' in md
    assert '| A | 2 | 1 | 1 | 4 | 19.05 |' in md
    (fig, stem), = figures  # the figure shows the numbers above
    assert stem == str(out / 'recognition_diagnostics')
    assert all((out / f'recognition_diagnostics.{ext}').exists() for ext in ('png', 'pdf'))
    conf, cat, edit = fig.axes
    assert [ax.get_title() for ax in fig.axes
            ] == ['(a) ACC by prior confidence', '(b) ACC by text category', '(c) Character edits (21 GT chars)']
    assert [t.get_text()
            for t in conf.get_xticklabels()] == ['[0,.25)\nN=1', '[.25,.50)\nN=1', '[.50,.75)\nN=1', '[.75,1]\nN=3']
    heights = {c.get_label(): [b.get_height() for b in c] for c in edit.containers}
    assert heights == {
        'A': [2, 1, 1], 'B': [edits['B']['substitutions'], edits['B']['deletions'], edits['B']['insertions']]
    }
    mixed = [t.get_text() for t in cat.get_xticklabels()].index('Mixed\nN=1')
    assert [c[mixed].get_height() for c in cat.containers] == [1.0, 0.0]


def test_prior_csv_schema_errors(tmp_path):
    path = tmp_path / 'prior.csv'
    path.write_text('filename,prior_text\na.png,x\n', encoding='utf-8')
    with pytest.raises(ValueError, match='prior_confidence'):
        read_prior_csv(str(path))
    path.write_text('filename,prior_text,prior_confidence\na.png,x,1.5\n', encoding='utf-8')
    with pytest.raises(ValueError, match='outside'):
        read_prior_csv(str(path))


# ------------------------------------------------------------------------------------------------- plots
def test_plot_tool_latency_and_grid(dataset, tmp_path, monkeypatch):
    figures = capture_figures(monkeypatch)
    latency = tmp_path / 'latency.csv'
    latency.write_text(
        'method,seconds_per_image,psnr,t_acc\nDiffTSR,9.9548,23.9,0.4645\nTOLA,0.1319,24.81,0.5401\n'
        'SRCNN,0.0119,21.5,0.41\n', encoding='utf-8')
    assert plot_results.main([
        'latency', '--latency',
        str(latency), '--highlight', 'TOLA', '--out',
        str(tmp_path / 'fig' / 'quality_latency')
    ]) == 0
    (fig, _), = figures
    psnr, acc = fig.axes
    assert [ax.get_xscale() for ax in fig.axes] == ['log', 'log']
    assert (psnr.get_ylabel(), acc.get_ylabel()) == ('PSNR (dB)', 'TransOCR ACC')
    assert scatter_points(psnr) == [(9.9548, 23.9), (0.1319, 24.81), (0.0119, 21.5)]
    assert scatter_points(acc) == [(9.9548, 0.4645), (0.1319, 0.5401), (0.0119, 0.41)]
    assert annotations(psnr) == ['DiffTSR', 'TOLA', 'SRCNN']
    assert [t.get_fontweight() for t in psnr.texts] == ['normal', 'bold', 'normal']  # --highlight TOLA
    assert all((tmp_path / 'fig' / f'quality_latency.{ext}').exists() for ext in ('png', 'pdf'))
    assert plot_results.main([
        'grid', '--row', f'LR={dataset / "blur"}', '--row', f'Ours={dataset / "same"}', '--row', f'HR={dataset / "hr"}',
        '--samples', 'a.png,b.png,c.png', '--labels',
        str(dataset / 'labels.tsv'), '--out',
        str(tmp_path / 'fig' / 'grid')
    ]) == 0
    rows = grid_cells(figures[1][0])
    labels = R.read_labels(str(dataset / 'labels.tsv'))
    assert [ax.get_title() for ax in figures[1][0].axes[:3]] == [labels[n] for n in ('a.png', 'b.png', 'c.png')]
    assert [label for label, _ in rows] == ['LR', 'Ours', 'HR']
    for (_, cells), folder in zip(rows, ('blur', 'same', 'hr')):  # each cell shows its file, RGB
        assert all(
            np.array_equal(cell,
                           cv2.imread(str(dataset / folder / name))[:, :, ::-1])
            for cell, name in zip(cells, ('a.png', 'b.png', 'c.png')))
    assert (tmp_path / 'fig' / 'grid.png').exists()
    with pytest.raises(FileNotFoundError, match='missing.png'):
        plot_results.main([
            'grid', '--row', f'HR={dataset / "hr"}', '--samples', 'missing.png', '--out',
            str(tmp_path / 'fig' / 'bad')
        ])


def test_prior_csv_example_fixture_round_trips(tmp_path):
    """tests/data/eval/prior_example.csv is the documented schema (quoting, empty prior) the inference tool writes."""
    path = os.path.join(os.path.dirname(__file__), 'data', 'eval', 'prior_example.csv')
    priors = read_prior_csv(path)
    assert priors['000002.png'] == {'prior_text': 'golden,s', 'prior_confidence': 0.6}
    assert priors['000003.png'] == {'prior_text': '', 'prior_confidence': 0.0}
    rows = [{'filename': n, **v} for n, v in priors.items()]
    write_prior_csv(str(tmp_path / 'copy.csv'), rows)
    assert read_prior_csv(str(tmp_path / 'copy.csv')) == priors


# ------------------------------------------------------------------------------- offline runs (issue 10)
def test_auto_metrics_skip_absent_weight_files_with_reasons(dataset, tmp_path, monkeypatch, capsys):
    """No ImageNet/pyiqa files under TORCH_HOME: LPIPS, DISTS and FID are left out (named, with the missing file)
    and the run goes on with the metrics that need no download."""
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'empty_home'))
    out = tmp_path / 'eval'
    assert evaluate.main([
        '--method', f'blur={dataset / "blur"}', '--reference',
        str(dataset / 'hr'), '--out',
        str(out), '--no-progress'
    ]) == 0
    summary = json.loads((out / 'summary.json').read_text(encoding='utf-8'))
    assert list(summary['summary']['blur']) == ['psnr', 'ssim']
    skipped = summary['protocol']['skipped']
    assert sorted(skipped) == ['dists', 'fid', 'lpips']
    assert 'alexnet-owt-7be5be79.pth' in skipped['lpips'] and 'pt_inception' in skipped['fid']
    err = capsys.readouterr().err
    assert 'skipping lpips' in err and 'vgg16-397923af.pth' in err
    assert 'Not computed (weight files absent' in (out / 'summary.md').read_text(encoding='utf-8')
    with pytest.raises(FileNotFoundError, match='alexnet'):  # an explicit request still fails loudly
        evaluate_methods({'b': str(dataset / 'blur')}, str(tmp_path / 'o'), reference_dir=str(dataset / 'hr'),
                         metrics=['lpips'], progress=False)


def test_ppocr_accuracy_is_case_insensitive_by_default(dataset, tmp_path):
    """'Hello 2024' rendered, 'hello2024' labelled: PP-OCRv4 matches by default, not with --ppocr-case-sensitive."""
    labels = tmp_path / 'labels.tsv'
    labels.write_text('b.png\thello2024\n', encoding='utf-8')
    one = tmp_path / 'one'
    one.mkdir()
    shutil.copy(dataset / 'same' / 'b.png', one / 'b.png')
    common = ['--method', f'm={one}', '--labels', str(labels), '--metrics', 'ppocrv4', '--no-progress']
    assert evaluate.main(common + ['--out', str(tmp_path / 'ci')]) == 0
    assert evaluate.main(common + ['--out', str(tmp_path / 'cs'), '--ppocr-case-sensitive']) == 0
    ci = json.loads((tmp_path / 'ci' / 'summary.json').read_text(encoding='utf-8'))
    cs = json.loads((tmp_path / 'cs' / 'summary.json').read_text(encoding='utf-8'))
    assert ci['summary']['m']['p_acc'] == 1.0 and ci['protocol']['ppocr_lower_case'] is True
    assert cs['summary']['m']['p_acc'] == 0.0 and cs['protocol']['ppocr_lower_case'] is False


def test_diagnose_picks_the_recognizer_whose_columns_exist(tmp_path):
    """Per-image tables with PP-OCRv4 columns only: diagnose uses them without --recognizer."""
    names = [f'{i}.png' for i in range(6)]
    per_image = {}
    for method, preds in (('A', PRED_A), ('B', PRED_B)):
        rows = [{
            'filename': n, 'gt': g, 'psnr': 20.0, 'p_pred': p, 'p_conf': 0.5, 'p_acc': float(p == g),
            'p_ned': ned(p, g)
        } for n, g, p in zip(names, GT, preds)]
        R.write_per_image_csv(str(tmp_path / 'eval' / 'per_image' / f'{method}.csv'), rows)
        per_image[method] = f'per_image/{method}.csv'
    write_json(
        str(tmp_path / 'eval' / 'summary.json'),
        {'protocol': {'lower_case': False, 'ppocr_lower_case': True}, 'summary': {}, 'per_image': per_image})
    assert diagnose.main([
        '--eval-dir',
        str(tmp_path / 'eval'), '--baseline', 'A', '--method', 'B', '--out',
        str(tmp_path / 'd'), '--resamples', '200'
    ]) == 0
    res = json.loads((tmp_path / 'd' / 'diagnostics.json').read_text(encoding='utf-8'))
    assert res['recognizer_prefix'] == 'p_' and res['lower'] is True
    assert {r['method']: r['total'] for r in res['edits']} == {'A': 4, 'B': 1}


def test_transocr_checkpoint_demo_is_accepted_and_a_missing_file_refused_before_any_work(
        dataset, tmp_path, monkeypatch):
    """--transocr-checkpoint demo: the demo backbone's TransOCR, as train:ocr_recognizer=demo; a missing file is an
    error before any image is read or upscaled."""
    assert evaluate.main([
        '--method', f'same={dataset / "same"}', '--labels',
        str(dataset / 'labels.tsv'), '--metrics', 'transocr', '--transocr-checkpoint', 'demo', '--lower', '--out',
        str(tmp_path / 'eval'), '--no-progress'
    ]) == 0
    summary = json.loads((tmp_path / 'eval' / 'summary.json').read_text(encoding='utf-8'))
    assert set(summary['summary']['same']) == {'t_acc', 't_ned'} and summary['protocol']['transocr'] == 'demo'
    # its columns say which TransOCR read them (the demo's reads 100 Chinese characters: not the paper's T-ACC)
    head = (tmp_path / 'eval' / 'summary.md').read_text(encoding='utf-8').splitlines()[2]
    assert head == '| Method | T-ACC (demo TransOCR)↑ | T-NED (demo TransOCR)↑ |'
    report = {'held_out_lines': 2, 'TOLA_minus_LR': {'t_acc': 0.5}, 'LR': {'t_acc': 0.0}, 'TOLA': {'t_acc': 0.5}}
    from tola_lab.demo.report import report_table
    assert report_table(report).splitlines()[0] == '| 2 held-out lines | demo TransOCR ACC |'

    def no_work(*args, **kwargs):
        raise AssertionError('work started before the missing checkpoint was named')

    monkeypatch.setattr('tola_plugin.commands.evaluation.runner.upscale_folder', no_work)
    monkeypatch.setattr('tola_plugin.commands.evaluation.runner.R.list_images', no_work)
    with pytest.raises(FileNotFoundError, match="TransOCR checkpoint .--transocr-checkpoint. not found at 'absent.pth'"
                       ".*or demo"):
        evaluate_methods({'s': str(dataset / 'same')}, str(tmp_path / 'o'), reference_dir=str(dataset / 'hr'),
                         labels_path=str(dataset / 'labels.tsv'), transocr_checkpoint='absent.pth', upscale=True)
