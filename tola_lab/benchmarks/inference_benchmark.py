"""The inference benchmark (tools/benchmark_inference.py): every route and precision side by side, against the machine's
own ceiling, and the precisions' quality on trained weights.

Speed (full-size weights, random or the option file's; rendered 128x512 lines, bicubic x4 degraded), one process,
interleaved, median of ``repeats`` runs after a warm-up, batch 1:

  reference        DiffTSR's way: greedy TransOCR re-running the whole prefix for 24 steps, LoRA unmerged, fp32.
  torch <p>        ``TOLANet.load_for_inference`` of the merged file on torch, precision p on every stage (qualified
                   first: its ẑ0 and image within the qualification's bounds).
  openvino <p>     the same with the text prior (TransOCR), the IDM and the VAE on OpenVINO, in its worker
                   process (``tola_plugin/runtime``).
  auto             backend auto, precision auto (``runtime.serving.Runtime``; ``tola-infer --precision auto``, not
                   the entry points' default, the model's fp32): a precision per stage; its plan is in the result.
                   A route that does not qualify on this machine is reported under 'passed_over', with why, not timed.

Per row: each stage's precision as it computes (OpenVINO's compiled one), the route's ẑ0 error against the reference
route (mean |Δẑ0| / mean |z_LR|, as the qualification measures it), seconds per image, the stages (text prior, VAE
encode, MoM text, IDM, LRC, VAE decode), GMAC/s of the route's counted multiply-adds (``complexity.count_macs`` of the
tensor stages), their share of the machine's matmul ceiling in each stage's precision (a 2048x2048 torch matmul,
measured here: ``matmul_ceiling``), the route's ideal time at that ceiling and its time over it; per stage what bounds
it: compute, memory bandwidth (its bytes at the measured ``copy_bandwidth``) or the runtime's kernels
(``stage_bounds``). The batched photo path: ``photo_lines`` windows in one call of the auto network vs as many single
calls. Peak RSS of one restore of each route in a fresh process (with its OpenVINO worker's), above the import baseline,
against the bytes of the weights it runs. Quality on trained weights (``quality``): the held-out lines of a test option
file restored with a merged model in each precision and backend: PSNR (Y) against HR and against fp32, and whether the
text prior's ids equal fp32's. A folder run (``folder_throughput``, ``folder_lines`` lines): images per second at the
pipeline's own batch and at one window per call. ``TARGETS`` are the issue's; ``check_targets`` says which are met.

This module runs the benchmark (``run_benchmark``); each job is a module of its own: the inputs
(``inference_inputs``), the networks (``inference_routes``), the ceiling and machine (``machine_ceiling``), the stage
timers (``stage_timing``), what bounds each stage (``stage_bounds``), peak memory (``peak_memory``), quality
(``precision_quality``), folders (``folder_throughput``), the training iteration (``training_timing``), targets and
tables (``inference_report``);
MACs are ``complexity.route_macs``.
"""
import json
import os
import statistics
import tempfile
import time
from collections import defaultdict
from typing import Dict, Optional, Tuple

import torch

from tola_lab.benchmarks.complexity import route_macs
from tola_lab.benchmarks.folder_throughput import folder_markdown, folder_throughput
from tola_lab.benchmarks.inference_inputs import rendered_lines
from tola_lab.benchmarks.inference_report import bounds, check_targets, markdown, write
from tola_lab.benchmarks.inference_routes import build_reference, export_merged, load_route, runtime_weight_bytes
from tola_lab.benchmarks.machine_ceiling import copy_bandwidth, machine, matmul_ceiling
from tola_lab.benchmarks.peak_memory import peak_rss
from tola_lab.benchmarks.precision_quality import quality
from tola_lab.benchmarks.precision_route import precision_benchmark, precision_markdown
from tola_lab.benchmarks.stage_bounds import stage_traffic
from tola_lab.benchmarks.stage_timing import (LABELS, StageTimer, median_row, restore, stage_precisions,
                                              uniform_precisions)
from tola_lab.benchmarks.training_timing import training_iterations
from tola_plugin.archs.precision import cpu_has_fp16_instructions, cpu_has_native_bf16
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.metrics.image_metrics import float_psnr
from tola_plugin.runtime import qualification
from tola_plugin.runtime.openvino_backend.stages import openvino_missing
from tola_plugin.runtime.serving import NoPathLeft
from tola_plugin.utils.user_text import say

MEMORY_ROUTES = ('reference', 'torch fp32', 'auto')  # peak RSS of one restore, each in a fresh process


def fast_precisions() -> Tuple[str, ...]:
    """The precisions this CPU has instructions for: fp32, bf16 (AVX512-BF16 or AMX), fp16 (AVX512-FP16 or
    AMX-FP16). The others are emulated: the benchmark does not spend minutes qualifying them unless asked."""
    return ('fp32', ) + (('bf16', ) if cpu_has_native_bf16() else ()) + (('fp16', ) if cpu_has_fp16_instructions() else
                                                                         ())


def run_benchmark(opt_path: str, checkpoint=None, random_weights: bool = False, precisions=('fp32', 'bf16'),
                  repeats: int = 3, photo_lines: int = 8, memory: bool = True, quality_model: Optional[str] = None,
                  quality_opt: Optional[str] = None, quality_limit: Optional[int] = None, workdir: Optional[str] = None,
                  command: str = '', folder_lines: int = 32) -> Dict:
    """The whole benchmark (module docstring) on the CPU -> the result dict (JSON-ready, with 'targets')."""

    lines = rendered_lines(max(1, photo_lines))
    temporary = tempfile.TemporaryDirectory(prefix='tola_bench_') if not workdir else None
    folder = temporary.name if temporary else workdir
    os.makedirs(folder, exist_ok=True)
    merged = os.path.join(folder, 'TOLA_merged_benchmark.safetensors')
    backends = ['torch'] + ([] if openvino_missing() else ['openvino'])
    result = {
        'machine': machine(), 'command': command, 'random_weights': random_weights, 'repeats': repeats,
        'stages': list(LABELS), 'ceiling_gflops': matmul_ceiling(), 'copy_gbps': copy_bandwidth()
    }
    say(f"matmul ceiling: {result['ceiling_gflops']}, copy bandwidth {result['copy_gbps']:.1f} GB/s")
    try:
        start = time.perf_counter()
        export_merged(opt_path, checkpoint, random_weights, merged)
        result['export_s'] = time.perf_counter() - start
        nets, runtimes, result['load_s'], result['passed_over'] = {}, {}, {}, {}
        start = time.perf_counter()
        nets['reference'] = build_reference(opt_path, checkpoint, random_weights)
        result['load_s']['reference'] = time.perf_counter() - start
        start = time.perf_counter()
        nets['auto'], runtimes['auto'] = load_route('auto', merged, 'cpu')
        result['load_s']['auto'] = time.perf_counter() - start  # qualification and conversion on a cache miss
        auto = runtimes['auto'].plan
        result['auto_plan'] = auto.to_dict()
        result['auto_dtype'] = auto.precision
        result['auto_backend'] = auto.backend
        routes = [f'{b} {p}' for b in backends for p in precisions]
        for route in routes:
            if route == auto.path.name:  # the same network: memory for one copy
                continue
            start = time.perf_counter()
            try:
                nets[route], runtimes[route] = load_route(route, merged, 'cpu')
            except NoPathLeft as err:  # not qualified here: reported, not timed
                result['passed_over'][route] = str(err)
                say(f'{route}: not timed: {err}')
                continue
            result['load_s'][route] = time.perf_counter() - start
        macs = route_macs(nets['reference'], lines[:1])
        result['macs'] = macs
        result['route_gmac'] = sum(macs.values()) / 1e9
        result['stage_elements'] = stage_traffic(TOLANet.load_for_inference(merged, precision='fp32'), lines[:1])
        weights = runtime_weight_bytes(nets['reference'])  # the same tensors on every route
        result['weight_bytes'] = {route: weights for route in list(MEMORY_ROUTES) + routes}
        timers = {route: StageTimer(net) for route, net in nets.items()}
        variants = list(nets)
        runs, outputs = defaultdict(list), {}
        lq = lines[:1]
        for repeat in range(repeats + 1):  # interleaved: each variant's runs spread over the whole benchmark
            for name in variants:
                out, total, stages = restore(nets[name], timers[name], lq)
                say(f'{name} {"warm-up" if repeat == 0 else f"run {repeat}"}: {total:.2f} s')
                if repeat:
                    runs[name].append({'total': total, 'stages': stages})
                outputs[name] = out
        result['timings'] = {}
        for name in variants:
            dtype = 'fp32' if name == 'reference' else runtimes[name].plan.precision
            computed = uniform_precisions('fp32') if name == 'reference' else stage_precisions(runtimes[name].plan)
            result['timings'][f'{name} batch 1'] = dict(route=name, dtype=dtype, stage_precisions=computed,
                                                        **median_row(runs[name], 1))
        if auto.path.name in routes:  # its row under its own name too
            result['timings'][f'{auto.path.name} batch 1'] = dict(result['timings']['auto batch 1'],
                                                                  route=auto.path.name)
        result['bounds'] = bounds(result)
        ref = outputs['reference']
        if auto.path.name in routes:
            outputs[auto.path.name] = outputs['auto']
        result['parity'] = {
            name: {
                'same_tokens': bool(torch.equal(ref['tokens'], out['tokens'])),
                'image_rel_diff': float((ref['image'] - out['image']).abs().max() / ref['image'].abs().max()),
                'image_psnr_db': float_psnr(ref['image'], out['image']),
                'z0_of_z_lr': qualification.route_errors(out, ref)['z0']  # the route's ẑ0 error, as qualified
            }
            for name, out in outputs.items() if name != 'reference'
        }
        # the photo path: photo_lines windows of the auto network in one call vs as many single calls
        if photo_lines > 1:
            net, timer = nets['auto'], timers['auto']
            batched, single = [], []
            for repeat in range(max(1, repeats - 1) + 1):
                b = restore(net, timer, lines[:photo_lines])[1]
                s = sum(restore(net, timer, lines[i:i + 1])[1] for i in range(photo_lines))
                say(f'photo path: batch of {photo_lines} {b:.2f} s, single calls {s:.2f} s')
                if repeat:
                    batched.append(b)
                    single.append(s)
            result['photo'] = {
                'lines': photo_lines, 'batched_s': statistics.median(batched), 'single_s': statistics.median(single),
                'speedup': statistics.median(single) / statistics.median(batched)
            }
            result['timings'][f'auto batch {photo_lines}'] = dict(
                route='auto', dtype=auto.precision, stage_precisions=stage_precisions(auto),
                **median_row([{'total': t, 'stages': {}} for t in batched], photo_lines))
        for runtime in runtimes.values():
            runtime.close()
        del nets, timers, runtimes
        if folder_lines and 'openvino' in backends:
            result['folder'] = folder_throughput(merged, folder_lines, max(1, repeats - 1), workdir=folder)
        if memory:
            result['memory'] = {
                route: peak_rss(route, opt_path, checkpoint, random_weights, merged, lines[:1])
                for route in MEMORY_ROUTES
            }
    finally:
        if temporary:
            temporary.cleanup()
    if quality_model:
        result['quality'] = quality(quality_model, quality_opt, backends, precisions, quality_limit)
    result['targets'] = check_targets(result)
    return result


def benchmark_and_write(opt_path: str, checkpoint=None, random_weights: bool = False, precisions=('fp32', 'bf16'),
                        repeats: int = 3, photo_lines: int = 8, memory: bool = True,
                        quality_model: Optional[str] = None, quality_opt: Optional[str] = None,
                        quality_limit: Optional[int] = None, workdir: Optional[str] = None, command: str = '',
                        train_iteration: Optional[str] = None, out: Optional[str] = None, folder_lines: int = 32,
                        folder_model: Optional[str] = None, precision_table: bool = False, lines: int = 8) -> Dict:
    """tools/benchmark_inference.py: the benchmark (or, with ``train_iteration``, the training iteration of that
    option file; with ``folder_model``, the folder run of that merged model alone; with ``precision_table``,
    ``precision_route.precision_benchmark`` on ``lines`` lines), its table printed, the JSON and the table written to
    ``out``; returns the result."""
    if precision_table:
        backends = ('torch', ) + (() if openvino_missing() else ('openvino', ))
        result = dict(
            command=command,
            **precision_benchmark(opt_path, checkpoint, random_weights, precisions, lines, repeats, backends, say))
        table = precision_markdown(result)
        print(table)
        write(result, table, out)
        return result
    if folder_model:
        result = {
            'machine': machine(), 'command': command, 'folder': folder_throughput(folder_model, folder_lines, repeats,
                                                                                  workdir=workdir)
        }
        table = '\n'.join(folder_markdown(result['folder']))
        print(table)
        write(result, table, out)
        return result
    if train_iteration:
        result = {
            'machine': machine(), 'command': command, 'random_weights': random_weights,
            'training': training_iterations(train_iteration, checkpoint, random_weights, repeats)
        }
        print(json.dumps(result['training'], indent=2))
        write(result, None, out)
        return result
    result = run_benchmark(opt_path, checkpoint, random_weights, precisions, repeats, photo_lines, memory,
                           quality_model, quality_opt, quality_limit, workdir, command, folder_lines)
    table = markdown(result)
    print(table)
    write(result, table, out)
    return result
