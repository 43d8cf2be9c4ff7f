"""The benchmark's targets (the issues'), which are met, the markdown table and the files it writes."""
import json
import os
from typing import Dict, List, Optional

from tola_lab.benchmarks.folder_throughput import folder_markdown
from tola_lab.benchmarks.stage_bounds import KERNEL_SLACK, stage_bounds, stage_macs
from tola_lab.benchmarks.stage_timing import LABELS, uniform_precisions

#: the issue's targets (2-core CPU with native bf16, batch 1, full size)
TARGETS = {
    'auto_vs_reference': 2.8,  # auto (backend and precision) at least this many times the reference route
    'auto_vs_bf16_ceiling': 1.5,  # auto at most this many times the bf16 matmul ceiling's time for the route
    'openvino_fp32_vs_reference': 1.6,  # fp32 on the CPU backend
    'peak_rss_over_weights': 1.3,  # peak RSS above the import baseline / bytes of the weights
    'photo_batch_speedup': 1.5,  # 8 lines in one batch vs 8 single calls
    'bf16_psnr_drop_db': 0.1,  # trained weights: bf16 within this of fp32 (PSNR vs HR)
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
    if ref and 'auto batch 1' in t:
        add('auto_vs_reference', ref / t['auto batch 1']['per_image_s'])
    if ref and 'openvino fp32 batch 1' in t:
        add('openvino_fp32_vs_reference', ref / t['openvino fp32 batch 1']['per_image_s'])
    # the bf16 ceiling is a target only where the CPU has bf16 instructions: an emulated bf16 matmul's ceiling is no
    # limit of the hardware (an ideal time several times the fp32 route's)
    if 'auto batch 1' in t and result.get('ceiling_gflops') and result.get('machine', {}).get('native_bf16'):
        add('auto_vs_bf16_ceiling',
            t['auto batch 1']['per_image_s'] / ideal_seconds(result, uniform_precisions('bf16')),
            higher_is_better=False)
    if 'photo' in result:
        add('photo_batch_speedup', result['photo']['speedup'])
    memory = result.get('memory', {}).get('auto')
    if memory:
        add('peak_rss_over_weights',
            (memory['peak_rss_bytes'] - memory['import_rss_bytes']) / result['weight_bytes']['auto'],
            higher_is_better=False)
    rows = result.get('quality', {}).get('rows', {})
    for backend in ('torch', 'openvino'):
        if f'{backend} bf16' in rows:
            drop = rows[f'{backend} fp32']['psnr_vs_hr_db'] - rows[f'{backend} bf16']['psnr_vs_hr_db']
            add('bf16_psnr_drop_db', drop, higher_is_better=False)
            checks[f'bf16_psnr_drop_db ({backend})'] = checks.pop('bf16_psnr_drop_db')
            checks[f'bf16_psnr_drop_db ({backend})']['same_text_prior'] = rows[f'{backend} bf16']['same_text_prior']
    return checks


def ideal_seconds(result: Dict, precisions: Dict[str, str]) -> float:
    """Seconds per line at the machine's matmul ceiling, each stage's counted MACs at the ceiling of its precision
    (``precisions``: timed stage -> 'fp32', 'bf16', 'fp16'): 2 x MACs / the ceiling, summed (nan without them)."""
    ceilings, macs = result.get('ceiling_gflops', {}), stage_macs(result.get('macs') or {})
    if not macs or not all(ceilings.get(precisions[stage]) for stage in macs):
        return float('nan')
    return sum(2 * count / (ceilings[precisions[stage]] * 1e9) for stage, count in macs.items())


def bounds(result: Dict) -> Dict[str, Dict]:
    """{batch-1 row: ``stage_bounds`` of its stages}: what bounds each stage of each route (needs the counted MACs,
    the stages' elements and the copy bandwidth)."""
    if not (result.get('macs') and result.get('stage_elements') and result.get('copy_gbps')):
        return {}
    macs = stage_macs(result['macs'])
    return {
        name: stage_bounds(row['stages_s'], row['stage_precisions'], macs, result['stage_elements'],
                           result['ceiling_gflops'], result['copy_gbps'])
        for name, row in result['timings'].items() if row['batch'] == 1
    }


def bounds_table(result: Dict) -> List[str]:
    """The markdown of ``result['bounds']``: per route and stage the bound and the stage's time over its roofline."""
    rows = result.get('bounds') or {}
    if not rows:
        return []
    lines = [
        '', f"What bounds each stage (its time over its roofline: the larger of its MACs at the matmul ceiling and "
        f"its bytes at the copy bandwidth, {result['copy_gbps']:.1f} GB/s; over {KERNEL_SLACK}x: the runtime's "
        "kernels):", '', f'| route | precision | {" | ".join(LABELS)} |', '|---|---|' + '---|' * len(LABELS)
    ]
    for name, stages in rows.items():
        row = result['timings'][name]
        cells = [(f"{stages[s]['bound']} {stages[s]['x_roofline']:.1f}x" if stages[s]['x_roofline'] else 'kernels')
                 if s in stages else '' for s in LABELS]
        lines.append(f"| {row['route']} | {row['dtype']} | {' | '.join(cells)} |")
    macs = stage_macs(result['macs'])
    lines.append('per stage: ' + ', '.join(f"{s} {macs.get(s, 0) / 1e9:.1f} GMAC, "
                                           f"{result['stage_elements'].get(s, 0) * 4 / 1e9:.2f} GB in fp32"
                                           for s in LABELS))
    return lines


def route_error(result: Dict, route: str) -> str:
    """A row's ẑ0 error against the reference route (mean |Δẑ0| / mean |z_LR|, ``qualification.route_errors``)."""
    parity = result.get('parity', {}).get(route)
    return f"{parity['z0_of_z_lr']:.2%}" if parity and 'z0_of_z_lr' in parity else '-'


def markdown(result: Dict) -> str:
    ceiling = result.get('ceiling_gflops', {})
    lines = [
        f'| route | precision (as computed) | ẑ0 error | batch | {" | ".join(LABELS)} | s / image | GMAC/s | share of '
        'ceiling | ideal s | x ideal |', '|---|---|---:|---:|' + '---:|' * (len(LABELS) + 5)
    ]
    for row in result['timings'].values():
        stages = ' | '.join(f"{row['stages_s'][s]:.2f}" for s in LABELS)
        rate = result['route_gmac'] / row['per_image_s'] if result.get('route_gmac') else float('nan')
        ideal = ideal_seconds(result, row['stage_precisions'])
        share = ideal / row['per_image_s'] if ceiling else float('nan')  # of the ceiling of each stage's precision
        lines.append(f"| {row['route']} | {row['dtype']} | {route_error(result, row['route'])} | {row['batch']} | "
                     f"{stages} | {row['per_image_s']:.2f} | {rate:.1f} | {share:.0%} | {ideal:.2f} | "
                     f"{row['per_image_s'] / ideal:.2f} |")
    lines += bounds_table(result)
    lines.append('')
    if result.get('route_gmac'):
        lines.append(f"route: {result['route_gmac']:.1f} GMAC per 128x512 line (tensor stages); matmul ceiling " +
                     ', '.join(f'{k} {v:.0f} GFLOP/s' for k, v in ceiling.items()) +
                     (f"; copy bandwidth {result['copy_gbps']:.1f} GB/s" if result.get('copy_gbps') else ''))
    if 'photo' in result:
        p = result['photo']
        lines.append(f"photo path ({p['lines']} lines, auto route): one batch {p['batched_s']:.2f} s, "
                     f"{p['lines']} single calls {p['single_s']:.2f} s: {p['speedup']:.2f}x")
    for route, mem in result.get('memory', {}).items():
        weights = result['weight_bytes'][route]
        above = mem['peak_rss_bytes'] - mem['import_rss_bytes']
        worker = mem.get('worker_peak_rss_bytes', 0)
        split = (f" (this process {mem['user_peak_rss_bytes'] / 2**30:.2f}, the OpenVINO worker {worker / 2**30:.2f})"
                 if worker and 'user_peak_rss_bytes' in mem else '')
        lines.append(f"peak RSS {route}: {mem['peak_rss_bytes'] / 2**30:.2f} GiB{split}, {above / 2**30:.2f} GiB above "
                     f"the {mem['import_rss_bytes'] / 2**30:.2f} GiB import baseline = {above / weights:.2f}x the "
                     f"{weights / 2**30:.2f} GiB of weights it runs")
    if 'folder' in result:
        lines += folder_markdown(result['folder'])
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


def write(result: Dict, table: Optional[str], out: Optional[str]) -> None:
    """Write ``result`` as JSON to ``out`` (and ``table`` as markdown next to it)."""
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out, 'w', encoding='utf-8') as f:
            json.dump(result, f, indent=2)
        if table:
            with open(os.path.splitext(out)[0] + '.md', 'w', encoding='utf-8') as f:
                f.write(table + '\n')
