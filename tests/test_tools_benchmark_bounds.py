"""The inference benchmark's yardsticks: each route's ideal time at the matmul ceiling, and what bounds each stage
(compute, memory bandwidth or the runtime's kernels), from made-up numbers (the logic, not this machine's speed);
and the bytes a stage moves, counted on the tiny network against the LRC's layers written out."""
import math

import pytest
import torch
from torch import nn

from tola_lab.benchmarks import inference_report, machine_ceiling, stage_timing
from tola_lab.benchmarks.stage_bounds import KERNEL_SLACK, stage_bounds, stage_macs, stage_traffic
from tola_lab.benchmarks.stage_timing import LABELS, uniform_precisions
from tola_plugin.archs.tola_arch import TOLANet
from tola_testing import one_thread, tiny_net_opt  # noqa: F401

CEILING = {'fp32': 100.0, 'bf16': 400.0}  # GFLOP/s
COPY = 10.0  # GB/s


def test_each_stage_is_bound_by_the_larger_of_compute_and_traffic_or_by_the_kernels():
    macs = {'IDM': 50e9, 'VAE decode': 1e9, 'VAE encode': 50e9}  # at 100 GFLOP/s: 1.0 s, 0.02 s, 1.0 s
    elements = {'IDM': 1e9, 'VAE decode': 5e9, 'VAE encode': 1e9, 'MoM text': 1e6}  # fp32: 0.4 s, 2.0 s, 0.4 s
    seconds = {'IDM': 1.2, 'VAE decode': 2.5, 'VAE encode': 3.0, 'MoM text': 0.01, 'LRC': 0.0}
    out = stage_bounds(seconds, uniform_precisions('fp32'), macs, elements, CEILING, COPY)
    assert set(out) == {'IDM', 'VAE decode', 'VAE encode', 'MoM text'}  # a stage that took no time: no bound
    assert out['IDM']['bound'] == 'compute' and out['IDM']['x_roofline'] == pytest.approx(1.2)
    assert out['IDM']['compute_s'] == pytest.approx(1.0) and out['IDM']['memory_s'] == pytest.approx(0.4)
    assert out['VAE decode']['bound'] == 'memory bandwidth' and out['VAE decode']['x_roofline'] == pytest.approx(1.25)
    assert out['VAE encode']['bound'] == 'kernels' and out['VAE encode']['x_roofline'] == pytest.approx(3.0)
    # no MACs counted: the traffic alone is its roofline (4e6 bytes at 10 GB/s: 0.4 ms; 25x above it)
    assert out['MoM text']['bound'] == 'kernels' and out['MoM text']['x_roofline'] == pytest.approx(25.0)
    # bf16: half the bytes, the bf16 ceiling (IDM 0.25 s of compute, 0.2 s of traffic: 1.2 s is kernels)
    low = stage_bounds(seconds, uniform_precisions('bf16'), macs, elements, CEILING, COPY)
    assert low['VAE decode']['memory_s'] == pytest.approx(1.0) and low['VAE decode']['bound'] == 'kernels'
    assert low['IDM']['compute_s'] == pytest.approx(0.25) and low['IDM']['x_roofline'] == pytest.approx(4.8)
    at_slack = stage_bounds({'IDM': KERNEL_SLACK * 1.0}, uniform_precisions('fp32'), macs, elements, CEILING, COPY)
    # a precision per stage: the IDM's at the fp32 ceiling, the VAE decoder's bytes in bf16
    mixed = stage_bounds(seconds, dict(uniform_precisions('fp32'), **{'VAE decode': 'bf16'}), macs, elements, CEILING,
                         COPY)
    assert mixed['IDM'] == out['IDM'] and mixed['VAE decode'] == low['VAE decode']
    assert at_slack['IDM']['bound'] == 'compute'  # at the slack still the machine's bound


def test_macs_are_filed_under_the_timed_stages():
    counted = {'TransOCR encoder': 3, 'VAE encoder': 5, 'IDM': 7, 'LRC': 11, 'VAE decoder': 13}
    assert stage_macs(counted) == {'text prior': 3, 'VAE encode': 5, 'IDM': 7, 'LRC': 11, 'VAE decode': 13}
    assert set(stage_macs(counted)) <= set(LABELS)


def result_with(default_s, ref_s=8.0):
    stages = {s: 0.0 for s in LABELS}
    timings = {
        'reference batch 1': dict(route='reference', dtype='fp32', batch=1, per_image_s=ref_s,
                                  stage_precisions=uniform_precisions('fp32'), stages_s=dict(stages, IDM=ref_s / 2)),
        'auto batch 1': dict(route='auto', dtype='bf16', batch=1, per_image_s=default_s,
                             stage_precisions=uniform_precisions('bf16'), stages_s=dict(stages, IDM=default_s / 2))
    }
    result = {
        'timings': timings, 'route_gmac': 100.0, 'macs': {'IDM': 100e9}, 'ceiling_gflops': CEILING, 'copy_gbps': COPY,
        'stage_elements': {'IDM': 1e9}, 'machine': {'native_bf16': True}
    }
    result['bounds'] = inference_report.bounds(result)
    return result


def test_the_report_shows_each_routes_ideal_time_and_each_stages_bound():
    result = result_with(default_s=0.6)
    # ideal: 2 x 100 GMAC at the route's ceiling: fp32 2.0 s (reference 4.0x), bf16 0.5 s (default 1.2x)
    assert inference_report.ideal_seconds(result, uniform_precisions('fp32')) == pytest.approx(2.0)
    assert inference_report.ideal_seconds(result, uniform_precisions('bf16')) == pytest.approx(0.5)
    assert math.isnan(inference_report.ideal_seconds({'ceiling_gflops': CEILING}, uniform_precisions('fp32')))
    table = inference_report.markdown(result)
    assert '| s / image | GMAC/s | share of ceiling | ideal s | x ideal |' in table
    assert '| 8.00 | 12.5 | 25% | 2.00 | 4.00 |' in table and '| 0.60 | 166.7 | 83% | 0.50 | 1.20 |' in table
    assert '| route | precision (as computed) | ẑ0 error |' in table
    # IDM: reference 4 s over max(2 s compute, 0.4 s traffic) = 2.0x: kernels; default 0.3 s over 0.5 s: compute
    assert result['bounds']['reference batch 1']['IDM']['bound'] == 'kernels'
    assert result['bounds']['auto batch 1']['IDM']['bound'] == 'compute'
    assert '| reference | fp32 |' in table and 'kernels 2.0x' in table and 'compute 0.6x' in table
    assert 'copy bandwidth 10.0 GB/s' in table
    checks = inference_report.check_targets(result)
    assert checks['auto_vs_bf16_ceiling']['value'] == pytest.approx(1.2) and checks['auto_vs_bf16_ceiling']['met']
    slow = inference_report.check_targets(result_with(default_s=0.8))  # 1.6x the ideal: over the 1.5x
    assert not slow['auto_vs_bf16_ceiling']['met']
    emulated = result_with(default_s=0.6)
    emulated['machine']['native_bf16'] = False  # no bf16 instructions: the bf16 ceiling is no target here
    assert 'auto_vs_bf16_ceiling' not in inference_report.check_targets(emulated)


def test_copy_bandwidth_is_bytes_read_and_written_per_second(monkeypatch):
    clock = iter([0.0, 0.5] * 5)
    monkeypatch.setattr(machine_ceiling.time, 'perf_counter', lambda: next(clock))
    # 1 MB copied each time in 0.5 s: 2 MB moved -> 4.194304e-3 GB/s
    assert machine_ceiling.copy_bandwidth(megabytes=1) == pytest.approx(2 * 2**20 / 0.5 / 1e9)


@pytest.mark.usefixtures('one_thread')
def test_stage_traffic_counts_every_layer_call_of_each_stage():
    torch.manual_seed(0)
    net = TOLANet(**tiny_net_opt()).prepare_for_inference()
    lq = torch.rand(1, 3, 128, 512)
    elements = stage_traffic(net, lq)
    assert {'text prior', 'VAE encode', 'MoM text', 'IDM', 'LRC', 'VAE decode'} <= set(elements)
    # the LRC written out: each convolution reads its input and weights and writes its output once, on the latent
    with torch.inference_mode():
        h, w = net.vae.encode(lq).latent_dist.mode().shape[-2:]
    convs = [m for m in net.lrc.modules() if isinstance(m, nn.Conv2d)]
    assert elements['LRC'] == sum(
        (c.in_channels + c.out_channels) * h * w + c.weight.numel() + c.bias.numel() for c in convs)
    # every weight of the IDM is read at least once per call
    assert elements['IDM'] > sum(p.numel() for p in net.idm.parameters())


@pytest.mark.usefixtures('one_thread')
def test_the_stage_timer_times_every_stage_through_the_runner_and_leaves_the_network_as_it_was():
    """``StageTimer`` changes how the network runs only by ``TOLANet.running`` (no network attribute is swapped, no
    hook): each of the six stages is timed, the stages fit in the forward, the output is the untimed network's, and
    ``close`` gives the network its own runner back."""
    torch.manual_seed(0)
    net = TOLANet(**tiny_net_opt()).eval()
    own, lq = net.stage_runner, torch.rand(1, 3, 32, 128)
    with torch.no_grad():
        plain = net(lq, noise_seeds=[0])
    attributes = dict(vars(net))
    timer = stage_timing.StageTimer(net)
    out, total, stages = stage_timing.restore(net, timer, lq)
    assert set(stages) == set(LABELS) and all(s > 0 for s in stages.values()) and sum(stages.values()) <= total
    assert torch.equal(out['image'], plain) and timer.current is None
    timer.close()
    assert net.stage_runner is own and dict(vars(net)) == attributes
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in net.modules())
