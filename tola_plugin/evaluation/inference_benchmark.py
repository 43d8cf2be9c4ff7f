"""The inference benchmark (tools/benchmark_inference.py): every route and precision side by side, against the
machine's own ceiling, and the precisions' quality on trained weights.

Speed (full-size weights, random or the option file's; rendered 128x512 lines, bicubic x4 degraded), one process,
interleaved, median of ``repeats`` runs after a warm-up, batch 1:

  reference        DiffTSR's way: greedy TransOCR re-running the whole prefix for 24 steps, LoRA unmerged, fp32.
  torch <p>        ``TOLANet.load_for_inference`` of the merged file on torch, precision p (qualified first).
  openvino <p>     the same with the IDM and VAE on OpenVINO, in its worker process (``tola_plugin/runtime``).
  default          what tola-infer / TOLAPipeline / tola-web run by default here (``runtime.placement.Runtime``:
                   backend auto, precision auto; its plan is in the result). A route that does not qualify on
                   this machine is reported under 'passed_over', not timed.

Per row: seconds per image, the stages (text prior, VAE encode, MoM text, IDM, LRC, VAE decode), GMAC/s of the
route's counted multiply-adds (``complexity.count_macs`` of the tensor stages) and their share of the machine's
matmul ceiling in that precision (a 2048x2048 torch matmul, measured here: ``matmul_ceiling``). The batched photo
path: ``photo_lines`` windows in one call of the default network vs as many single calls. Peak RSS of one restore of
each route in a fresh process (with its OpenVINO worker's), above the import baseline, against the bytes of the
weights it runs. Quality on
trained weights (``quality``): the held-out lines of a test option file restored with a merged model in each
precision and backend: PSNR (Y) against HR and against fp32, and whether the text prior's ids equal fp32's.
``TARGETS`` are the issue's; ``check_targets`` says which are met.
"""
import contextlib
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import torch

from tola_plugin.archs.mom_arch import DiffTSRMoM
from tola_plugin.archs.precision import cpu_has_native_bf16
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.data.image_io import tensor_to_uint8
from tola_plugin.data.text_degradation_dataset import TextDegradationDataset, held_out_dataset_opt
from tola_plugin.data.text_labels import text_targets
from tola_plugin.data.text_line_source import to_canvas
from tola_plugin.data.text_render import TextLineRenderer
from tola_plugin.evaluation.benchmarking import build_benchmark_tola
from tola_plugin.evaluation.complexity import count_macs
from tola_plugin.metrics.image_metrics import float_psnr, psnr_y8
from tola_plugin.models.tola_model import TOLAModel
from tola_plugin.runtime.machine import package_version
from tola_plugin.runtime.openvino_stages import openvino_missing
from tola_plugin.runtime.placement import NoPathLeft, Runtime
from tola_plugin.utils.option_files import read_option_file

STAGES = ('text prior', 'VAE encode', 'MoM text', 'IDM', 'LRC', 'VAE decode')
#: the issue's targets (2-core CPU with native bf16, batch 1, full size)
TARGETS = {
    'default_vs_reference': 2.8,  # auto (the default) at least this many times the reference route
    'default_vs_bf16_ceiling': 1.3,  # auto at most this many times the bf16 matmul ceiling's time for the route
    'openvino_fp32_vs_reference': 1.6,  # fp32 on the CPU backend
    'peak_rss_over_weights': 1.3,  # peak RSS above the import baseline / bytes of the weights
    'photo_batch_speedup': 1.5,  # 8 lines in one batch vs 8 single calls
    'bf16_psnr_drop_db': 0.1,  # trained weights: bf16 within this of fp32 (PSNR vs HR)
}


# ------------------------------------------------------------------------------------------------ inputs
def rendered_lines(count: int, seed: int = 0, with_targets: bool = False):
    """``count`` rendered text lines, degraded as the paper's x4 setting: HR 128x512 -> bicubic 32x128 -> the
    128x512 canvas (PIL bicubic, as the datasets). -> (count, 3, 128, 512) RGB in [0, 1]; with ``with_targets``
    also the HR lines (same shape) and the OCR targets (count, 25) of their texts."""
    import cv2

    renderer = TextLineRenderer(seed=seed)
    lines, hr, targets = [], [], []
    for i in range(count):
        rgb, text, _ = renderer.render(i)
        lr = cv2.resize(rgb, (128, 32), interpolation=cv2.INTER_CUBIC)
        lines.append(torch.from_numpy(to_canvas(lr, order='RGB')).permute(2, 0, 1))
        hr.append(torch.from_numpy(to_canvas(rgb, order='RGB')).permute(2, 0, 1))
        targets.append(text_targets(text, f'rendered line {i}')[1])
    if with_targets:
        return torch.stack(lines), torch.stack(hr), torch.stack(targets)
    return torch.stack(lines)


# ---------------------------------------------------------------------------------------------- networks
def build_reference(opt_path: str, checkpoint, random_weights: bool):
    """The option file's TOLANet with its adaptation state (or, with ``random_weights``, the full-size random
    backbone with seeded random LoRA/LRC values), LoRA unmerged, on the reference route."""
    net = build_benchmark_tola(opt_path, random_weights, adaptation=True, checkpoint=checkpoint)
    return net.set_switches(text_decoding='full_prefix', precision='fp32').eval()


def export_merged(opt_path: str, checkpoint, random_weights: bool, path: str) -> None:
    """Write the merged file of the reference network (built afresh: merging changes the network in place)."""
    import gc
    build_reference(opt_path, checkpoint, random_weights).save_merged(path)
    gc.collect()


def load_route(route: str, merged: str, device):
    """The inference network of ``route`` from the merged file, placed by the runtime decision (its plan:
    ``net.plan``): 'default' is what the entry points run here (backend auto, precision auto); '<backend>
    <precision>' (e.g. 'openvino bf16') insists on that path. -> (net, its Runtime); a path that does not qualify on
    this machine raises NoPathLeft with the reason."""
    if route == 'default':
        backend, precision = 'auto', 'auto'
    else:
        backend, precision = route.split()
    net = TOLANet.load_for_inference(merged, precision=precision)
    return net, Runtime(net, device, backend, source=merged, say=_say)


def runtime_weight_bytes(net) -> int:
    """Bytes of the parameters and buffers a TOLANet forward runs (the MoM image branch, which only feeds the TDM,
    is not counted; the inference path never loads it)."""
    skip = tuple(f'mom.{p}' for p in DiffTSRMoM.IMAGE_BRANCH)
    return sum(t.numel() * t.element_size() for k, t in net.state_dict().items() if not k.startswith(skip))


def route_macs(net, lq) -> Dict[str, int]:
    """Multiply-adds of the tensor stages of one (1, 3, H, W) restore of the torch network ``net`` (mmengine's
    counter): VAE encoder, IDM, VAE decoder, LRC, TransOCR's encoder. The text prior's decoding steps and the MoM
    text encoder (well under 1 %) are left out."""

    class Call(torch.nn.Module):

        def __init__(self, owner, fn):
            super().__init__()
            self.owner, self.fn = owner, fn
            self.eval()  # count_macs restores this mode on the owner afterwards: it must stay eval (dropout)

        def forward(self, *args):
            return self.fn(*args)

    with torch.no_grad():
        z = net.vae.encode(lq).latent_dist.mode()
        context = torch.zeros(1, 24, net.context_dim)
        t = torch.full((1, ), net.timestep, dtype=torch.long)
        macs = {
            'VAE encoder': count_macs(Call(net.vae, lambda x: net.vae.encode(x).latent_dist.mode()), (lq, )),
            'IDM': count_macs(net.idm, (torch.cat([z, z], 1), t, context)),
            'VAE decoder': count_macs(Call(net.vae, lambda x: net.vae.decode(x).sample), (z, )),
            'TransOCR encoder': count_macs(Call(net.transocr, lambda x: net.transocr.encode(x)), (lq, )),
        }
        if net.lrc is not None:
            macs['LRC'] = count_macs(net.lrc, (torch.cat([z, z], 1), ))
    return macs


def matmul_ceiling(size: int = 2048, repeats: int = 5, min_seconds: float = 0.2) -> Dict[str, float]:
    """This machine's torch matmul rate (GFLOP/s, 2 per multiply-add) of a square product in fp32 and in bf16,
    median of ``repeats`` after a warm-up. The size doubles from 256 up to ``size`` while one product takes less
    than ``min_seconds``: where bf16 is emulated (or the kernels are forced below it) a 2048 product would take
    minutes, and a smaller one measures the same rate."""
    rates = {}
    for name, dtype in (('fp32', torch.float32), ('bf16', torch.bfloat16)):
        n = 256
        while True:
            a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
            start = time.perf_counter()
            torch.mm(a, b)  # warm-up, and the size probe
            if n >= size or time.perf_counter() - start >= min_seconds:
                break
            n *= 2
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - start)
        rates[name] = 2 * n**3 / statistics.median(times) / 1e9
    return rates


class StageTimer:
    """Wall-clock seconds of each stage of ``net``'s forward, by wrapping the six calls Algorithm 1 makes."""

    def __init__(self, net):
        self.seconds: Dict[str, float] = defaultdict(float)
        self.sync = torch.cuda.synchronize if next(net.parameters()).is_cuda else (lambda: None)
        for stage, owner, name in (('text prior', net, 'predict_text_prior'), ('VAE encode', net.vae, 'encode'),
                                   ('MoM text', net, 'text_context'), ('IDM', net.idm, 'forward'),
                                   ('VAE decode', net.vae, 'decode')) + ((
                                       ('LRC', net.lrc, 'forward'), ) if net.lrc is not None else ()):
            setattr(owner, name, self._timed(stage, getattr(owner, name)))

    def _timed(self, stage, fn):

        def run(*args, **kwargs):
            self.sync()
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            self.sync()
            self.seconds[stage] += time.perf_counter() - start
            return out

        return run


def restore(net, timer: StageTimer, lq):
    """One forward of ``net`` on ``lq`` (per-image seeds 0..B-1) -> (output dict, total seconds, stage seconds)."""
    timer.seconds.clear()
    timer.sync()
    start = time.perf_counter()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter('ignore')  # an explicit bf16 where it is emulated warns once per call
        out = net(lq, noise_seeds=list(range(lq.shape[0])), return_intermediates=True)
    timer.sync()
    return out, time.perf_counter() - start, dict(timer.seconds)


# ---------------------------------------------------------------------------------------------- training
def training_iterations(opt_path: str, checkpoint, random_weights: bool, repeats: int) -> Dict:
    """Seconds of one TOLAModel training iteration (batch 1, the option file's losses; LPIPS with a random VGG
    trunk under ``random_weights``) with the text prior decoded DiffTSR's way ('full_prefix': before) and the fast
    way ('incremental': after), interleaved, median of ``repeats`` after a warm-up of each."""
    opt = read_option_file(opt_path)
    if 'train' not in opt:
        raise ValueError(f'{opt_path}: --train-iteration needs a training option file (a train block)')
    opt.update(num_gpu=0, dist=False, rank=0, world_size=1, is_train=True, auto_resume=False)
    opt.pop('val', None)
    workdir = tempfile.mkdtemp(prefix='tola_train_bench_')
    opt['path'] = {
        'pretrain_network_g': checkpoint, 'strict_load_g': True, 'experiments_root': workdir, 'models': workdir,
        'training_states': workdir, 'log': workdir, 'visualization': workdir
    }
    if random_weights:
        opt['network_g'].update(backbone_init='random')
        if opt['train'].get('perceptual_opt'):
            opt['train']['perceptual_opt']['pretrained_backbone'] = False  # same cost, no ImageNet file
    model = TOLAModel(opt)
    lq, gt, target = rendered_lines(1, with_targets=True)
    model.feed_data({'lq': lq, 'gt': gt, 'ocr_target': target})
    timer = StageTimer(model.bare_net)  # the text prior's share of the iteration
    runs, prior = defaultdict(list), defaultdict(list)
    for repeat in range(repeats + 1):
        for decoding in ('full_prefix', 'incremental'):
            model.bare_net.text_decoding = decoding
            timer.seconds.clear()
            start = time.perf_counter()
            model.optimize_parameters(repeat + 1)
            seconds = time.perf_counter() - start
            print(
                f'training iteration, text_decoding {decoding}: {seconds:.2f} s (text prior '
                f'{timer.seconds["text prior"]:.2f} s)', file=sys.stderr, flush=True)
            if repeat:
                runs[decoding].append(seconds)
                prior[decoding].append(timer.seconds['text prior'])
    return {
        'before_full_prefix_s': statistics.median(runs['full_prefix']),
        'after_incremental_s': statistics.median(runs['incremental']),
        'text_prior_before_s': statistics.median(prior['full_prefix']),
        'text_prior_after_s': statistics.median(prior['incremental']), 'all_s': dict(runs),
        'losses': sorted(model.log_dict), 'batch': 1
    }


# ------------------------------------------------------------------------------------------ peak memory
def rss_bytes(field: str) -> int:
    """A memory field of /proc/self/status in bytes: 'VmHWM' (peak resident set of this process image; unlike
    getrusage's ru_maxrss, which Linux carries over from the parent through fork and exec) or 'VmRSS'."""
    with open('/proc/self/status', encoding='ascii') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1]) * 1024
    raise OSError(f'/proc/self/status has no {field}')


def peak_rss_child(route: str, opt_path: str, checkpoint, random_weights: bool, merged: str, lq) -> Dict:
    """In a fresh process: build ``route``'s network, restore ``lq`` (one line), report its peak RSS and the RSS
    after the imports (the Python, torch and library baseline)."""
    # the baseline: this module's imports, done when the fresh process unpickled this function (the package, torch,
    # the OpenVINO backend's libraries)
    baseline = rss_bytes('VmRSS')
    runtime = None
    if route == 'reference':
        net = build_reference(opt_path, checkpoint, random_weights)
    else:
        net, runtime = load_route(route, merged, 'cpu')
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net(lq, noise_seeds=[0])
    worker = runtime.worker_peak_rss() if runtime is not None else 0  # OpenVINO's own process
    return {
        'peak_rss_bytes': rss_bytes('VmHWM') + worker, 'import_rss_bytes': baseline, 'worker_peak_rss_bytes': worker
    }


def peak_rss(route: str, *args) -> Dict:
    with multiprocessing.get_context('spawn').Pool(1) as pool:
        return pool.apply(peak_rss_child, (route, ) + args)


# ------------------------------------------------------------------------------------------------ quality
def quality(merged: str, test_opt: str, backends: Sequence[str], precisions: Sequence[str],
            limit: Optional[int] = None) -> Dict:
    """The held-out lines of ``test_opt`` (its one TextDegradationDataset) restored with the merged model in each
    backend and precision: mean PSNR (Y, 8-bit, as the demo report) against HR and against the same backend's fp32,
    and the share of lines whose text-prior ids equal fp32's (torch's fp32 for every row)."""
    opt = read_option_file(test_opt)
    dataset = TextDegradationDataset(held_out_dataset_opt(opt, test_opt))
    items = [dataset[i] for i in range(len(dataset) if limit is None else min(limit, len(dataset)))]
    lq = torch.stack([it['lq'] for it in items]).float()
    hr = [tensor_to_uint8(it['gt']) for it in items]
    rows, ref_tokens, passed_over = {}, None, {}
    for backend in backends:
        fp32_images = None
        for precision in ['fp32'] + [p for p in precisions if p != 'fp32']:
            try:
                net, runtime = load_route(f'{backend} {precision}', merged, 'cpu')
            except NoPathLeft as err:
                passed_over[f'{backend} {precision}'] = str(err)
                continue
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter('ignore')
                out = net(lq, noise_seeds=list(range(len(items))), return_intermediates=True)
            images = list(tensor_to_uint8(out['image']))
            if ref_tokens is None:
                ref_tokens = out['tokens']
            fp32_images = fp32_images or images  # fp32 first; without it (disqualified) the first that ran
            rows[f'{backend} {precision}'] = {
                'psnr_vs_hr_db': statistics.mean(psnr_y8(a, b) for a, b in zip(images, hr)),
                'psnr_vs_fp32_db': statistics.mean(psnr_y8(a, b) for a, b in zip(images, fp32_images)),
                'same_text_prior': float((out['tokens'] == ref_tokens).all(1).float().mean()),
            }
            runtime.close()
            del net
    return {'lines': len(items), 'model': merged, 'test_opt': test_opt, 'rows': rows, 'passed_over': passed_over}


# ------------------------------------------------------------------------------------------------- report
def median_row(runs: List[Dict], batch: int) -> Dict:
    total = statistics.median(r['total'] for r in runs)
    return {
        'batch': batch, 'runs': len(runs), 'total_s': total, 'per_image_s': total / batch,
        'images_per_s': batch / total, 'all_totals_s': [r['total'] for r in runs],
        'stages_s': {s: statistics.median(r['stages'].get(s, 0.0) for r in runs)
                     for s in STAGES}
    }


def check_targets(result: Dict) -> Dict[str, Dict]:
    """{target: {'value', 'target', 'met'}} for the targets this result has the numbers of."""
    t, checks = result['timings'], {}

    def add(name, value, higher_is_better=True):
        goal = TARGETS[name]
        checks[name] = {
            'value': value, 'target': goal, 'met': bool(value >= goal if higher_is_better else value <= goal)
        }

    ref = t.get('reference batch 1', {}).get('per_image_s')
    if ref and 'default batch 1' in t:
        add('default_vs_reference', ref / t['default batch 1']['per_image_s'])
    if ref and 'openvino fp32 batch 1' in t:
        add('openvino_fp32_vs_reference', ref / t['openvino fp32 batch 1']['per_image_s'])
    if 'default batch 1' in t and result.get('ceiling_gflops'):
        ideal = 2 * result['route_gmac'] / result['ceiling_gflops']['bf16']
        add('default_vs_bf16_ceiling', t['default batch 1']['per_image_s'] / ideal, higher_is_better=False)
    if 'photo' in result:
        add('photo_batch_speedup', result['photo']['speedup'])
    memory = result.get('memory', {}).get('default')
    if memory:
        add('peak_rss_over_weights',
            (memory['peak_rss_bytes'] - memory['import_rss_bytes']) / result['weight_bytes']['default'],
            higher_is_better=False)
    rows = result.get('quality', {}).get('rows', {})
    for backend in ('torch', 'openvino'):
        if f'{backend} bf16' in rows:
            drop = rows[f'{backend} fp32']['psnr_vs_hr_db'] - rows[f'{backend} bf16']['psnr_vs_hr_db']
            add('bf16_psnr_drop_db', drop, higher_is_better=False)
            checks[f'bf16_psnr_drop_db ({backend})'] = checks.pop('bf16_psnr_drop_db')
            checks[f'bf16_psnr_drop_db ({backend})']['same_text_prior'] = rows[f'{backend} bf16']['same_text_prior']
    return checks


def markdown(result: Dict) -> str:
    ceiling = result.get('ceiling_gflops', {})
    lines = [
        f'| route | precision | batch | {" | ".join(STAGES)} | s / image | GMAC/s | share of ceiling |',
        '|---|---|---:|' + '---:|' * (len(STAGES) + 3)
    ]
    for row in result['timings'].values():
        stages = ' | '.join(f"{row['stages_s'][s]:.2f}" for s in STAGES)
        rate = result['route_gmac'] / row['per_image_s'] if result.get('route_gmac') else float('nan')
        share = 2 * rate / ceiling[row['dtype']] if row.get('dtype') in ceiling else float('nan')
        lines.append(f"| {row['route']} | {row['dtype']} | {row['batch']} | {stages} | {row['per_image_s']:.2f} | "
                     f"{rate:.1f} | {share:.0%} |")
    lines.append('')
    if result.get('route_gmac'):
        lines.append(f"route: {result['route_gmac']:.1f} GMAC per 128x512 line (tensor stages); matmul ceiling " +
                     ', '.join(f'{k} {v:.0f} GFLOP/s' for k, v in ceiling.items()))
    if 'photo' in result:
        p = result['photo']
        lines.append(f"photo path ({p['lines']} lines, default route): one batch {p['batched_s']:.2f} s, "
                     f"{p['lines']} single calls {p['single_s']:.2f} s: {p['speedup']:.2f}x")
    for route, mem in result.get('memory', {}).items():
        weights = result['weight_bytes'][route]
        above = mem['peak_rss_bytes'] - mem['import_rss_bytes']
        lines.append(f"peak RSS {route}: {mem['peak_rss_bytes'] / 2**30:.2f} GiB, {above / 2**30:.2f} GiB above the "
                     f"{mem['import_rss_bytes'] / 2**30:.2f} GiB import baseline = {above / weights:.2f}x the "
                     f"{weights / 2**30:.2f} GiB of weights it runs")
    q = result.get('quality')
    if q:
        lines += [
            '', f"Quality on trained weights ({q['lines']} held-out lines of {q['test_opt']}, model {q['model']}):", '',
            '| backend precision | PSNR vs HR (dB) | PSNR vs fp32 (dB) | same text prior |', '|---|---:|---:|---:|'
        ]
        for name, row in q['rows'].items():
            lines.append(f"| {name} | {row['psnr_vs_hr_db']:.3f} | {row['psnr_vs_fp32_db']:.1f} | "
                         f"{row['same_text_prior']:.0%} |")
    checks = result.get('targets', {})
    if checks:
        lines.append('')
        for name, c in checks.items():
            lines.append(f"target {name}: {c['value']:.3f} (target {c['target']}): {'met' if c['met'] else 'NOT met'}")
    return '\n'.join(lines)


def machine() -> Dict:
    info = {
        'platform': platform.platform(), 'python': platform.python_version(), 'torch': torch.__version__,
        'cpu_capability': torch.backends.cpu.get_cpu_capability(), 'threads': torch.get_num_threads(),
        'cpu_count': os.cpu_count(), 'native_bf16': cpu_has_native_bf16()
    }
    if package_version('openvino'):
        info['openvino'] = package_version('openvino')
    with contextlib.suppress(OSError):
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            names = [line.split(':', 1)[1].strip() for line in f if line.startswith('model name')]
        info['cpu'] = names[0] if names else platform.processor()
    with contextlib.suppress(OSError):
        info['load_average'] = os.getloadavg()
    return info


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------- run
def run_benchmark(opt_path: str, checkpoint=None, random_weights: bool = False, precisions=('fp32', 'bf16'),
                  repeats: int = 3, photo_lines: int = 8, memory: bool = True, quality_model: Optional[str] = None,
                  quality_opt: Optional[str] = None, quality_limit: Optional[int] = None, workdir: Optional[str] = None,
                  command: str = '') -> Dict:
    """The whole benchmark (module docstring) on the CPU -> the result dict (JSON-ready, with 'targets')."""

    lines = rendered_lines(max(1, photo_lines))
    temporary = tempfile.TemporaryDirectory(prefix='tola_bench_') if not workdir else None
    folder = temporary.name if temporary else workdir
    os.makedirs(folder, exist_ok=True)
    merged = os.path.join(folder, 'TOLA_merged_benchmark.safetensors')
    backends = ['torch'] + ([] if openvino_missing() else ['openvino'])
    result = {
        'machine': machine(), 'command': command, 'random_weights': random_weights, 'repeats': repeats,
        'stages': list(STAGES), 'ceiling_gflops': matmul_ceiling()
    }
    _say(f"matmul ceiling: {result['ceiling_gflops']}")
    try:
        start = time.perf_counter()
        export_merged(opt_path, checkpoint, random_weights, merged)
        result['export_s'] = time.perf_counter() - start
        nets, runtimes, result['load_s'], result['passed_over'] = {}, {}, {}, {}
        start = time.perf_counter()
        nets['reference'] = build_reference(opt_path, checkpoint, random_weights)
        result['load_s']['reference'] = time.perf_counter() - start
        start = time.perf_counter()
        nets['default'], runtimes['default'] = load_route('default', merged, 'cpu')
        result['load_s']['default'] = time.perf_counter() - start  # qualification and conversion on a cache miss
        default = runtimes['default'].plan
        result['default_plan'] = default.to_dict()
        result['default_dtype'] = default.precision
        result['default_backend'] = default.backend
        routes = [f'{b} {p}' for b in backends for p in precisions]
        for route in routes:
            if route == default.path.name:  # the same network: memory for one copy
                continue
            start = time.perf_counter()
            try:
                nets[route], runtimes[route] = load_route(route, merged, 'cpu')
            except NoPathLeft as err:  # not qualified here: reported, not timed
                result['passed_over'][route] = str(err)
                _say(f'{route}: not timed: {err}')
                continue
            result['load_s'][route] = time.perf_counter() - start
        macs = route_macs(nets['reference'], lines[:1])
        result['macs'] = macs
        result['route_gmac'] = sum(macs.values()) / 1e9
        weights = runtime_weight_bytes(nets['reference'])  # the same tensors on every route
        result['weight_bytes'] = {route: weights for route in ['reference', 'torch', 'default'] + routes}
        timers = {route: StageTimer(net) for route, net in nets.items()}
        variants = list(nets)
        runs, outputs = defaultdict(list), {}
        lq = lines[:1]
        for repeat in range(repeats + 1):  # interleaved: each variant's runs spread over the whole benchmark
            for name in variants:
                out, total, stages = restore(nets[name], timers[name], lq)
                _say(f'{name} {"warm-up" if repeat == 0 else f"run {repeat}"}: {total:.2f} s')
                if repeat:
                    runs[name].append({'total': total, 'stages': stages})
                outputs[name] = out
        result['timings'] = {}
        for name in variants:
            dtype = 'fp32' if name == 'reference' else nets[name].plan.precision
            result['timings'][f'{name} batch 1'] = dict(route=name, dtype=dtype, **median_row(runs[name], 1))
        if default.path.name in routes:  # its row under its own name too
            result['timings'][f'{default.path.name} batch 1'] = dict(result['timings']['default batch 1'],
                                                                     route=default.path.name)
        ref = outputs['reference']
        if default.path.name in routes:
            outputs[default.path.name] = outputs['default']
        result['parity'] = {
            name: {
                'same_tokens': bool(torch.equal(ref['tokens'], out['tokens'])), 'image_rel_diff': float(
                    (ref['image'] - out['image']).abs().max() / ref['image'].abs().max()),
                'image_psnr_db': float_psnr(ref['image'], out['image'])
            }
            for name, out in outputs.items() if name != 'reference'
        }
        # the photo path: photo_lines windows of the default network in one call vs as many single calls
        if photo_lines > 1:
            net, timer = nets['default'], timers['default']
            batched, single = [], []
            for repeat in range(max(1, repeats - 1) + 1):
                b = restore(net, timer, lines[:photo_lines])[1]
                s = sum(restore(net, timer, lines[i:i + 1])[1] for i in range(photo_lines))
                _say(f'photo path: batch of {photo_lines} {b:.2f} s, single calls {s:.2f} s')
                if repeat:
                    batched.append(b)
                    single.append(s)
            result['photo'] = {
                'lines': photo_lines, 'batched_s': statistics.median(batched), 'single_s': statistics.median(single),
                'speedup': statistics.median(single) / statistics.median(batched)
            }
            result['timings'][f'default batch {photo_lines}'] = dict(
                route='default', dtype=default.precision,
                **median_row([{'total': t, 'stages': {}} for t in batched], photo_lines))
        for runtime in runtimes.values():
            runtime.close()
        del nets, timers, runtimes
        if memory:
            result['memory'] = {
                route: peak_rss(route, opt_path, checkpoint, random_weights, merged, lines[:1])
                for route in ['reference', 'torch', 'default']
            }
    finally:
        if temporary:
            temporary.cleanup()
    if quality_model:
        result['quality'] = quality(quality_model, quality_opt, backends, precisions, quality_limit)
    result['targets'] = check_targets(result)
    return result


def write(result: Dict, table: Optional[str], out: Optional[str]) -> None:
    """Write ``result`` as JSON to ``out`` (and ``table`` as markdown next to it)."""
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, 'w', encoding='utf-8') as f:
            json.dump(result, f, indent=2)
        if table:
            with open(os.path.splitext(out)[0] + '.md', 'w', encoding='utf-8') as f:
                f.write(table + '\n')
