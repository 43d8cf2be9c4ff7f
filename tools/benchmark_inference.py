#!/usr/bin/env python
"""TOLA inference: the reference route and the default inference path side by side (speed, memory, precision).

Both routes run the same TOLANet weights on the same rendered text lines (128x512, bicubic x4 degraded), in one
process, interleaved (reference, default, reference, default, ...), median of ``--repeats`` runs after a warm-up:

  reference   our modules run as DiffTSR runs them: the greedy TransOCR re-runs the whole prefix for 24 steps
              (text_decoding 'full_prefix'), LoRA unmerged (peft adapters), plain fp32 eager under no_grad.
  default     the inference path: ``TOLANet.load_for_inference`` of the merged file (memory-mapped weights, MoM
              image branch never read, inference mode), incremental TransOCR decoding stopping at END.

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
import resource
import statistics
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from typing import Dict, List

STAGES = ('text prior', 'VAE encode', 'MoM text', 'IDM', 'LRC', 'VAE decode')
ROUTES = ('reference', 'default')
DEFAULT_OPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'options', 'test',
                           'test_TOLA.yml')


# ------------------------------------------------------------------------------------------------ inputs
def rendered_lines(count: int, seed: int = 0):
    """``count`` rendered text lines, degraded as the paper's x4 setting: HR 128x512 -> bicubic 32x128 -> the
    128x512 canvas (PIL bicubic, as the datasets). -> (count, 3, 128, 512) RGB in [0, 1]."""
    import cv2
    import torch
    from tola_plugin.data.text_line_source import to_canvas
    from tola_plugin.utils.text_render import TextLineRenderer

    renderer = TextLineRenderer(seed=seed)
    lines = []
    for i in range(count):
        rgb, _, _ = renderer.render(i)
        lr = cv2.resize(cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), (128, 32), interpolation=cv2.INTER_CUBIC)
        lines.append(torch.from_numpy(to_canvas(lr)).permute(2, 0, 1))
    return torch.stack(lines)


# ---------------------------------------------------------------------------------------------- networks
def build_reference(opt_path: str, checkpoint, random_weights: bool, seed: int = 0):
    """The option file's TOLANet with its adaptation state (or, with ``random_weights``, the full-size random
    backbone with seeded random LoRA/LRC values), LoRA unmerged, on the reference route."""
    import torch
    import yaml
    from basicsr.archs import build_network
    from tola_plugin.utils.tola_loading import build_tola_from_options

    if not random_weights:
        net = build_tola_from_options(opt_path, checkpoint)
    else:
        with open(opt_path, encoding='utf-8') as f:
            net_opt = dict(yaml.safe_load(f)['network_g'])
        net_opt.update(backbone_init='random', random_seed=seed)
        net = build_network(net_opt)
        gen = torch.Generator().manual_seed(seed + 1)
        with torch.no_grad():  # LoRA B is 0 and the LRC output 0 at init: give them values so merging matters
            for name, param in net.named_parameters():
                if param.requires_grad:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.01)
    net.text_decoding = 'full_prefix'
    net.set_precision('fp32')
    return net.eval()


def export_merged(opt_path: str, checkpoint, random_weights: bool, path: str) -> None:
    """Write the merged file of the reference network (built afresh: merging changes the network in place)."""
    import gc
    net = build_reference(opt_path, checkpoint, random_weights)
    net.save_merged(path)
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
                                   ('VAE decode', net.vae, 'decode')) + ((('LRC', net.lrc, 'forward'),)
                                                                        if net.lrc is not None else ()):
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
    mse = float(((a.double() - b.double()) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


# ------------------------------------------------------------------------------------------ peak memory
def peak_rss_child(route: str, opt_path: str, checkpoint, random_weights: bool, merged: str) -> Dict:
    """In a fresh process: build ``route``'s network, restore one line, report peak RSS and the weight bytes."""
    import torch
    import tola_plugin  # noqa: F401
    from tola_plugin.archs.tola_arch import TOLANet
    if route == 'default':
        net = TOLANet.load_for_inference(merged)
    else:
        net = build_reference(opt_path, checkpoint, random_weights)
    lq = rendered_lines(1)
    with torch.no_grad():
        net(lq, noise_seeds=[0])
    return {'peak_rss_bytes': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            'weight_bytes': runtime_weight_bytes(net)}


def peak_rss(route: str, *args) -> Dict:
    with multiprocessing.get_context('spawn').Pool(1) as pool:
        return pool.apply(peak_rss_child, (route,) + args)


# ------------------------------------------------------------------------------------------------- report
def median_row(runs: List[Dict], batch: int) -> Dict:
    total = statistics.median(r['total'] for r in runs)
    return {'batch': batch, 'runs': len(runs), 'total_s': total, 'per_image_s': total / batch,
            'images_per_s': batch / total, 'all_totals_s': [r['total'] for r in runs],
            'stages_s': {s: statistics.median(r['stages'].get(s, 0.0) for r in runs) for s in STAGES}}


def markdown(result: Dict) -> str:
    lines = [f'| route | batch | {" | ".join(STAGES)} | total (s) | s / image | images/s |',
             '|---|---:|' + '---:|' * (len(STAGES) + 3)]
    for key, row in result['timings'].items():
        stages = ' | '.join(f"{row['stages_s'][s]:.3f}" for s in STAGES)
        lines.append(f"| {row['route']} | {row['batch']} | {stages} | {row['total_s']:.2f} | "
                     f"{row['per_image_s']:.2f} | {row['images_per_s']:.3f} |")
    lines.append('')
    for batch, ratio in result['speedup'].items():
        lines.append(f'default vs reference, batch {batch}: {ratio:.2f}x faster (median total)')
    for route, mem in result.get('memory', {}).items():
        lines.append(f"peak RSS {route}: {mem['peak_rss_bytes'] / 2**30:.2f} GiB = "
                     f"{mem['peak_rss_bytes'] / mem['weight_bytes']:.2f}x the {mem['weight_bytes'] / 2**30:.2f} GiB "
                     'of weights it runs')
    if result.get('precision'):
        lines += ['', '| precision | resolves to | s / image (batch 1) | max abs diff vs fp32 | PSNR vs fp32 (dB, '
                  'mean / min) | same text prior |', '|---|---|---:|---:|---:|---|']
        for name, row in result['precision'].items():
            lines.append(f"| {name} | {row['dtype']} | {row['per_image_s']:.2f} | {row['max_abs_diff']:.2e} | "
                         f"{row['psnr_mean_db']:.1f} / {row['psnr_min_db']:.1f} | {row['same_tokens']} |")
    return '\n'.join(lines)


def machine() -> Dict:
    import torch
    from tola_plugin.archs.precision import cpu_has_native_bf16
    info = {'platform': platform.platform(), 'python': platform.python_version(), 'torch': torch.__version__,
            'cpu_capability': torch.backends.cpu.get_cpu_capability(), 'threads': torch.get_num_threads(),
            'cpu_count': os.cpu_count(), 'native_bf16': cpu_has_native_bf16()}
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
    batches = [1] + sorted(set(b for b in args.batch if b != 1))
    lines = rendered_lines(max(batches)).to(device)
    workdir = tempfile.TemporaryDirectory(prefix='tola_bench_') if not args.workdir else None
    folder = workdir.name if workdir else args.workdir
    os.makedirs(folder, exist_ok=True)
    merged = os.path.join(folder, 'TOLA_merged_benchmark.safetensors')
    result = {'machine': machine(), 'command': ' '.join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
              'random_weights': args.random_weights, 'repeats': args.repeats, 'stages': list(STAGES)}
    try:
        start = time.perf_counter()
        export_merged(args.opt, args.checkpoint, args.random_weights, merged)
        result['export_s'] = time.perf_counter() - start
        start = time.perf_counter()
        nets = {'default': TOLANet.load_for_inference(merged).to(device)}
        result['load_default_s'] = time.perf_counter() - start
        start = time.perf_counter()
        nets['reference'] = build_reference(args.opt, args.checkpoint, args.random_weights).to(device)
        result['load_reference_s'] = time.perf_counter() - start
        timers = {route: StageTimer(net) for route, net in nets.items()}
        result['weight_bytes'] = {route: runtime_weight_bytes(net) for route, net in nets.items()}

        # speed: interleaved reference / default, warm-up first, per batch size
        result['timings'], result['speedup'], outputs = {}, {}, {}
        for batch in batches:
            lq = lines[:batch]
            runs = {route: [] for route in ROUTES}
            for repeat in range(args.repeats + 1):
                for route in ROUTES:
                    out, total, stages = restore(nets[route], timers[route], lq)
                    print(f'batch {batch} {route} {"warm-up" if repeat == 0 else f"run {repeat}"}: {total:.2f} s',
                          file=sys.stderr, flush=True)
                    if repeat:
                        runs[route].append({'total': total, 'stages': stages})
                    outputs[route, batch] = out
            for route in ROUTES:
                result['timings'][f'{route} batch {batch}'] = dict(route=route, **median_row(runs[route], batch))
            result['speedup'][batch] = (result['timings'][f'reference batch {batch}']['total_s']
                                        / result['timings'][f'default batch {batch}']['total_s'])
        # same function: the default path against the reference route on the largest batch
        ref, new = outputs['reference', batches[-1]], outputs['default', batches[-1]]
        result['parity'] = {'same_tokens': bool(torch.equal(ref['tokens'], new['tokens'])),
                            'image_max_abs_diff': float((ref['image'] - new['image']).abs().max()),
                            'image_psnr_db': psnr(ref['image'], new['image'])}
        del nets['reference'], timers['reference']

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
                    row.update(max_abs_diff=float((out['image'] - fp32['image']).abs().max()),
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
            result['memory'] = {route: peak_rss(route, args.opt, args.checkpoint, args.random_weights, merged)
                                for route in ROUTES}
    finally:
        if workdir:
            workdir.cleanup()

    table = markdown(result)
    print(table)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, 'w', encoding='utf-8') as f:
            json.dump(result, f, indent=2)
        with open(os.path.splitext(args.out)[0] + '.md', 'w', encoding='utf-8') as f:
            f.write(table + '\n')
    return 0


if __name__ == '__main__':
    from tola_plugin.utils.cli_errors import run_tool
    run_tool(main)
