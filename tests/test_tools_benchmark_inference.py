"""tools/benchmark_inference.py on a tiny random backbone (in process), and the latency figure drawn from its JSON."""
import json
import os
import sys

import pytest
import torch
import yaml

import tola_plugin  # noqa: F401
from conftest import REPO
from numerics import within
from tola_testing import one_thread, tiny_backbone  # noqa: F401

sys.path.insert(0, os.path.join(REPO, 'tools'))
import benchmark_inference  # noqa: E402
import plot_results  # noqa: E402

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def result(tmp_path_factory):
    folder = tmp_path_factory.mktemp('bench')
    opt = folder / 'tiny.yml'
    opt.write_text(
        yaml.safe_dump(
            {'network_g': {'type': 'TOLANet', **tiny_backbone(), 'lrc': {'type': 'LatentResidualCorrection'}}}),
        encoding='utf-8')
    out = folder / 'inference.json'
    assert benchmark_inference.main([
        '-opt',
        str(opt), '--random-weights', '--batch', '2', '--repeats', '1', '--precision', 'bf16', '--no-memory',
        '--workdir',
        str(folder / 'work'), '--out',
        str(out)
    ]) == 0
    return json.loads(out.read_text(encoding='utf-8')), folder


@pytest.mark.numerics
def test_benchmark_reports_every_route_stage_and_precision(result):
    data, folder = result
    routes = ('reference', 'default', 'onnxruntime')
    assert set(data['timings']) == {f'{r} batch {b}' for r in routes for b in (1, 2)}
    for row in data['timings'].values():
        assert set(row['stages_s']) == set(benchmark_inference.STAGES) and row['total_s'] > 0
        assert row['per_image_s'] == pytest.approx(row['total_s'] / row['batch'])
        # the stages are parts of the forward (the rest: noise, q-sample, ẑ0 formulas)
        assert 0 < sum(row['stages_s'].values()) <= row['total_s']
    assert set(data['speedup']) == {'default', 'onnxruntime'} and set(data['speedup']['default']) == {'1', '2'}
    for route in ('default', 'onnxruntime'):  # the same function as the reference route, in float32: measured
        # 1.4e-6 (default) and 1.1e-5 (ONNX Runtime's kernels) relative, tolerance 2e-3 (180x)
        assert data['parity'][route]['same_tokens']
        within(data['parity'][route]['image_rel_diff'], 2e-3, f'benchmark parity, {route} vs reference route')
    bf16 = data['precision']['bf16']
    assert bf16['dtype'] == 'bfloat16' and bf16['max_abs_diff'] > 0 and bf16['psnr_mean_db'] > 20
    assert data['weight_bytes']['default'] == data['weight_bytes']['onnxruntime'] > 0
    assert data['machine']['torch'] == torch.__version__
    assert (folder / 'inference.md').read_text(encoding='utf-8').startswith('| route | batch |')


def test_peak_rss_child_measures_one_restore(result):
    _, folder = result
    lq = benchmark_inference.rendered_lines(1)
    assert lq.shape == (1, 3, 128, 512) and 0 <= float(lq.min()) and float(lq.max()) <= 1
    merged = str(folder / 'work' / 'TOLA_merged_benchmark.safetensors')
    memory = benchmark_inference.peak_rss_child('default', None, None, True, merged, lq[:, :, :32, :128])
    assert memory['peak_rss_bytes'] >= memory['import_rss_bytes'] > 0


def test_latency_figure_from_the_benchmark_json(result, tmp_path):
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
    assert (tmp_path / 'fig.png').stat().st_size > 10_000
    with pytest.raises(ValueError, match='no timing'):
        plot_results.main([
            'latency', '--benchmark',
            str(folder / 'inference.json'), '--benchmark-route', 'gpu', '--summary',
            str(summary), '--out',
            str(tmp_path / 'bad')
        ])


def test_onnxruntime_backend_checks_its_files_and_inputs(result, tmp_path):
    import shutil

    from tola_plugin.archs.tola_arch import TOLANet
    from tola_plugin.checkpoints.tola import onnx_folder
    _, folder = result
    merged = str(folder / 'work' / 'TOLA_merged_benchmark.safetensors')
    net = TOLANet.load_for_inference(merged, backend='onnxruntime')
    assert net.backend == 'onnxruntime' and not any(k.startswith(('idm.', 'vae.')) for k in net.state_dict())
    with pytest.raises(ValueError, match='exported for 128x512'):
        net(torch.rand(1, 3, 64, 256))
    with pytest.raises(ValueError, match='fp32 only'):
        net.set_precision('bf16')
    with pytest.raises(ValueError, match='backend must be'):
        TOLANet.load_for_inference(merged, backend='tensorrt')
    other = str(tmp_path / 'other.safetensors')
    shutil.copy(merged, other)
    with pytest.raises(FileNotFoundError, match='export_merged.py --onnx'):
        TOLANet.load_for_inference(other, backend='onnxruntime')
    shutil.copytree(onnx_folder(merged), onnx_folder(other))
    manifest = os.path.join(onnx_folder(other), 'manifest.json')
    with open(manifest, encoding='utf-8') as f:
        data = json.load(f)
    data['tag'] = 'another export'
    with open(manifest, 'w', encoding='utf-8') as f:
        json.dump(data, f)
    with pytest.raises(ValueError, match='were not exported with'):
        TOLANet.load_for_inference(other, backend='onnxruntime')
