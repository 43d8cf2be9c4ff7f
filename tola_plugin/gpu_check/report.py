"""The GPU check's report: ``gpu_check.json`` (every figure) and ``gpu_check.md`` (the same as tables; each line is
explained in docs/training_gpus.md, "Reading the report"), rewritten after every step so that a lease cut short
still leaves what was measured."""
import json
import os
from typing import Dict, List

from tola_plugin.utils.atomic_files import write_json, write_text

JSON_FILE, MARKDOWN_FILE = 'gpu_check.json', 'gpu_check.md'
STEP_TITLES = {
    'cuda_tests': '1. Tests marked cuda', 'resume': '2. Training under torchrun, exact resume',
    'memory': '3. Peak GPU memory and seconds per training iteration', 'inference': '4. Inference in each precision'
}


def verdict(step: Dict) -> str:
    if step.get('skipped'):
        return 'not run: ' + step['skipped']
    if 'error' in step:
        return 'ERROR: ' + step['error'].splitlines()[0][:300]
    return 'passed' if step.get('passed') else 'FAILED'


def table(header: List[str], rows: List[List]) -> List[str]:
    return ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)
            ] + ['| ' + ' | '.join('' if v is None else str(v) for v in row) + ' |' for row in rows]


def _machine(m: Dict) -> List[str]:
    gpus = '; '.join(f'{g["index"]}: {g["name"]} (sm {g["capability"]}, {g["memory_gib"]} GiB)'
                     for g in m['gpus']) or 'none usable' + (f' ({m["cuda_unusable_reason"]})'
                                                             if m.get('cuda_unusable_reason') else '')
    return table(['GPUs', 'driver', 'torch', 'CUDA build', 'Python', 'CPUs'],
                 [[gpus, m['driver'], m['torch'], m['torch_cuda'], m['python'], m['cpu_count']]])


def _cuda_tests(s: Dict) -> List[str]:
    return [f'`{s["command"]}`: {s["summary"]}', ''] + [f'- {line}' for line in s.get('failures', [])]


def _resume(s: Dict) -> List[str]:
    w = s['weights']
    runs = [[name, r['seconds']] for name, r in s['runs'].items()]
    return [
        f'{s["processes"]} process(es), {s["backend"]}, {s["precision"]}, gradient checkpointing '
        f'{s["gradient_checkpointing"]}, accumulate_grad_batches {s["accumulate_grad_batches"]}, batch '
        f'{s["batch_per_gpu"]} per GPU; {s["iterations"]["first"]} iterations, then --auto_resume to '
        f'{s["iterations"]["resumed_to"]} (resumed from iteration {", ".join(s["resumed_from_iteration"]) or "none"}),'
        f' against one uninterrupted run ({s["validations_uninterrupted"]} validations).', '',
        f'Adaptation weights after the resumed and the uninterrupted run: {w["tensors"] - w["differ"]} of '
        f'{w["tensors"]} tensors equal bit for bit (largest difference {w["max_abs_difference"]:.3g}).', ''
    ] + table(['run', 'seconds'], runs)


def _memory(s: Dict) -> List[str]:
    rows = []
    for r in s['rows']:
        parts = '[' + ', '.join(r['gradient_checkpointing']) + ']' if r['gradient_checkpointing'] else 'none'
        peak = r.get('peak_gib', 'out of memory' if 'out_of_memory' in r else 'not measured on the CPU')
        rows.append([
            r['precision'], parts, r['batch'], peak,
            r.get('predicted_gib', 'n/a (fp32 only)'),
            r.get('seconds_per_iteration')
        ])
    return [f'On {s["device"]}; the estimate took {s["estimate_seconds"]} s.', ''] + table(
        ['precision', 'gradient_checkpointing', 'batch', 'peak GiB', 'estimate GiB', 's / iteration'], rows)


def _inference(s: Dict) -> List[str]:
    rows = [[r['precision'], 'refused: ' + r['refused'], '', '', '', '', ''] if 'refused' in r else [
        r['precision'], r['plan'], r['tola_infer_seconds_per_line'], r['network_seconds_per_line'],
        r.get('psnr_vs_fp32_db_mean', 'reference'),
        r.get('psnr_vs_fp32_db_min', ''), 'yes' if r['finite'] else 'NO'
    ] for r in s['rows']]
    return [
        f'Quality: tola-infer on {s.get("quality_model", s["model"])}, PSNR against fp32 (bound: at least '
        f'{s.get("image_bound_db", "")} dB); speed: the network alone, {s["model"]}; on {s["device"]}.', ''
    ] + table([
        'precision', 'plan (as computed)', 'tola-infer s / line', 'network s / line', 'PSNR vs fp32 dB (mean)',
        '(worst line)', 'all finite'
    ], rows)


SECTIONS = {'cuda_tests': _cuda_tests, 'resume': _resume, 'memory': _memory, 'inference': _inference}


def markdown(result: Dict) -> str:
    lines = [
        f'# TOLA GPU check{" (dry run: CPU, tiny network)" if result["dry_run"] else ""}', '',
        f'{result["started"]}, bundle of commit {result["bundle"].get("commit", "unknown")}, `{result["command"]}`; '
        f'{result["seconds"]:.0f} s in all.', ''
    ] + _machine(result['machine']) + ['', '| step | result | seconds |', '|---|---|---|']
    for key, title in STEP_TITLES.items():
        step = result['steps'].get(key)
        if step is not None:
            lines.append(f'| {title} | {verdict(step)} | {step.get("step_seconds", "")} |')
    for key, title in STEP_TITLES.items():
        step = result['steps'].get(key)
        if step is None or step.get('skipped'):
            continue
        lines += ['', f'## {title}', '']
        lines += [f'```\n{step["error"]}\n```'] if 'error' in step else SECTIONS[key](step)
    env = result.get('distributions', {})
    lines += ['', '## Distributions', ''] + table(['distribution', 'version', 'from'],
                                                  [[k, v['version'], v['origin']] for k, v in sorted(env.items())])
    return '\n'.join(lines) + '\n'


def write_report(folder: str, result: Dict) -> None:
    os.makedirs(folder, exist_ok=True)
    write_json(os.path.join(folder, JSON_FILE), json.loads(json.dumps(result, default=str)))
    write_text(os.path.join(folder, MARKDOWN_FILE), markdown(result))
