#!/usr/bin/env python
"""TOLA inference: the reference route and the inference path side by side (speed, memory, precision).

All routes run the same TOLANet weights on the same rendered text lines (128x512, bicubic x4 degraded), in one
process, interleaved (reference, default, onnxruntime, reference, ...), median of ``--repeats`` runs after a warm-up:

  reference    our modules run as DiffTSR runs them: the greedy TransOCR re-runs the whole prefix for 24 steps
               (text_decoding 'full_prefix'), LoRA unmerged (peft adapters), plain fp32 eager under no_grad.
  default      the inference path: ``TOLANet.load_for_inference`` of the merged file (memory-mapped weights, MoM
               image branch never read, inference mode), incremental TransOCR decoding stopping at END.
  onnxruntime  the same with ``backend='onnxruntime'``: IDM and VAE on ONNX Runtime (exported once, next to the
               merged file; the export time is reported separately). ``--no-onnx`` leaves it out.

Per stage (text prior, VAE encode, MoM text, IDM, LRC, VAE decode), total, images/s, for batch 1 and each
``--batch``; peak RSS of one batch-1 restore per route, each in a fresh process, beside the bytes of the weights it
runs; every ``--precision`` of the default path: its time and its deviation from fp32 (max |diff|, PSNR).

    python tools/benchmark_inference.py --random-weights --out results/benchmark/inference.json
    python tools/benchmark_inference.py -opt options/test/test_TOLA.yml --checkpoint net_g.pth --out ...

With ``--random-weights`` the backbone is the full-size architecture with random weights and random LoRA/LRC
values (speed and memory do not depend on the values; the default path is read from a merged file exported to
``--workdir``). Prints a markdown table and writes JSON (``tools/plot_results.py latency --benchmark`` reads it).
"""
import argparse
import contextlib
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from typing import Dict, List

STAGES = ('text prior', 'VAE encode', 'MoM text', 'IDM', 'LRC', 'VAE decode')
ROUTES = ('reference', 'default', 'onnxruntime')
DEFAULT_OPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'options', 'test', 'test_TOLA.yml')


# ------------------------------------------------------------------------------------------------ inputs
def rendered_lines(count: int, seed: int = 0, with_targets: bool = False):
    """``count`` rendered text lines, degraded as the paper's x4 setting: HR 128x512 -> bicubic 32x128 -> the
    128x512 canvas (PIL bicubic, as the datasets). -> (count, 3, 128, 512) RGB in [0, 1]; with ``with_targets``
    also the HR lines (same shape) and the OCR targets (count, 25) of their texts."""
    import cv2
    import torch

    from tola_plugin.data.text_labels import text_targets
    from tola_plugin.data.text_line_source import to_canvas
    from tola_plugin.data.text_render import TextLineRenderer

    renderer = TextLineRenderer(seed=seed)
    lines, hr, targets = [], [], []
    for i in range(count):
        rgb, text, _ = renderer.render(i)
        bgr = cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
        lr = cv2.resize(bgr, (128, 32), interpolation=cv2.INTER_CUBIC)
        lines.append(torch.from_numpy(to_canvas(lr)).permute(2, 0, 1))
        hr.append(torch.from_numpy(to_canvas(bgr)).permute(2, 0, 1))
        targets.append(text_targets(text, f'rendered line {i}')[1])
    if with_targets:
        return torch.stack(lines), torch.stack(hr), torch.stack(targets)
    return torch.stack(lines)


# ---------------------------------------------------------------------------------------------- networks
def build_reference(opt_path: str, checkpoint, random_weights: bool):
    """The option file's TOLANet with its adaptation state (or, with ``random_weights``, the full-size random
    backbone with seeded random LoRA/LRC values), LoRA unmerged, on the reference route."""
    from tola_plugin.evaluation.benchmarking import build_benchmark_tola
    net = build_benchmark_tola(opt_path, random_weights, adaptation=True, checkpoint=checkpoint)
    net.text_decoding = 'full_prefix'
    net.set_precision('fp32')
    return net.eval()


def export_merged(opt_path: str, checkpoint, random_weights: bool, path: str, onnx: bool) -> None:
    """Write the merged file of the reference network (built afresh: merging changes the network in place), and
    with ``onnx`` its ONNX stages for 128x512 images."""
    import gc
    net = build_reference(opt_path, checkpoint, random_weights)
    net.save_merged(path, onnx_size=(128, 512) if onnx else None)
    del net
    gc.collect()


def runtime_weight_bytes(net) -> int:
    """Bytes of the parameters and buffers a TOLANet forward runs (the MoM image branch, which only feeds the TDM,
    is not counted; the inference path never loads it)."""
    from tola_plugin.archs.mom_arch import DiffTSRMoM
    skip = tuple(f'mom.{p}' for p in DiffTSRMoM.IMAGE_BRANCH)
    return sum(t.numel() * t.element_size() for k, t in net.state_dict().items() if not k.startswith(skip))


class StageTimer:
    """Wall-clock seconds of each stage of ``net``'s forward, by wrapping the six calls Algorithm 1 makes."""

    def __init__(self, net):
        import torch
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
    import torch
    timer.seconds.clear()
    timer.sync()
    start = time.perf_counter()
    with torch.no_grad():
        out = net(lq, noise_seeds=list(range(lq.shape[0])), return_intermediates=True)
    timer.sync()
    return out, time.perf_counter() - start, dict(timer.seconds)


def psnr(a, b) -> float:
    """PSNR (dB) of images in [0, 1]; inf when equal."""
    mse = float(((a.double() - b.double())**2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


# ---------------------------------------------------------------------------------------------- training
def training_iterations(opt_path: str, checkpoint, random_weights: bool, repeats: int) -> Dict:
    """Seconds of one TOLAModel training iteration (batch 1, the option file's losses; LPIPS with a random VGG
    trunk under ``random_weights``) with the text prior decoded DiffTSR's way ('full_prefix': before) and the fast
    way ('incremental': after), interleaved, median of ``repeats`` after a warm-up of each."""
    import yaml

    from tola_plugin.models.tola_model import TOLAModel

    with open(opt_path, encoding='utf-8') as f:
        opt = yaml.safe_load(f)
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
    import torch

    import tola_plugin  # noqa: F401
    from tola_plugin.archs.tola_arch import TOLANet
    baseline = rss_bytes('VmRSS')
    if route == 'reference':
        net = build_reference(opt_path, checkpoint, random_weights)
    else:
        net = TOLANet.load_for_inference(merged, backend='torch' if route == 'default' else route)
    with torch.no_grad():
        net(lq, noise_seeds=[0])
    return {'peak_rss_bytes': rss_bytes('VmHWM'), 'import_rss_bytes': baseline}


def peak_rss(route: str, *args) -> Dict:
    with multiprocessing.get_context('spawn').Pool(1) as pool:
        return pool.apply(peak_rss_child, (route, ) + args)


# ------------------------------------------------------------------------------------------------- report
def median_row(runs: List[Dict], batch: int) -> Dict:
    total = statistics.median(r['total'] for r in runs)
    return {
        'batch': batch, 'runs': len(runs), 'total_s': total, 'per_image_s': total / batch,
        'images_per_s': batch / total, 'all_totals_s': [r['total'] for r in runs],
        'stages_s': {s: statistics.median(r['stages'].get(s, 0.0) for r in runs)
                     for s in STAGES}
    }


def markdown(result: Dict) -> str:
    lines = [
        f'| route | batch | {" | ".join(STAGES)} | total (s) | s / image | images/s |',
        '|---|---:|' + '---:|' * (len(STAGES) + 3)
    ]
    for key, row in result['timings'].items():
        stages = ' | '.join(f"{row['stages_s'][s]:.3f}" for s in STAGES)
        lines.append(f"| {row['route']} | {row['batch']} | {stages} | {row['total_s']:.2f} | "
                     f"{row['per_image_s']:.2f} | {row['images_per_s']:.3f} |")
    lines.append('')
    for route, ratios in result['speedup'].items():
        for batch, ratio in ratios.items():
            lines.append(f'{route} vs reference, batch {batch}: speed-up {ratio:.2f}x (ratio of the median totals)')
    for route, mem in result.get('memory', {}).items():
        weights = result['weight_bytes'][route]
        lines.append(f"peak RSS {route}: {mem['peak_rss_bytes'] / 2**30:.2f} GiB = "
                     f"{mem['peak_rss_bytes'] / weights:.2f}x the {weights / 2**30:.2f} GiB of weights it runs "
                     f"({mem['import_rss_bytes'] / 2**30:.2f} GiB after the imports, before loading)")
    if result.get('precision'):
        lines += [
            '', '| precision | resolves to | s / image (batch 1) | max abs diff vs fp32 | PSNR vs fp32 (dB, '
            'mean / min) | same text prior |', '|---|---|---:|---:|---:|---|'
        ]
        for name, row in result['precision'].items():
            lines.append(f"| {name} | {row['dtype']} | {row['per_image_s']:.2f} | {row['max_abs_diff']:.2e} | "
                         f"{row['psnr_mean_db']:.1f} / {row['psnr_min_db']:.1f} | {row['same_tokens']} |")
    return '\n'.join(lines)


def machine() -> Dict:
    import torch

    from tola_plugin.archs.precision import cpu_has_native_bf16
    info = {
        'platform': platform.platform(), 'python': platform.python_version(), 'torch': torch.__version__,
        'cpu_capability': torch.backends.cpu.get_cpu_capability(), 'threads': torch.get_num_threads(),
        'cpu_count': os.cpu_count(), 'native_bf16': cpu_has_native_bf16()
    }
    with contextlib.suppress(OSError):
        with open('/proc/cpuinfo', encoding='utf-8') as f:
            names = [line.split(':', 1)[1].strip() for line in f if line.startswith('model name')]
        info['cpu'] = names[0] if names else platform.processor()
    if torch.cuda.is_available():
        info['cuda'] = torch.cuda.get_device_name()
    return info


# --------------------------------------------------------------------------------------------------- main
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument('-opt', default=DEFAULT_OPT, help='option file with a TOLANet network_g (default: %(default)s)')
    p.add_argument('--checkpoint', help='adaptation checkpoint (default: the option file\'s path.pretrain_network_g)')
    p.add_argument('--random-weights', action='store_true',
                   help='full-size random backbone and random LoRA/LRC values (no files needed)')
    p.add_argument('--batch', type=int, nargs='*', default=[8], help='batch sizes besides 1 (default: 8)')
    p.add_argument('--repeats', type=int, default=3, help='timed runs per route and batch (median; default 3)')
    p.add_argument('--precision', nargs='*', default=['bf16', 'fp16', 'auto'],
                   help='precisions of the default path compared with its fp32 (default: bf16 fp16 auto)')
    p.add_argument('--no-onnx', action='store_true', help='leave out the onnxruntime route')
    p.add_argument(
        '--train-iteration', metavar='TRAIN_OPT',
        help='instead: time one training iteration of this training option file (batch 1), before and '
        'after the fast text-prior decoding')
    p.add_argument('--no-memory', action='store_true', help='skip the peak-RSS processes')
    p.add_argument('--device', default='cpu', help="'cpu' (default) or 'cuda[:i]'")
    p.add_argument('--workdir', help='folder for the exported merged file (default: a temporary folder, removed)')
    p.add_argument('--out', help='write the results as JSON here (and the table as .md next to it)')
    args = p.parse_args(argv)
    if args.repeats < 1 or any(b < 1 for b in args.batch):
        p.error('--repeats and --batch must be positive')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    import tola_plugin  # noqa: F401  (registers the plugin)
    from tola_plugin.archs.precision import PRECISIONS, resolve_precision
    from tola_plugin.archs.tola_arch import TOLANet

    bad = [p for p in args.precision if p not in PRECISIONS or p == 'fp32']
    if bad:
        raise ValueError(f'--precision: {bad} not among {[p for p in PRECISIONS if p != "fp32"]}')
    device = torch.device(args.device)
    if args.train_iteration:
        result = {
            'machine': machine(), 'command': ' '.join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
            'random_weights': args.random_weights,
            'training': training_iterations(args.train_iteration, args.checkpoint, args.random_weights, args.repeats)
        }
        print(json.dumps(result['training'], indent=2))
        return write(result, None, args.out)
    batches = [1] + sorted(set(b for b in args.batch if b != 1))
    lines = rendered_lines(max(batches)).to(device)
    workdir = tempfile.TemporaryDirectory(prefix='tola_bench_') if not args.workdir else None
    folder = workdir.name if workdir else args.workdir
    os.makedirs(folder, exist_ok=True)
    merged = os.path.join(folder, 'TOLA_merged_benchmark.safetensors')
    result = {
        'machine': machine(), 'command': ' '.join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        'random_weights': args.random_weights, 'repeats': args.repeats, 'stages': list(STAGES)
    }
    routes = [r for r in ROUTES if not (r == 'onnxruntime' and (args.no_onnx or device.type != 'cpu'))]
    try:
        start = time.perf_counter()
        export_merged(args.opt, args.checkpoint, args.random_weights, merged, onnx='onnxruntime' in routes)
        result['export_s'] = time.perf_counter() - start  # merged file, and the ONNX stages when timed
        nets, result['load_s'] = {}, {}
        for route in routes:
            start = time.perf_counter()
            if route == 'reference':
                nets[route] = build_reference(args.opt, args.checkpoint, args.random_weights).to(device)
            else:
                backend = 'torch' if route == 'default' else route
                nets[route] = TOLANet.load_for_inference(merged, backend=backend).to(device)
            result['load_s'][route] = time.perf_counter() - start
        timers = {route: StageTimer(net) for route, net in nets.items()}
        # the onnxruntime route runs the default route's weights (its IDM and VAE ones inside ONNX Runtime)
        result['weight_bytes'] = {
            route: runtime_weight_bytes(nets['reference' if route == 'reference' else 'default'])
            for route in routes
        }

        # speed: interleaved reference / default, warm-up first, per batch size
        result['timings'], result['speedup'], outputs = {}, {}, {}
        for batch in batches:
            lq = lines[:batch]
            runs = {route: [] for route in routes}
            for repeat in range(args.repeats + 1):
                for route in routes:
                    out, total, stages = restore(nets[route], timers[route], lq)
                    print(f'batch {batch} {route} {"warm-up" if repeat == 0 else f"run {repeat}"}: {total:.2f} s',
                          file=sys.stderr, flush=True)
                    if repeat:
                        runs[route].append({'total': total, 'stages': stages})
                    outputs[route, batch] = out
            for route in routes:
                result['timings'][f'{route} batch {batch}'] = dict(route=route, **median_row(runs[route], batch))
                if route != 'reference':
                    result['speedup'].setdefault(route, {})[batch] = (
                        result['timings'][f'reference batch {batch}']['total_s'] /
                        result['timings'][f'{route} batch {batch}']['total_s'])
        # same function: each route against the reference route on the largest batch
        ref = outputs['reference', batches[-1]]
        result['parity'] = {}
        for route in routes[1:]:
            new = outputs[route, batches[-1]]
            result['parity'][route] = {
                'same_tokens': bool(torch.equal(ref['tokens'], new['tokens'])), 'image_max_abs_diff': float(
                    (ref['image'] - new['image']).abs().max()), 'image_rel_diff': float(
                        (ref['image'] - new['image']).abs().max() / ref['image'].abs().max()),
                'image_psnr_db': psnr(ref['image'], new['image'])
            }
        for route in [r for r in routes if r != 'default']:
            del nets[route], timers[route]

        # precisions of the default path: time on batch 1 (interleaved with fp32), deviation on all lines
        if args.precision:
            net, timer = nets['default'], timers['default']
            fp32 = outputs['default', batches[-1]]
            result['precision'] = {}
            runs = defaultdict(list)
            for precision in ['fp32'] + args.precision:
                net.set_precision(precision)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter('always')
                    dtype = resolve_precision(precision, device)
                    out, _, _ = restore(net, timer, lines[:batches[-1]])
                    restore(net, timer, lines[:1])  # batch-1 warm-up
                row = {'dtype': str(dtype).replace('torch.', ''), 'warnings': [str(w.message) for w in caught]}
                if precision != 'fp32':
                    row.update(
                        max_abs_diff=float((out['image'] - fp32['image']).abs().max()),
                        psnr_mean_db=statistics.mean(psnr(a, b) for a, b in zip(out['image'], fp32['image'])),
                        psnr_min_db=min(psnr(a, b) for a, b in zip(out['image'], fp32['image'])),
                        same_tokens=bool(torch.equal(out['tokens'], fp32['tokens'])))
                result['precision'][precision] = row
            for _ in range(args.repeats):
                for precision in ['fp32'] + args.precision:
                    net.set_precision(precision)
                    with warnings.catch_warnings():
                        warnings.simplefilter('ignore')  # recorded above
                        runs[precision].append(restore(net, timer, lines[:1])[1])
            for precision, times in runs.items():
                result['precision'][precision]['per_image_s'] = statistics.median(times)
            fp32_row = result['precision'].pop('fp32')
            result['precision_fp32_per_image_s'] = fp32_row['per_image_s']
            net.set_precision('fp32')
        del nets, timers

        # peak RSS of one batch-1 restore per route, each in a fresh process
        if not args.no_memory and device.type == 'cpu':
            result['memory'] = {
                route: peak_rss(route, args.opt, args.checkpoint, args.random_weights, merged, lines[:1].cpu())
                for route in routes
            }
    finally:
        if workdir:
            workdir.cleanup()

    table = markdown(result)
    print(table)
    return write(result, table, args.out)


def write(result: Dict, table, out) -> int:
    """Write ``result`` as JSON to ``out`` (and ``table`` as markdown next to it)."""
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, 'w', encoding='utf-8') as f:
            json.dump(result, f, indent=2)
        if table:
            with open(os.path.splitext(out)[0] + '.md', 'w', encoding='utf-8') as f:
                f.write(table + '\n')
    return 0


if __name__ == '__main__':
    from tola_plugin.utils.cli_errors import run_tool
    run_tool(main)
