"""Inference on GPU machines, tested on a CPU with CUDA simulated: the 200-step route drawing its noise from a CPU
generator for tensors on another device (the entry points' device, backend and TF32: test_inference_openvino.py);
the GPU check's speed table (``tola_lab/gpu_check/inference_step.py``): its batch sweep, TF32 on the image stages, its
rows."""
import torch

from tola_lab.gpu_check import inference_step as infer_step
from tola_plugin.archs.difftsr_arch import difftsr_sample
from tola_plugin.archs.diffusion_schedule import make_ldm_scheduler
from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.runtime.plan import BackendPrecision
from tola_testing import tiny_net_opt


def test_200_step_route_draws_from_a_cpu_generator_on_another_device(monkeypatch):
    """CUDA refuses ``torch.randn(generator=<CPU generator>, device='cuda')``; the same rule is imposed here on the
    meta device standing in for the GPU. Every draw of the route (posterior, q-sample, DDIM steps) goes through
    diffusers' randn_tensor, which draws on the generator's device and moves the noise."""
    real_randn = torch.randn

    def randn_as_cuda(*size, generator=None, device=None, **kwargs):
        if generator is not None and device is not None and torch.device(device).type != generator.device.type:
            raise RuntimeError(f"Expected a '{torch.device(device).type}' device type for generator but found "
                               f"'{generator.device.type}'")
        return real_randn(*size, generator=generator, device=device, **kwargs)

    monkeypatch.setattr(torch, 'randn', randn_as_cuda)
    with torch.device('meta'):
        net = TOLANet(**tiny_net_opt(idm_lora=False, vae_lora=False))
    lq = torch.rand(1, 3, 32, 128, device='meta')
    c_t = torch.zeros(1, 24, dtype=torch.long, device='meta')
    out = difftsr_sample(net.idm, net.vae, net.mom, lq, c_t, make_ldm_scheduler('ddim', 3), 0.2,
                         generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 3, 32, 128) and out.device.type == 'meta'


def simulated_cuda(monkeypatch, peak_bytes):
    """CUDA's calls the speed table makes, on a CPU: synchronizing does nothing, the peak is ``peak_bytes[0]``."""
    for name in ('synchronize', 'reset_peak_memory_stats', 'empty_cache'):
        monkeypatch.setattr(torch.cuda, name, lambda *a: None)
    monkeypatch.setattr(torch.cuda, 'max_memory_allocated', lambda *a: peak_bytes[0])


def test_the_batch_sweep_stops_where_memory_runs_out_or_the_throughput_saturates(monkeypatch):
    peak, now = [0], [0.0]
    simulated_cuda(monkeypatch, peak)

    def fits_8(batch):  # 0.1 s a call + 0.01 s a line; batch 16 runs out of memory
        if len(batch) > 8:
            raise torch.cuda.OutOfMemoryError('CUDA out of memory')
        peak[0], now[0] = len(batch) * 2**30, now[0] + 0.1 + 0.01 * len(batch)

    lines = torch.zeros(3, 3, 4, 4)
    swept = infer_step.batch_sweep(fits_8, lines, 'cuda', 64, clock=lambda: now[0])
    assert [r['batch'] for r in swept['batches']] == [1, 2, 4, 8] and swept['out_of_memory_at'] == 16
    assert swept['best_batch'] == 8 and swept['lines_per_s'] == round(8 / 0.18, 2) and swept['best_batch_peak_gib'] == 8

    def saturates_at_4(batch):  # a call costs what 4 lines cost up to 4
        now[0] += 0.1 * max(len(batch), 4)

    swept = infer_step.batch_sweep(saturates_at_4, lines, 'cuda', 64, clock=lambda: now[0])
    assert [r['batch'] for r in swept['batches']] == [1, 2, 4, 8] and swept['best_batch'] == 4
    assert swept['out_of_memory_at'] is None
    assert [r['batch']
            for r in infer_step.batch_sweep(fits_8, lines, 'cuda', 2, clock=lambda: now[0])['batches']] == [1, 2]


def test_tf32_on_the_image_stages_leaves_the_text_prior_ieee_and_every_switch_is_put_back(monkeypatch):
    net = TOLANet(**tiny_net_opt(idm_lora=False, vae_lora=False)).eval()
    seen = {}
    for method in ('encode', 'encode_text', 'denoise', 'correct', 'decode', 'read_text'):
        original = getattr(StageRunner, method)

        def record(self, *args, _method=method, _original=original, **kwargs):
            seen[_method] = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(StageRunner, method, record)
    monkeypatch.setattr(torch.backends.cudnn, 'benchmark', False)  # BasicSR's training pipeline sets it process-wide
    runner, benchmark = net.stage_runner, torch.backends.cudnn.benchmark
    variants = ('TF32 on the image stages', 'channels_last', 'cudnn.benchmark')
    with infer_step.running(net, BackendPrecision.uniform('torch', torch.float32), 'cpu', variants=variants) as place:
        lq = place(torch.rand(1, 3, 32, 128))
        assert lq.is_contiguous(memory_format=torch.channels_last) and torch.backends.cudnn.benchmark != benchmark
        net(lq, noise_seeds=[0])
    assert seen == {
        'encode': (True, True), 'denoise': (True, True), 'decode': (True, True), 'read_text': (False, False),
        'encode_text': (False, False), 'correct': (False, False)
    }
    assert net.stage_runner is runner and torch.backends.cudnn.benchmark == benchmark
    assert all(p.is_contiguous() for p in net.parameters())


def test_each_speed_row_is_named_for_what_it_runs_and_past_the_deadline_is_not_run():
    fp32 = BackendPrecision.uniform('torch', torch.float32)
    auto = fp32.replace(idm=torch.float16)
    rows = infer_step.speed_rows(None, None, 'cuda', {'fp32': fp32, 'auto': auto, 'fp16': auto}, 64, deadline=0.0,
                                 clock=lambda: 1.0)
    assert [r['row'] for r in rows] == [
        'auto: torch fp32 (fp16: idm)', 'fp32 (IEEE)', 'fp32 + TF32 (every stage, the text prior too)',
        'fp32 + TF32 on the image stages', 'fp16: torch fp32 (fp16: idm)', 'auto + cudnn.benchmark',
        'auto + channels_last', 'auto + TF32 on the image stages', 'auto + late END check', 'auto + torch.compile'
    ] and all(r['not_run'] for r in rows)


def test_a_variant_says_after_how_many_lines_its_warm_up_pays_back_and_compiling_needs_its_time(monkeypatch):
    """``pays_back_after_lines``: a variant's extra first-call seconds over the seconds it saves a line (none when it
    saves nothing); the torch.compile row is not begun with less than ``COMPILE_S`` left."""
    timing = {'auto + cudnn.benchmark': (0.05, 2.0), 'auto + channels_last': (0.2, 0.5)}

    def fake_row(net, canvases, device, name, path, cap, everywhere, variants):
        per_line, first = timing.get(name, (0.1, 0.5))
        return {'row': name, 'plan': path.name, 'seconds_per_line': per_line, 'first_call_s': first}

    monkeypatch.setattr(infer_step, 'speed_row', fake_row)
    fp32 = BackendPrecision.uniform('torch', torch.float32)
    now = [0.0]
    rows = {
        r['row']: r
        for r in infer_step.speed_rows(None, None, 'cuda', {'fp32': fp32, 'auto': fp32}, 64,
                                       deadline=infer_step.COMPILE_S - 1, clock=lambda: now[0])
    }
    assert rows['auto + cudnn.benchmark']['vs_auto'] == 2.0
    assert rows['auto + cudnn.benchmark']['pays_back_after_lines'] == 30  # (2.0 - 0.5) s / 0.05 s a line
    assert rows['auto + channels_last']['pays_back_after_lines'] is None  # slower: never
    assert rows['auto + TF32 on the image stages']['pays_back_after_lines'] is None  # saves nothing
    assert rows['auto + torch.compile']['not_run'] and 'not_run' not in rows['auto + channels_last']


def test_the_torch_compile_variant_runs_the_image_stages_compiled_and_computes_the_plain_route():
    """The torch.compile row's runner (dynamo's eager backend on the CPU: the wiring the GPU's inductor uses) sends
    the three image stages through compiled modules and gives the plain route's image; the row puts everything
    back."""
    torch.manual_seed(0)
    net = TOLANet(**tiny_net_opt(idm_lora=False, vae_lora=False)).eval()
    lq, fp32 = torch.rand(1, 3, 32, 128), BackendPrecision.uniform('torch', torch.float32)
    with torch.inference_mode():
        plain = net(lq, noise_seeds=[0])
    runner = net.stage_runner
    with infer_step.running(net, fp32, 'cpu', variants=('torch.compile', )) as place:
        assert net.stage_runner.name == 'torch fp32 + torch.compile'
        compiled = net(place(lq), noise_seeds=[0])
    assert torch.equal(compiled, plain)  # the same aten operations, traced: the same bits
    assert net.stage_runner is runner


def test_the_late_end_check_variant_reads_the_prior_late_and_computes_the_plain_route(monkeypatch):
    """The late END check's row runs the text prior with ``late_stop`` (the network's own decoding, asked for it) and
    gives the plain route's image: the steps it decodes past the last END are never read."""
    torch.manual_seed(0)
    net = TOLANet(**tiny_net_opt(idm_lora=False, vae_lora=False)).eval()
    lq, fp32 = torch.rand(1, 3, 32, 128), BackendPrecision.uniform('torch', torch.float32)
    with torch.inference_mode():
        plain = net(lq, noise_seeds=[0])
    asked, decode = [], net.transocr.greedy_decode
    monkeypatch.setattr(net.transocr, 'greedy_decode', lambda *a, **k: asked.append(
        (k['stop_at_end'], k.get('late_stop', False))) or decode(*a, **k))
    with infer_step.running(net, fp32, 'cpu', variants=('late END check', )) as place:
        late = net(place(lq), noise_seeds=[0])
    assert asked == [(True, True)] and torch.equal(late, plain)
