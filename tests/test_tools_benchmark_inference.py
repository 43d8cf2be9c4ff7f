"""tools/benchmark_inference.py on a tiny random backbone (in process), and the latency figure drawn from its JSON."""
import json
import os
import sys

import pytest
import torch
import yaml

import tola_plugin  # noqa: F401
from tola_lab.benchmarks import folder_throughput, inference_inputs, peak_memory, stage_timing
from tola_plugin.archs.precision import STAGE_NAMES, StageDtypes, cpu_has_native_bf16, precision_dtype
from tola_plugin.archs.stages import LABEL
from conftest import REPO, render_pairs
from figure_testing import annotations, capture_figures, scatter_points
from inference_testing import write_tiny_merged
from numerics import within
from tola_testing import one_thread, tiny_backbone  # noqa: F401

sys.path.insert(0, os.path.join(REPO, 'tools'))
import benchmark_inference  # noqa: E402
import plot_results  # noqa: E402

pytestmark = [pytest.mark.usefixtures('one_thread'), pytest.mark.openvino]
# a route that does not qualify on this machine (e.g. OpenVINO bf16 with oneDNN forced below the CPU's bf16
# instructions, as make test-isa does) is reported as passed over, not timed; bf16 where the CPU has bf16
# instructions (elsewhere it is emulated, minutes of the suite's time for nothing it would not test on another CPU)
PRECISIONS = ('fp32', 'bf16') if cpu_has_native_bf16() else ('fp32', )
# the tool run whole (every route, precision and target, the folder and quality runs: 1-2 minutes of a 2-core CPU)
# is the end-to-end tier's (setup.cfg); its parts (stage timer, bounds, MACs) are make test's
# (test_tools_benchmark_bounds.py, test_tools_benchmark.py)
WHOLE_TOOL = pytest.mark.end_to_end


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
        '--folder-lines', '3', '--quality-model', quality_model, '--quality-opt',
        str(quality_opt), '--workdir',
        str(folder / 'work'), '--out',
        str(out)
    ]) == 0
    return json.loads(out.read_text(encoding='utf-8')), folder


@pytest.mark.numerics
@WHOLE_TOOL
def test_benchmark_reports_every_route_precision_and_target(result):
    data, folder = result
    routes = {f'{b} {p}' for b in ('torch', 'openvino') for p in PRECISIONS}
    passed = set(data['passed_over'])
    assert passed <= routes - {'torch fp32'}  # the plain route always runs
    assert all('qualif' in why or 'failed' in why for why in data['passed_over'].values())
    timed = {'reference', 'auto'} | (routes - passed)
    assert set(data['timings']) == {f'{n} batch 1' for n in timed} | {'auto batch 2'}
    for row in data['timings'].values():
        assert set(row['stages_s']) == set(stage_timing.LABELS)
        assert row['per_image_s'] == pytest.approx(row['total_s'] / row['batch'])
        if row['batch'] == 1:  # the stages are parts of the forward (the rest: noise, q-sample, ẑ0 formulas)
            assert sum(row['stages_s'].values()) <= row['total_s']
    for name in routes - passed:
        backend, precision = name.split()
        row = data['timings'][f'{name} batch 1']
        assert row['stage_precisions']['text prior'] == 'fp32'
        computed = {stage: row['stage_precisions'][LABEL[stage]] for stage in STAGE_NAMES}
        if backend == 'torch':  # one precision on every stage, as asked (fp32 and bf16 have no exception)
            assert set(computed.values()) == {precision} and row['dtype'] == precision
        else:  # what OpenVINO compiled: fp32 on a stage where it has no kernel in the precision asked (a CPU
            # without bf16 instructions, or oneDNN capped below them as make test-isa does), and the label says so
            assert set(computed.values()) <= {'fp32', precision}
            assert row['dtype'] == StageDtypes({s: precision_dtype(p) for s, p in computed.items()}).name
    for name in passed:  # refused by a bound of the qualification, the route's ẑ0 and image among them
        assert 'wrong results' in data['passed_over'][name] or 'failed' in data['passed_over'][name]
    plan = data['auto_plan']
    assert plan['asked'] == {'backend': 'auto', 'precision': 'auto'} and plan['reason']
    assert data['timings']['auto batch 1']['dtype'] == plan['precision'] == data['auto_dtype']
    assert f"{plan['backend']} {plan['precision']}" not in passed
    assert plan['stages'] == {s: p
                              for s, p in plan['stages'].items() if p in ('fp32', 'bf16', 'fp16')
                              } and plan['stages'].keys() == {'vae_encoder', 'mom', 'idm', 'lrc', 'vae_decoder'}
    for name in timed - {'reference'}:  # the route's ẑ0 error beside its speed
        assert data['parity'][name]['z0_of_z_lr'] >= 0
    for name in {'torch fp32', 'openvino fp32'} - passed:  # the reference route's function in float32: measured
        # 1.6e-6 relative (torch and OpenVINO, all three kernel sets), tolerance 2e-3 (1290x)
        assert data['parity'][name]['same_tokens']
        within(data['parity'][name]['image_rel_diff'], 2e-3, f'benchmark parity, {name} vs reference route')
    assert data['route_gmac'] > 0 and set(data['macs']) >= {'IDM', 'VAE encoder', 'VAE decoder', 'LRC'}
    assert data['ceiling_gflops']['fp32'] > 0 and data['ceiling_gflops']['bf16'] > 0 and data['copy_gbps'] > 0
    assert set(data['stage_elements']) >= {'IDM', 'VAE encode', 'VAE decode', 'LRC', 'text prior'}
    assert set(data['bounds']) == {name for name, row in data['timings'].items() if row['batch'] == 1}
    assert {b['bound']
            for stages in data['bounds'].values()
            for b in stages.values()} <= {'compute', 'memory bandwidth', 'kernels'}
    assert data['photo']['lines'] == 2 and data['photo']['speedup'] > 0
    assert set(data['targets']) >= {'auto_vs_reference', 'openvino_fp32_vs_reference', 'photo_batch_speedup'}
    assert ('auto_vs_bf16_ceiling' in data['targets']) == data['machine']['native_bf16']
    run = data['folder']  # every setting ran (OpenVINO fp32 qualified: the parity above) on the same 3 lines
    assert run['lines'] == 3 and set(run['rows']) == {name for name, _ in folder_throughput.SETTINGS}
    for name, batch in folder_throughput.SETTINGS:
        row = run['rows'][name]
        assert row['images_per_s'] == pytest.approx(3 / row['seconds']) and set(row) == {
            'batch', 'seconds', 'all_seconds', 'images_per_s', 'max_diff_u8', 'same_text_prior'
        }
        assert row['max_diff_u8'] <= 1 and row['same_text_prior']  # the same images as the first setting
        assert row['batch'] == (batch or row['batch'])
    quality = data['quality']
    assert quality['lines'] == 3 and set(quality['rows']) == routes - set(quality['passed_over'])
    bf16_rows = {name.split()[0] for name in quality['rows'] if name.endswith('bf16')}
    assert {f'bf16_psnr_drop_db ({b})' for b in bf16_rows} <= set(data['targets'])
    assert quality['rows']['torch fp32']['same_text_prior'] == 1.0 and quality['rows']['torch fp32'][
        'psnr_vs_fp32_db'] == float('inf')
    assert data['machine']['torch'] == torch.__version__
    table = (folder / 'inference.md').read_text(encoding='utf-8')
    assert table.startswith('| route | precision (as computed) | ẑ0 error | batch |') and 'share of ceiling' in table
    assert 'target ' in table
    assert '| ideal s | x ideal |' in table and 'What bounds each stage' in table
    assert 'Folder of 3 lines' in table and '| batch 1 | 1 |' in table


@WHOLE_TOOL
def test_peak_rss_child_measures_one_restore(result):
    _, folder = result
    lq = inference_inputs.rendered_lines(1)
    assert lq.shape == (1, 3, 128, 512) and 0 <= float(lq.min()) and float(lq.max()) <= 1
    merged = str(folder / 'work' / 'TOLA_merged_benchmark.safetensors')
    memory = peak_memory.peak_rss_child('auto', None, None, True, merged, lq[:, :, :32, :128])
    assert memory['peak_rss_bytes'] >= memory['import_rss_bytes'] > 0
    # the user's process and the OpenVINO worker's (where OpenVINO serves), each its own peak
    assert memory['peak_rss_bytes'] == memory['user_peak_rss_bytes'] + memory['worker_peak_rss_bytes']
    assert memory['user_peak_rss_bytes'] >= memory['import_rss_bytes']


@WHOLE_TOOL
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
    default_s = json.loads((folder / 'inference.json').read_text(encoding='utf-8'))['timings']['auto batch 1']
    default_s = float(default_s['per_image_s'])
    assert dict(zip(annotations(ax), scatter_points(ax))) == {'ESRGAN': (0.5, 22.1), 'TOLA': (default_s, 24.8)}
    with pytest.raises(ValueError, match='no timing'):
        plot_results.main([
            'latency', '--benchmark',
            str(folder / 'inference.json'), '--benchmark-route', 'gpu', '--summary',
            str(summary), '--out',
            str(tmp_path / 'bad')
        ])


@WHOLE_TOOL
def test_folder_model_runs_the_folder_measurement_alone(result, tmp_path):
    """``--folder-model MERGED`` (docs/inference.md, "Folders: one stream"): only the folder run, its table and JSON."""
    _, folder = result
    out = tmp_path / 'folder.json'
    args = ['--folder-model', str(folder / 'trained.safetensors'), '--folder-lines', '2', '--repeats', '1']
    assert benchmark_inference.main(args + ['--out', str(out)]) == 0
    data = json.loads(out.read_text(encoding='utf-8'))
    assert set(data) == {'machine', 'command', 'folder'} and data['folder']['lines'] == 2
    assert all(row['max_diff_u8'] <= 1 and row['same_text_prior'] for row in data['folder']['rows'].values())
    assert (tmp_path / 'folder.md').read_text(encoding='utf-8').lstrip().startswith('Folder of 2 lines')
    with pytest.raises(SystemExit):
        benchmark_inference.parse_args(args[:2] + ['--folder-lines', '0'])


@WHOLE_TOOL
def test_precision_table(tmp_path, monkeypatch):
    """``--precision-table`` (docs/inference.md, "Precision"): each stage alone, then every stage, in bf16 and fp16
    on torch and OpenVINO against fp32, and each per-stage plan's speed with its ẑ0 error; the tiny model stands in
    for the demo backbone (converting that for OpenVINO takes a minute), on a quarter of a line."""
    from tola_lab.benchmarks import precision_route
    from inference_testing import tiny_adapted_net
    monkeypatch.setattr(precision_route, 'frozen_demo_net', lambda: tiny_adapted_net().prepare_for_inference())
    real_lines = precision_route.demo_lines
    monkeypatch.setattr(precision_route, 'demo_lines',
                        lambda count: tuple(x[:, :, :32, :128].contiguous() for x in real_lines(count)))
    opt = tmp_path / 'tiny.yml'
    opt.write_text(yaml.safe_dump({'network_g': {'type': 'TOLANet', **tiny_backbone()}}), encoding='utf-8')
    out = tmp_path / 'precision.json'
    assert benchmark_inference.main([
        '--precision-table', '-opt',
        str(opt), '--random-weights', '--lines', '1', '--repeats', '1', '--precision', 'fp32', '--out',
        str(out)
    ]) == 0
    data = json.loads(out.read_text(encoding='utf-8'))
    demo = data['demo']['rows']
    stages = {'vae_encoder', 'mom', 'idm', 'lrc', 'vae_decoder', 'all'}
    for backend in ('torch', 'openvino'):
        for precision in ('bf16', 'fp16'):
            rows = [r for r in demo if (r['backend'], r['precision']) == (backend, precision)]
            assert {r['stage'] for r in rows} == stages
    for row in demo:
        assert row['image_db'] > 0 and row['z0_of_z_lr'] >= 0 and 'z0_of_lr_to_hr' in row
        if row['stage'] in ('vae_decoder', 'lrc') and row['backend'] == 'torch':  # after ẑ0: cannot move it
            assert row['eps'] == row['z0'] == 0.0
    assert [(r['backend'], r['precision']) for r in data['model']['rows']] == [('openvino', 'fp32')]  # --precision
    assert set(data['speed']) == {'torch fp32', 'openvino fp32'}
    assert all(row['seconds'] > 0 and row['cpu_seconds'] > 0 and row['z0_of_z_lr'] >= 0
               for row in data['speed'].values())
    assert data['speed']['torch fp32']['z0_of_z_lr'] == 0.0
    table = (tmp_path / 'precision.md').read_text(encoding='utf-8')
    assert '| backend | precision | stage | computed | Δε̂ | Δẑ0 | Δẑ0 / z_LR |' in table
    assert "qualification bounds: Δẑ0 / z_LR <= 3%, the image's RMS error <= 0.0089 (41 dB)" in table


def test_the_precision_table_times_the_plans_auto_tries():
    from tola_lab.benchmarks.precision_route import plan_paths
    assert [p.name for p in plan_paths('openvino', ['fp32', 'bf16', 'fp16'])] == [
        'openvino fp32', 'openvino fp32 (bf16: vae_encoder, vae_decoder)', 'openvino fp32 (bf16: vae_decoder)',
        'openvino bf16', 'openvino fp32 (fp16: idm)', 'openvino fp16 (fp32: vae_decoder)'
    ]


def test_the_latency_figure_reads_the_auto_row_of_files_that_named_it_default():
    """The row "default" ran auto's plan while the entry points default to fp32: it is "auto" now; older files
    (docs/benchmarks/) still plot."""
    from tola_plugin.commands.evaluation.plots import read_benchmark_json
    path = os.path.join(REPO, 'docs', 'benchmarks', 'inference_cpu_2core_xeon.json')
    seconds = json.loads(open(path, encoding='utf-8').read())['timings']['default batch 1']['per_image_s']
    assert read_benchmark_json(path, 'TOLA') == ({'TOLA': seconds}, {})
    with pytest.raises(ValueError, match="no timing 'reference batch 2'"):
        read_benchmark_json(path, 'TOLA', 'reference', 2)
