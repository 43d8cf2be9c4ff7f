"""The GPU check's report: ``gpu_check.json`` (every figure) and ``gpu_check.md`` (the same as tables; each line is
explained in docs/training_gpus.md, "Reading the report"), rewritten after every step so that a lease cut short
still leaves what was measured. Its first lines: the machine, and every distribution whose version differs from the
one the tests ran with."""
import json
import os
from typing import Dict, List

from tola_lab.benchmarks.stage_timing import LABELS
from tola_plugin.utils.atomic_files import write_json, write_text

JSON_FILE, MARKDOWN_FILE = 'gpu_check.json', 'gpu_check.md'
STEP_TITLES = {
    'smoke': '1. Smoke: one training step and one restore of the tiny network',
    'demo_model': 'The demo model trained for the package (backbone, then TOLA; files in demo_model/)',
    'rrdb_baseline': 'The demo\'s plain CNN (RRDBNet x4) with a GPU\'s compute (files in rrdb_baseline/)',
    'memory': '2. Peak GPU memory and seconds per training iteration (batch 16, full size)',
    'precision': '3. Each precision where TOLA amplifies its error (demo backbone, frozen route)',
    'inference': '4. Inference in each precision (full size)', 'cuda_tests': '5. Tests marked cuda',
    'resume': '6. Training under torchrun, exact resume',
    'shared_gpu': '7. Two ranks on one GPU (gloo): DDP, resumed by two ranks, refused to one'
}


def verdict(step: Dict) -> str:
    if step.get('interrupted'):
        return f'INTERRUPTED by {step["interrupted"]}: killed with its processes'
    if step.get('skipped'):
        return 'skipped: ' + step['skipped']
    if 'error' in step:
        return 'ERROR: ' + step['error'].splitlines()[0][:300]
    return 'passed' if step.get('passed') else 'FAILED'


def table(header: List[str], rows: List[List]) -> List[str]:
    return ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)
            ] + ['| ' + ' | '.join('' if v is None else str(v) for v in row) + ' |' for row in rows]


def _g(value, digits=3) -> str:
    return f'{value:.{digits}g}' if isinstance(value, float) else str(value)


def _machine(m: Dict) -> List[str]:
    gpus = '; '.join(f'{g["index"]}: {g["name"]} (sm {g["capability"]}, {g["memory_gib"]} GiB)'
                     for g in m['gpus']) or 'none usable' + (f' ({m["cuda_unusable_reason"]})'
                                                             if m.get('cuda_unusable_reason') else '')
    return table(['GPUs', 'driver', 'torch', 'CUDA build', 'Python', 'CPUs'],
                 [[gpus, m['driver'], m['torch'], m['torch_cuda'], m['python'], m['cpu_count']]])


def _skew(dists: Dict) -> List[str]:
    rows = [[k, v['version'], v['tested'], v['origin']] for k, v in sorted(dists.items()) if v.get('differs')]
    if not rows:
        return ['Every distribution has the version the tests ran with.' if dists else '']
    return ['Versions other than the tests ran with (all distributions: the last section):', ''] + table(
        ['module', 'here', 'tested', 'from'], rows)


def _smoke(s: Dict) -> List[str]:
    return [
        f'On {s["device"]}: losses {s["losses"]}; adaptation tensors changed: {s["adaptation_tensors_changed"]}; '
        f'restored line finite: {s["restored_finite"]} (range {s["restored_range"]}).'
    ]


def _memory(s: Dict) -> List[str]:
    rows = []
    for r in s['rows']:
        parts = '[' + ', '.join(r['gradient_checkpointing']) + ']' if r['gradient_checkpointing'] else 'none'
        peak = r.get('peak_gib',
                     r.get('out_of_memory') and 'out of memory' or r.get('error') or 'not measured on the CPU')
        rows.append([
            r['precision'] + (' + TF32' if r.get('tf32') else ''), parts, r['batch'], peak,
            r.get('predicted_gib', ''),
            r.get('seconds_per_iteration'),
            r.get('first_iteration_seconds')
        ])
    return [f'On {s["device"]}; the estimate took {s["estimate_seconds"]} s.', ''] + table([
        'precision', 'gradient_checkpointing', 'batch', 'peak GiB', 'estimate GiB', 's / iteration',
        'first iteration s (cuDNN trials)'
    ], rows)


def _precision(s: Dict) -> List[str]:
    rows = [[
        r['stage'], r['precision'],
        _g(r['eps_hat_mean_abs_error']),
        _g(r['z0_mean_abs_error']), f'{100 * r["z0_of_z_lr"]:.2f} %', f'{r["z0_of_lr_to_hr"]:.3f}', r['image_psnr_db'],
        'yes' if r['finite'] else 'NO',
        json.dumps(r['bounds']) if r['bounds'] else '', 'passed' if r['passed'] else 'FAILED'
    ] for r in s['rows']]
    f = s['fidelity'] or {}
    fidelity = [] if not f else [
        '',
        f'fp32 on the CPU against fp32 here, same lines: largest |Δ| of the image {_g(f["image_max_abs_difference"])}'
        f' (bound {f["bound"]}), PSNR {f["image_psnr_db"]} dB: {"passed" if f["passed"] else "FAILED"}.'
    ]
    return [
        f'{s["model"]}, {s["lines"]} lines on {s["device"]}; mean |z_LR| {s["z_lr_mean_abs"]:.3f}, mean |z_LR - z_HR| '
        f'{s["lr_to_hr_mean_abs"]:.3f}, mean |ẑ0 - z_HR| (fp32) {s["z0_to_hr_mean_abs"]:.3f}. Each row against the '
        'route in IEEE fp32 on the same device.', ''
    ] + table([
        'stage', 'precision', 'mean |Δε̂|', 'mean |Δẑ0|', 'of |z_LR|', 'of |z_LR - z_HR|', 'image PSNR dB', 'finite',
        'bounds', 'result'
    ], rows) + fidelity


def _inference(s: Dict) -> List[str]:
    rows = [[r['precision'], 'refused: ' + r['refused'], '', '', ''] if 'refused' in r else [
        r['precision'],
        r.get('plan', ''), r['tola_infer_seconds_per_line'],
        r.get('psnr_vs_fp32_db_mean', 'reference'),
        r.get('psnr_vs_fp32_db_min', '')
    ] for r in s['rows']]
    speed = [[r['row'], r['plan'], 'not run: ' + r['not_run']] if 'not_run' in r else [
        r['row'], r['plan'], r['seconds_per_line'], *(r['stages_s'][k] for k in LABELS), r['peak_gib'], r['best_batch'],
        r['lines_per_s'],
        r.get('first_call_s', ''),
        r.get('vs_auto', ''),
        r.get('pays_back_after_lines', ''), 'yes' if r['finite'] else 'NO'
    ] for r in s['speed']]
    t = s['target']
    return [
        f'Quality: tola-infer on {s["quality_model"]}, PSNR against fp32 (bound: at least {s["image_bound_db"]} dB on '
        f'every line); on {s["device"]}.', ''
    ] + table([
        'tola-infer --precision', 'plan (as computed)', 'tola-infer s / line', 'PSNR vs fp32 dB (mean)', '(worst line)'
    ], rows) + [''] + [
        f'- First result of tola-infer (one line, nothing cached: start, loading, qualification): {r["model"]} '
        f'--precision {r["precision"]}: {r["seconds"]} s ({r["runtime"]})' for r in s['first_result']
    ] + [
        '', f'Speed, warm: {s["model"]}, batch 1 end to end and per stage (s), the best batch; auto\'s line '
        f'{t["auto_seconds_per_line"]} s, target at most {t["at_most_s"]} s: {"met" if t["met"] else "NOT met"}.', ''
    ] + table(
        ['row', 'plan', 's / line'] + list(LABELS) +
        ['peak GiB', 'best batch', 'lines / s', 'first call s', 'vs auto', 'pays back after (lines)', 'all finite'],
        speed) + [''] + table(['stage precision', 'VAE encoder s', 'IDM s', 'VAE decoder s'],
                              [[r['precision'], r['vae_encoder'], r['idm'], r['vae_decoder']]
                               for r in s['stage_seconds']])


def _cuda_tests(s: Dict) -> List[str]:
    lines = [f'`{s["command"]}` on {s.get("device", "cuda")}: {s["summary"]}', '']
    lines += [f'- {name}: {outcome}' for name, outcome in sorted(s.get('outcomes', {}).items())]
    return lines + [''] + [f'- problem: {p}' for p in s.get('problems', [])]


def _resume(s: Dict) -> List[str]:
    w, m = s['weights'], s['moved_after_resume_point']
    runs = [[name, r['seconds']] for name, r in s['runs'].items()]
    return [
        f'{s["processes"]} process(es), {s["backend"]}, {s["precision"]}, gradient checkpointing '
        f'{s["gradient_checkpointing"]}, accumulate_grad_batches {s["accumulate_grad_batches"]}, batch '
        f'{s["batch_per_gpu"]} per GPU ({s["iterations_per_epoch"]} iterations per epoch), learning rate '
        f'{s["learning_rate"]}; {s["iterations"]["first"]} iterations, then --auto_resume to '
        f'{s["iterations"]["resumed_to"]} (resumed from iteration {", ".join(s["resumed_from_iteration"]) or "none"}),'
        f' against one uninterrupted run ({s["validations_uninterrupted"]} validations).', '',
        f'Adaptation weights after the resumed and the uninterrupted run: {w["tensors"] - w["differ"]} of '
        f'{w["tensors"]} tensors equal bit for bit (largest difference {w["max_abs_difference"]:.3g}); after the '
        f'resume point {m["differ"]} of {m["tensors"]} moved (largest change {m["max_abs_difference"]:.3g}).', ''
    ] + table(['run', 'seconds'], runs)


def _demo_model(s: Dict) -> List[str]:
    adaptation = s.get('adaptation') or {}
    lines = [
        f'Backbone: {s["backbone"]}. Adaptation: {adaptation.get("total_iter", "not run")} iterations planned, '
        f'{adaptation.get("exit_status", "")} ({adaptation.get("seconds", 0)} s), from '
        f'{adaptation.get("started_from", "-")}.', ''
    ]
    held, rows = s.get('held_out'), [('LR', 'lr'), ('TOLA', 'tola'), ('TOLA, null text prior', 'tola_null_prior')]
    if held:
        lines += table(['held-out pool', 'PSNR (dB)', 'TransOCR ACC'],
                       [[name, _g(held[f'psnr_{k}'], 4), _g(held[f'transocr_acc_{k}'])] for name, k in rows]) + ['']
    return lines + [
        'Files to bring back (demo_model/): ' + ', '.join(f'{k} ({v / 2**20:.1f} MiB)'
                                                          for k, v in sorted(s['files'].items()))
    ]


def _rrdb_baseline(s: Dict) -> List[str]:
    return [
        f'{s["total_iter"]} iterations planned ({s["option_file"]}), {s["exit_status"]} after {s["train_seconds"]} s '
        f'of training ({s["render_seconds"]} s of rendering before it); weights {s["weights"]}: score them on make '
        f'demo\'s lines with docs/demo_backbone.md\'s commands.'
    ]


def _shared_gpu(s: Dict) -> List[str]:
    runs = [[name, run.get('seconds', 'failed')] for name, run in s['runs'].items()]
    m = s['moved_after_resume_point']
    return [
        f'{s["devices"]} GPU(s), backend {s["backend"]}, {s["precision"]}, gradient checkpointing of '
        f'{", ".join(s["gradient_checkpointing"])}; the ranks said they share the GPU: {s["shared_said"]}. '
        f'{s["iterations"]["first"]} iterations on two ranks, resumed by two ranks to {s["iterations"]["resumed_to"]} '
        f'(from iteration {", ".join(s["resumed_from_iteration"]) or "none"}; {m["differ"]} tensors moved after it), '
        f'resumed by one rank: refused in one line: {s["refused_one_rank"]}.', ''
    ] + [f'    {line}' for line in s['one_rank_said']] + [''] + table(['run', 'seconds'], runs)


SECTIONS = {
    'smoke': _smoke, 'demo_model': _demo_model, 'rrdb_baseline': _rrdb_baseline, 'memory': _memory,
    'precision': _precision, 'inference': _inference, 'cuda_tests': _cuda_tests, 'resume': _resume,
    'shared_gpu': _shared_gpu
}


def markdown(result: Dict) -> str:
    bundle = result['bundle']
    lines = [
        f'# TOLA GPU check{" (dry run: CPU, tiny network)" if result["dry_run"] else ""}', '',
        f'{result["started"]}, {bundle.get("mode", "bundle")} of commit {bundle.get("commit", "unknown")}, '
        f'`{result["command"]}`; {result["seconds"]:.0f} s in all (deadline {result.get("deadline_s", "none")} s)' +
        (f'; INTERRUPTED by {result["interrupted"]}.' if result.get('interrupted') else '.'), ''
    ] + _machine(result['machine']) + [''] + _skew(result.get(
        'distributions', {})) + ['', '| step | result | seconds |', '|---|---|---|']
    for key, title in STEP_TITLES.items():
        step = result['steps'].get(key)
        if step is not None:
            lines.append(f'| {title} | {verdict(step)} | {step.get("step_seconds", "")} |')
    for key, title in STEP_TITLES.items():
        step = result['steps'].get(key)
        if step is None or step.get('skipped'):
            continue
        lines += ['', f'## {title}', '']
        if 'error' in step:
            lines += [f'```\n{step["error"]}\n{step.get("output_tail") or step.get("traceback", "")}\n```']
        else:
            try:
                lines += SECTIONS[key](step)
            except (KeyError, TypeError, ValueError) as err:  # a figure missing: the report is still written, raw
                lines += [
                    f'(figures not as expected: {type(err).__name__}: {err})', '```',
                    json.dumps(step, default=str)[:4000], '```'
                ]
    lines += ['', '## Not tested here (one GPU, one node, random full-size weights)', '']
    lines += [f'- {item}' for item in result.get('not_tested', [])]
    env = result.get('distributions', {})
    lines += ['', '## Distributions', ''] + table(['module', 'distribution', 'version', 'tested', 'from'],
                                                  [[k, v['distribution'], v['version'], v['tested'] or '', v['origin']]
                                                   for k, v in sorted(env.items())])
    return '\n'.join(lines) + '\n'


def write_report(folder: str, result: Dict) -> None:
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, JSON_FILE), json.loads(json.dumps(result, default=str)))
    write_text(os.path.join(folder, MARKDOWN_FILE), markdown(result))
