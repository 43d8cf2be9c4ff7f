"""The GPU check's inference step: what a user gets in each precision, and how fast.

- **Quality and the plan**, as a user runs it: ``tola-infer --precision fp32|auto|bf16|fp16`` (one process each) on the
  package's six sample lines with a trained model whose image follows the one-step latent ẑ0, the demo backbone's
  frozen route (no LoRA, no LRC; random weights make ẑ0 amplified noise, where no precision but fp32 qualifies): the
  plan it printed (each stage's precision as computed), seconds per line with the process's start and the model's
  loading, and each output's PSNR against fp32's, held to the qualification's image bound. A precision tola-infer
  refuses (its route outside the qualification's bounds, docs/inference.md "Precision") is a row with the reason,
  not a failure.
- **The time to a first result**: ``tola-infer`` on one line with no verdict cached: the full-size model in fp32
  (the process's start and the 4 GB model's loading) and the demo model in auto (with its qualification).
- **Speed at full size, warm** (``speed_rows``; ``tools/gpu_check.sh REPORT --steps inference`` is the GPU
  benchmark a user runs): the full-size network (random backbone weights, ``configs.fullsize_backbone``, seeded
  random adaptation weights, exported merged) on the same lines, one row per way of running it, each named for what
  it runs: auto's plan as qualified on the demo model, IEEE fp32, fp32 with TF32 (every stage; the image stages
  only), each other served plan, and auto's plan with each of ``VARIANTS`` (cuDNN's benchmark mode, channels-last,
  TF32 on its fp32 image stages, the text prior's END read a step late: no host wait per greedy step, the image
  stages through torch.compile), none of them a default until a GPU shows it wins; the first call's seconds (a
  compilation's warm-up) and, for a faster variant, after how many lines it pays that back. Per row: seconds per line
  end to end at batch 1 and per stage (text prior, VAE encode, MoM text, IDM, LRC, VAE decode), peak GiB, lines per
  second at the best batch that fits (``batch_sweep``), every value finite before the clamp. Then each stage's warm
  seconds in IEEE fp32, fp32 with TF32, bf16 and fp16. ``target``: auto's line within ``TARGET_S``.

Dry run: the tiny network on the CPU, one line, batches up to 2; tola-infer in fp32 and auto only (bf16's refusal on
the demo backbone is tests/test_runtime_precision.py's; fp16 is emulated on CPUs without fp16 instructions, many
times slower); TF32 and cuDNN's switches run but change nothing there; torch.compile traces with dynamo's eager
backend (the wiring; inductor takes minutes a stage on a CPU)."""
import contextlib
import glob
import importlib.resources
import math
import os
import shutil
import statistics
import sys
import time
from typing import Dict, List, Optional

import torch

from tola_lab.benchmarks.stage_timing import LABELS, StageTimer, TimedRunner
from tola_lab.gpu_check.configs import model_option_file
from tola_lab.gpu_check.precision_step import compute_dtype, tf32
from tola_plugin.archs.precision import LOW_PRECISIONS, autocast, stage_dtypes
from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.archs.stages import STAGES
from tola_plugin.archs.vae_arch import LATENT_SCALE
from tola_plugin.data.image_io import list_image_files, read_image_file
from tola_plugin.data.text_line_source import to_canvas
from tola_plugin.metrics.image_metrics import float_psnr
from tola_plugin.runtime.image_stages import stage_modules
from tola_plugin.runtime.routed_stages import RoutedStages
from tola_plugin.utils.process_tree import TreeTimeout, run_tree

ROW_PRECISIONS = ('fp32', 'auto') + LOW_PRECISIONS  # tola-infer's; fp32 first: the reference
STAGE_PRECISIONS = ('fp32', 'tf32') + LOW_PRECISIONS
DRY_RUN_LINES = 1
REFUSED = 'no path can run'  # tola-infer's error when every path of the request is outside the bounds
RUN_TIMEOUT_S = 300
BATCH_CAP, DRY_RUN_BATCH_CAP = 64, 2  # the speed table's largest batch
SATURATION = 1.05  # a batch gaining less than this over half its size ends the sweep
# item 2 of issue 50, each timed on auto's plan: kept (made a default) only where it wins on a GPU
VARIANTS = ('cudnn.benchmark', 'channels_last', 'TF32 on the image stages', 'late END check', 'torch.compile')
COMPILE_S = 240  # left at least for the torch.compile row on a GPU: inductor compiles three full-size stages
TARGET_S = 0.066  # one warm line end to end with auto's plan: half the paper's 0.132 s (RTX PRO 6000)
RESERVE_S = 60  # kept from the step's time for a speed row begun last (cuDNN's trials), the stage table, the result


def image_bound_db() -> float:
    """The qualification's bound on the image (``IMAGE_RMS_BOUND``) as a PSNR against fp32."""
    from tola_plugin.runtime.qualification import IMAGE_RMS_BOUND
    return float_psnr(torch.zeros(1), torch.full((1, ), IMAGE_RMS_BOUND))


def precisions(names, dry_run: bool, dry_run_names=('fp32', 'auto', 'bf16')):
    return tuple(p for p in names if not dry_run or p in dry_run_names)


def export_model(root: str, work: str, dry_run: bool) -> str:
    """The merged file of the timed model with seeded random adaptation weights (at init LoRA and the LRC add exact
    zeros, which would hide what merging changes)."""
    from tola_lab.benchmarks.benchmarking import build_benchmark_tola
    path = os.path.join(work, 'merged.safetensors')
    opt_path = model_option_file(root, 'tiny' if dry_run else 'fullsize', work, os.path.join(work, 'model.yml'))
    net = build_benchmark_tola(opt_path, random_weights=False, adaptation=False)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in net.parameters():
            if param.requires_grad:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.01)
    net.save_merged(path)
    return path


def export_demo_model(work: str) -> str:
    """The merged file of the demo backbone's frozen route (trained weights; its image follows ẑ0)."""
    from tola_plugin.archs.tola_arch import TOLANet
    path = os.path.join(work, 'demo_frozen.safetensors')
    TOLANet(backbone_init='demo', idm_lora=False, vae_lora=False, lrc=None).save_merged(path)
    return path


def tola_infer(model: str, lines: str, out: str, device: str, precision: str, env: Dict) -> Dict:
    """One ``tola-infer`` process (``python -m tola_cli.infer``) over the folder ``lines``: its seconds, the runtime
    line it printed, and '' or why it refused the precision (every path outside the qualification's bounds). Any
    other failure is a RuntimeError."""
    args = [
        sys.executable, '-m', 'tola_cli.infer', '-i', lines, '-o', out, '--model', model, '--device', device,
        '--precision', precision, '--backend', 'torch', '--overwrite'
    ]
    start = time.monotonic()
    try:
        proc = run_tree(args, timeout=RUN_TIMEOUT_S, env=env)
    except TreeTimeout:
        raise RuntimeError(f'tola-infer --precision {precision} ran past {RUN_TIMEOUT_S} s and was killed') from None
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        if REFUSED in proc.stderr:
            return {'seconds': seconds, 'runtime': '', 'refused': proc.stderr.strip().splitlines()[-1]}
        raise RuntimeError(f'tola-infer --precision {precision} failed (exit status {proc.returncode}):\n'
                           f'{proc.stderr[-3000:]}')
    runtime = [line for line in proc.stderr.splitlines() if 'runtime: ' in line]
    return {'seconds': seconds, 'runtime': runtime[0].split('runtime: ', 1)[1] if runtime else '', 'refused': ''}


def images_of(folder: str) -> List[torch.Tensor]:
    return [
        torch.from_numpy(read_image_file(p, order='RGB')).float() / 255.0
        for p in sorted(glob.glob(os.path.join(folder, '*.png')))
    ]


def db(value: float):
    """A PSNR for the report: rounded, 'identical' for equal images (inf)."""
    return 'identical' if math.isinf(value) else round(value, 2)


def chosen_path(model: str, device: str, precision: str):
    """The path the runtime chose for ``precision`` on ``model`` (the verdicts tola-infer cached are read)."""
    from tola_plugin.archs.tola_arch import TOLANet
    from tola_plugin.runtime.serving import Runtime
    net = TOLANet.load_for_inference(model, precision=precision)
    runtime = Runtime(net, device, 'torch', source=model, say=lambda message: None)
    try:
        return runtime.plan.path
    finally:
        runtime.close()


def synchronize(device: str) -> None:
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def peak_gib(device: str, reset: bool = False):
    """CUDA's peak allocated GiB since the last reset (``reset``: reset it now); None on the CPU."""
    if not device.startswith('cuda'):
        return None
    if reset:
        torch.cuda.reset_peak_memory_stats()
    return round(torch.cuda.max_memory_allocated() / 2**30, 2)


class ImageStagesTF32:
    """A ``stage_timing.TimedRunner`` timer that times nothing: the image stages a runtime serves (VAE encoder, IDM,
    VAE decoder) in TF32, the others in IEEE fp32 (the text prior's: TF32 could flip its argmax ids)."""
    SERVED = {s.label for s in STAGES if s.servable and s.planned}

    def timed(self, stage: str, fn, *args, **kwargs):
        with tf32(stage in self.SERVED):
            return fn(*args, **kwargs)


@contextlib.contextmanager
def running(net, path, device: str, everywhere_tf32: bool = False, variants=()):
    """``net`` running ``path`` with ``variants`` (of ``VARIANTS``; ``everywhere_tf32``: TF32 on every stage, the
    text prior too, as ``allow_tf32`` asks) -> a function placing a batch for it; all put back after."""
    runner = compiled_runner(net, path, device) if 'torch.compile' in variants else StageRunner(path.dtypes, path.name)
    if 'late END check' in variants:
        runner = LateEndCheck(path.dtypes, path.name)
    if 'TF32 on the image stages' in variants:
        runner = TimedRunner(runner, ImageStagesTF32())
    layout = torch.channels_last if 'channels_last' in variants else torch.contiguous_format
    benchmark, torch.backends.cudnn.benchmark = torch.backends.cudnn.benchmark, 'cudnn.benchmark' in variants
    net.to(memory_format=layout)
    try:
        with net.running(runner), torch.inference_mode(), tf32(everywhere_tf32):
            yield lambda batch: batch.to(device, memory_format=layout)
    finally:
        net.to(memory_format=torch.contiguous_format)
        torch.backends.cudnn.benchmark = benchmark
        if 'torch.compile' in variants:
            torch._dynamo.reset()  # the compiled stages' caches and CUDA graphs go with the row


class LateEndCheck(StageRunner):
    """Torch's stages, the text prior reading whether every line has ended one step late (``transocr_arch.EndFlag``:
    no wait on the device per greedy step; at most one step more, never read)."""

    def read_text(self, net, images, max_steps, incremental, stop_at_end):
        return net.transocr.greedy_decode(images, max_steps=max_steps, incremental=incremental, stop_at_end=stop_at_end,
                                          late_stop=stop_at_end)  # the full-prefix decoding reads no stop


def compiled_runner(net, path, device: str) -> RoutedStages:
    """``path`` with its image stages (``image_stages.stage_modules``) through torch.compile: on a GPU inductor with
    CUDA graphs (mode 'reduce-overhead', for batch 1's launch overhead), on a CPU dynamo's eager backend (a dry run).
    Each output is cloned: a CUDA graph's next replay reuses its output's memory."""
    options = {'mode': 'reduce-overhead'} if device.startswith('cuda') else {'backend': 'eager'}
    compiled = {stage: torch.compile(module, **options) for stage, module in stage_modules(net.idm, net.vae).items()}
    return RoutedStages(lambda stage, *tensors: compiled[stage](*tensors).clone(), path.dtypes,
                        f'{path.name} + torch.compile', text=False)


def batch_sweep(call, lines: torch.Tensor, device: str, cap: int, clock=time.perf_counter) -> Dict:
    """Lines per second at batches 1, 2, 4, ... ``cap`` (``call(batch)``: one warm-up, then one timed), stopping
    at the first batch that runs out of CUDA memory or gains under ``SATURATION`` over the one before -> the best
    batch, its lines per second and peak GiB, every batch's, and where memory ran out (None: it did not)."""
    rows, batch, oom = [], 1, None
    while batch <= cap and oom is None:
        data = lines.repeat(-(-batch // len(lines)), 1, 1, 1)[:batch]
        try:
            peak_gib(device, reset=True)
            call(data)
            synchronize(device)
            start = clock()
            call(data)
            synchronize(device)
            rows.append(
                {'batch': batch, 'lines_per_s': round(batch / (clock() - start), 2), 'peak_gib': peak_gib(device)})
        except torch.cuda.OutOfMemoryError:
            oom = batch
        if oom and device.startswith('cuda'):
            torch.cuda.empty_cache()
        if len(rows) > 1 and rows[-1]['lines_per_s'] < SATURATION * rows[-2]['lines_per_s']:
            break
        batch *= 2
    best = max(rows, key=lambda r: r['lines_per_s'], default={'batch': None, 'lines_per_s': None, 'peak_gib': None})
    return {
        'best_batch': best['batch'], 'lines_per_s': best['lines_per_s'], 'best_batch_peak_gib': best['peak_gib'],
        'batches': rows, 'out_of_memory_at': oom
    }


def speed_row(net, canvases: torch.Tensor, device: str, name: str, path, cap: int, everywhere_tf32: bool = False,
              variants=(), clock=time.perf_counter) -> Dict:
    """One row of the speed table: warm seconds per line end to end at batch 1 (the median over the lines, each
    alone after a warm-up), each stage's (a second pass, stage by stage: ``StageTimer``), peak GiB, every value
    finite before the clamp, and ``batch_sweep``'s throughput."""
    row = {'row': name, 'plan': path.name}
    with running(net, path, device, everywhere_tf32, variants) as place:
        lines = place(canvases)

        def call(batch):
            return net(batch, noise_seeds=list(range(len(batch))))

        peak_gib(device, reset=True)
        synchronize(device)
        start = clock()
        call(lines[:1])
        synchronize(device)
        row['first_call_s'] = round(clock() - start, 3)  # the warm-up: cuDNN's trials, a compilation
        seconds, finite = [], True
        for i in range(len(lines)):
            synchronize(device)
            start = clock()
            out = call(lines[i:i + 1])
            synchronize(device)
            seconds.append(clock() - start)
            finite = finite and bool(torch.isfinite(out).all())
        timer, stages = StageTimer(net), []
        try:
            for i in range(len(lines)):
                timer.seconds.clear()
                call(lines[i:i + 1])
                stages.append(dict(timer.seconds))
        finally:
            timer.close()
        row.update(
            seconds_per_line=round(statistics.median(seconds), 4), peak_gib=peak_gib(device), finite=finite,
            stages_s={s: round(statistics.median(t.get(s, 0.0) for t in stages), 4)
                      for s in LABELS}, **batch_sweep(call, lines, device, cap, clock))
    return row


def speed_rows(net, canvases, device: str, paths: Dict, cap: int, deadline: float, clock=time.monotonic,
               compile_s: float = COMPILE_S) -> List[Dict]:
    """The speed table on the full-size network: auto's plan as qualified, IEEE fp32, fp32 with TF32 on every stage
    and on the image stages only, each other served plan (``paths``: tola-infer's precision -> the path it chose),
    then auto's plan with each of ``VARIANTS`` (its ``vs_auto``: auto's seconds per line over its own; kept only
    where it wins; ``pays_back_after_lines``: its extra warm-up over what it saves a line). A row that would start
    past ``deadline`` (on ``clock``; the torch.compile row ``compile_s`` before it) is listed as not run."""
    fp32, auto = paths['fp32'], paths['auto']
    plan = [(f'auto: {auto.name}', auto, False, ()), ('fp32 (IEEE)', fp32, False, ()),
            ('fp32 + TF32 (every stage, the text prior too)', fp32, True, ()),
            ('fp32 + TF32 on the image stages', fp32, False, ('TF32 on the image stages', ))]
    plan += [(f'{p}: {path.name}', path, False, ()) for p, path in paths.items() if p not in ('fp32', 'auto')]
    plan += [(f'auto + {v}', auto, False, (v, )) for v in VARIANTS]
    rows = []
    for name, path, everywhere, variants in plan:
        if clock() > deadline - (compile_s if 'torch.compile' in variants else 0):
            rows.append({'row': name, 'plan': path.name, 'not_run': 'the step\'s time ran out'})
            continue
        rows.append(speed_row(net, canvases, device, name, path, cap, everywhere, variants))
        first, row = rows[0], rows[-1]
        if name.startswith('auto + ') and 'seconds_per_line' in first:
            row['vs_auto'] = round(first['seconds_per_line'] / row['seconds_per_line'], 3)
            saved = first['seconds_per_line'] - row['seconds_per_line']
            row['pays_back_after_lines'] = math.ceil(max(0.0, row['first_call_s'] - first['first_call_s']) /
                                                     saved) if saved > 0 else None
    return rows


def stage_seconds(net, canvas: torch.Tensor, device: str, names, repeats: int) -> List[Dict]:
    """Warm seconds (median of ``repeats``) of the VAE encoder, the IDM and the VAE decoder on one line in each
    precision of ``names`` (autocast as TOLANet runs a stage; 'tf32': fp32 with TF32; the decoder stays fp32 under
    fp16, as ``archs/precision.stage_dtypes`` has it)."""
    captured = {}
    hook = net.idm.register_forward_hook(lambda m, a, k, o: captured.update(args=a, kwargs=k), with_kwargs=True)
    with torch.inference_mode():
        out = net(canvas.to(device), noise_seeds=[0], return_intermediates=True)
    hook.remove()
    args = captured['args']
    context = args[2] if len(args) > 2 else captured['kwargs']['encoder_hidden_states']
    calls = {
        'vae_encoder': lambda: net.vae.encode(canvas.to(device)).latent_dist.mode(),
        'idm': lambda: net.idm(args[0], args[1], context),
        'vae_decoder': lambda: net.vae.decode((1.0 / LATENT_SCALE) * out['z0_corr']).sample,
    }
    rows = []
    for precision in names:
        dtypes = stage_dtypes(compute_dtype(precision))
        row = {'precision': precision}
        for stage, call in calls.items():
            times = []
            with torch.inference_mode(), tf32(precision == 'tf32'), autocast(dtypes[stage], device):
                for _ in range(repeats + 1):
                    synchronize(device)
                    start = time.perf_counter()
                    call()
                    synchronize(device)
                    times.append(time.perf_counter() - start)
            row[stage] = round(statistics.median(times[1:]), 4)
        rows.append(row)
    return rows


def quality_row(demo: str, lines: str, work: str, device: str, precision: str, env: Dict,
                reference: Optional[List[torch.Tensor]], bound_db: float) -> Dict:
    """tola-infer in one precision on the demo model: its plan, seconds, PSNR against ``reference`` (fp32's images;
    None: this is fp32) within ``bound_db``, or refused with the reason. The row keeps its images under 'images'."""
    out = os.path.join(work, f'tola_infer_{precision}')
    run = tola_infer(demo, lines, out, device, precision, env)
    row = {'precision': precision}
    if run['refused']:
        return dict(row, refused=run['refused'])
    images = images_of(out)
    row.update(runtime=run['runtime'], lines=len(images),
               tola_infer_seconds_per_line=round(run['seconds'] / max(len(images), 1), 3), images=images)
    if reference is not None:
        values = [float_psnr(a, b) for a, b in zip(images, reference)]
        row.update(
            psnr_vs_fp32_db_mean=db(sum(values) / len(values)), psnr_vs_fp32_db_min=db(min(values)),
            within_bound=min(values) >= bound_db)
    return row


def first_result(model: str, lines: str, work: str, device: str, precision: str, env: Dict) -> Dict:
    """``tola-infer`` on one line in a new cache folder (no verdict cached): its seconds to the result, the process's
    start, the model's loading and any qualification included."""
    one, name = os.path.join(work, f'one_line_{precision}'), os.path.basename(model)
    os.makedirs(one, exist_ok=True)
    shutil.copy2(os.path.join(lines, sorted(os.listdir(lines))[0]), one)
    cache = os.path.join(work, f'cache_{name}_{precision}')
    shutil.rmtree(cache, ignore_errors=True)
    run = tola_infer(model, one, one + '_out', device, precision, dict(env, XDG_CACHE_HOME=cache))
    return {'model': name, 'precision': precision, 'seconds': round(run['seconds'], 2), 'runtime': run['runtime']}


def inference_step(root: str, work: str, dry_run: bool, seconds: float = 0.0, clock=time.monotonic) -> Dict:
    """tola-infer's plans and quality on the demo model, the time to its first result, the full-size network's
    speed table (``speed_rows``) and each stage in each precision, within ``seconds`` (0: no limit) -> the step's
    figures (``passed``: fp32 and auto served, every served precision within the image bound, every output
    finite)."""
    from tola_plugin.archs.tola_arch import TOLANet
    deadline = clock() + (seconds - RESERVE_S if seconds else float('inf'))
    device = 'cpu' if dry_run else 'cuda'
    samples = str(importlib.resources.files('tola_plugin.assets.samples'))  # real LR lines of DiffTSR's test set
    lines = os.path.join(work, 'lines')
    os.makedirs(lines, exist_ok=True)
    files = [os.path.join(samples, name) for name in list_image_files(samples)][:DRY_RUN_LINES if dry_run else None]
    for path in files:
        shutil.copy2(path, lines)
    canvases = torch.stack(
        [torch.from_numpy(to_canvas(read_image_file(p, order='RGB'), order='RGB')).permute(2, 0, 1) for p in files])
    env = dict(os.environ, OMP_NUM_THREADS='1') if dry_run else dict(os.environ)  # the tiny network: one thread
    demo, bound = export_demo_model(work), image_bound_db()
    rows, reference = [], None
    for precision in precisions(ROW_PRECISIONS, dry_run, ('fp32', 'auto')):
        row = quality_row(demo, lines, work, device, precision, env, reference, bound)
        reference = row.get('images') if reference is None else reference
        rows.append(row)
    merged = export_model(root, work, dry_run)
    first = [
        first_result(merged, lines, work, device, 'fp32', env),
        first_result(demo, lines, work, device, 'auto', env)
    ]
    timed = TOLANet.load_for_inference(merged).to(device)
    timed.set_switches(clamp_output=False)
    paths = {}
    for row in rows:
        row.pop('images', None)
        if 'refused' not in row:
            paths[row['precision']] = chosen_path(demo, device, row['precision'])
            row['plan'] = paths[row['precision']].name
    speed = speed_rows(timed, canvases, device, paths, DRY_RUN_BATCH_CAP if dry_run else BATCH_CAP, deadline,
                       compile_s=0 if dry_run else COMPILE_S)  # a dry run's dynamo traces in seconds
    stages = stage_seconds(timed, canvases[:1], device, precisions(STAGE_PRECISIONS, dry_run, ('fp32', 'bf16')),
                           1 if dry_run else 5)
    served = [r for r in rows if 'refused' not in r]
    auto = speed[0].get('seconds_per_line')
    return {
        'passed': {'fp32', 'auto'} <= {r['precision']
                                       for r in served} and all(r.get('within_bound', True) for r in served)
        and all(r.get('finite', True) for r in speed), 'device': device,
        'quality_model': "the demo backbone's frozen route (trained; its image follows ẑ0)", 'image_bound_db': round(
            bound, 2), 'model': 'tiny, random weights (dry run)' if dry_run else 'full size, random weights',
        'rows': rows, 'first_result': first, 'speed': speed, 'stage_seconds': stages,
        'target': {'auto_seconds_per_line': auto, 'at_most_s': TARGET_S, 'met': auto is not None and auto <= TARGET_S}
    }
