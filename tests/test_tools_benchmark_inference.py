"""tools/benchmark_inference.py on a tiny random backbone (in process), and the latency figure drawn from its JSON."""
import json
import os
import sys

import pytest
import torch
import yaml

import tola_plugin  # noqa: F401
from conftest import REPO, render_pairs
from figure_testing import annotations, capture_figures, scatter_points
from inference_testing import write_tiny_merged
from numerics import within
from tola_testing import one_thread, tiny_backbone  # noqa: F401

sys.path.insert(0, os.path.join(REPO, 'tools'))
import benchmark_inference  # noqa: E402
import plot_results  # noqa: E402

pytestmark = [pytest.mark.usefixtures('one_thread'), pytest.mark.openvino]
# with oneDNN forced below the CPU's bf16 instructions (make test-isa) OpenVINO cannot compile bf16
# (docs/inference.md, "Backends"): the forced-ISA runs check the fp32 routes' parity only
PRECISIONS = ('fp32', ) if os.environ.get('ONEDNN_MAX_CPU_ISA') else ('fp32', 'bf16')


@pytest.fixture(scope='module')
def result(tmp_path_factory):
    folder = tmp_path_factory.mktemp('bench')
    opt = folder / 'tiny.yml'
    opt.write_text(
        yaml.safe_dump(
            {'network_g': {'type': 'TOLANet', **tiny_backbone(), 'lrc': {'type': 'LatentResidualCorrection'}}}),
        encoding='utf-8')
    quality_model = write_tiny_merged(folder / 'trained.safetensors')  # stands in for the demo model
    render_pairs(str(folder / 'lines'), 3, seed=5)
    test = yaml.safe_load(open(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'), encoding='utf-8'))
    test['datasets']['test_1'].update(
        dataroot_gt=str(folder / 'lines' / 'hr'), labels=str(folder / 'lines' / 'labels.tsv'))
    quality_opt = folder / 'test.yml'
    quality_opt.write_text(yaml.safe_dump(test), encoding='utf-8')
    out = folder / 'inference.json'
    assert benchmark_inference.main([
        '-opt',
        str(opt), '--random-weights', '--repeats', '1', '--precision', *PRECISIONS, '--photo-lines', '2', '--no-memory',
        '--quality-model', quality_model, '--quality-opt',
        str(quality_opt), '--workdir',
        str(folder / 'work'), '--out',
        str(out)
    ]) == 0
    return json.loads(out.read_text(encoding='utf-8')), folder


@pytest.mark.numerics
def test_benchmark_reports_every_route_precision_and_target(result):
    data, folder = result
    names = ('reference', 'default') + tuple(f'{b} {p}' for b in ('torch', 'openvino') for p in PRECISIONS)
    assert set(data['timings']) == {f'{n} batch 1' for n in names} | {'default batch 2'}
    for row in data['timings'].values():
        assert set(row['stages_s']) == set(benchmark_inference_module().STAGES)
        assert row['per_image_s'] == pytest.approx(row['total_s'] / row['batch'])
        if row['batch'] == 1:  # the stages are parts of the forward (the rest: noise, q-sample, ẑ0 formulas)
            assert sum(row['stages_s'].values()) <= row['total_s']
    assert data['timings'][f'openvino {PRECISIONS[-1]} batch 1']['dtype'] == PRECISIONS[-1]
    assert data['default_backend'] == 'openvino' and data['timings']['default batch 1']['dtype'] in ('fp32', 'bf16')
    for name in ('torch fp32', 'openvino fp32'):  # the same function as the reference route, in float32: measured
        # 1.6e-6 relative (torch and OpenVINO, all three kernel sets), tolerance 2e-3 (1290x)
        assert data['parity'][name]['same_tokens']
        within(data['parity'][name]['image_rel_diff'], 2e-3, f'benchmark parity, {name} vs reference route')
    assert data['route_gmac'] > 0 and set(data['macs']) >= {'IDM', 'VAE encoder', 'VAE decoder', 'LRC'}
    assert data['ceiling_gflops']['fp32'] > 0 and data['ceiling_gflops']['bf16'] > 0
    assert data['photo']['lines'] == 2 and data['photo']['speedup'] > 0
    assert set(data['targets']) >= {
        'default_vs_reference', 'openvino_fp32_vs_reference', 'default_vs_bf16_ceiling', 'photo_batch_speedup'
    }
    if 'bf16' in PRECISIONS:
        assert {'bf16_psnr_drop_db (torch)', 'bf16_psnr_drop_db (openvino)'} <= set(data['targets'])
    quality = data['quality']
    rows = {f'{b} {p}' for b in ('torch', 'openvino') for p in PRECISIONS}
    assert quality['lines'] == 3 and set(quality['rows']) == rows
    assert quality['rows']['torch fp32']['same_text_prior'] == 1.0 and quality['rows']['torch fp32'][
        'psnr_vs_fp32_db'] == float('inf')
    assert data['machine']['torch'] == torch.__version__
    table = (folder / 'inference.md').read_text(encoding='utf-8')
    assert table.startswith('| route | precision | batch |') and 'share of ceiling' in table and 'target ' in table


def benchmark_inference_module():
    from tola_plugin.evaluation import inference_benchmark
    return inference_benchmark


def test_peak_rss_child_measures_one_restore(result):
    _, folder = result
    lq = benchmark_inference_module().rendered_lines(1)
    assert lq.shape == (1, 3, 128, 512) and 0 <= float(lq.min()) and float(lq.max()) <= 1
    merged = str(folder / 'work' / 'TOLA_merged_benchmark.safetensors')
    memory = benchmark_inference_module().peak_rss_child('default', None, None, True, merged, lq[:, :, :32, :128])
    assert memory['peak_rss_bytes'] >= memory['import_rss_bytes'] > 0


def test_latency_figure_from_the_benchmark_json(result, tmp_path, monkeypatch):
    figures = capture_figures(monkeypatch)
    _, folder = result
    summary = tmp_path / 'summary.json'
    summary.write_text(json.dumps({'summary': {'TOLA': {'psnr': 24.8}}}), encoding='utf-8')  # no TransOCR ACC
    latency = tmp_path / 'others.csv'
    latency.write_text('method,seconds_per_image,psnr\nESRGAN,0.5,22.1\n', encoding='utf-8')
    assert plot_results.main([
        'latency', '--benchmark',
        str(folder / 'inference.json'), '--latency',
        str(latency), '--summary',
        str(summary), '--highlight', 'TOLA', '--out',
        str(tmp_path / 'fig')
    ]) == 0
    (fig, _), = figures  # one PSNR panel (no ACC in the summary): TOLA at the benchmark's default seconds
    (ax, ) = fig.axes
    default_s = json.loads((folder / 'inference.json').read_text(encoding='utf-8'))['timings']['default batch 1']
    default_s = float(default_s['per_image_s'])
    assert dict(zip(annotations(ax), scatter_points(ax))) == {'ESRGAN': (0.5, 22.1), 'TOLA': (default_s, 24.8)}
    with pytest.raises(ValueError, match='no timing'):
        plot_results.main([
            'latency', '--benchmark',
            str(folder / 'inference.json'), '--benchmark-route', 'gpu', '--summary',
            str(summary), '--out',
            str(tmp_path / 'bad')
        ])
