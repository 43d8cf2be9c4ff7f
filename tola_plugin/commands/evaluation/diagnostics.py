"""Recognition diagnostics of the supplement (Tables S9-S13) and the paired statistics (Table S10).

Everything compares a baseline A (e.g. DiffTSR) with a method B (e.g. TOLA) on the same filename-aligned
images, from the per-image CSVs of tools/evaluate.py, with one recognizer (prefix 't_' = TransOCR, the paper's
choice, or 'p_' = PP-OCRv4). Texts are normalized as for ACC/NED.

Definitions where the paper leaves them implicit (also in docs/evaluation.md):
- Text category of the normalized ground truth: **Chinese** = at least one Han character (CJK unified or
  compatibility ideograph) and no Latin letter; **English** = at least one Latin letter and no Han
  character; **Mixed** = both; **Num./Other** = neither (digits, punctuation, symbols only).
- Confidence bins of the prior confidence c: [0,.25), [.25,.5), [.5,.75), [.75,1] (the last one closed).
- Correct prior: normalized prior text == normalized ground truth.
- Behaviour (Table S13): Exact GT = recognized restored text equals the ground truth; Copy = it equals the
  (wrong) prior instead; Other = neither. Copy is undefined for correct priors (it would equal Exact GT).
- Edit operations: substitutions / deletions / insertions of the minimal edit script from the ground truth
  to the recognized text, summed; edits per 100 = 100 * total / number of normalized ground-truth characters.

``diagnose_evaluations`` runs it all on two evaluation folders and writes diagnostics.json / .md
(tools/diagnose.py).
"""
import os
import unicodedata
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from tola_plugin.commands.evaluation import records as R
from tola_plugin.commands.evaluation.plots import recognition_diagnostics_figure
from tola_plugin.commands.evaluation.records import PREFIX, SUMMARY_METRICS
from tola_plugin.commands.evaluation.statistics import N_RESAMPLES, mcnemar_exact, paired_bootstrap
from tola_plugin.inference.prior_csv import read_prior_csv
from tola_plugin.metrics.text_metrics import EditOps, edit_operations, normalize
from tola_plugin.utils.atomic_files import read_json, write_json, write_text
from tola_plugin.utils.cli_errors import UsageError

CATEGORIES = ('Chinese', 'English', 'Mixed', 'Num./Other')
CONFIDENCE_EDGES = (0.0, 0.25, 0.5, 0.75, 1.0)
CONFIDENCE_BINS = ('[0,.25)', '[.25,.50)', '[.50,.75)', '[.75,1]')
# Per-image metrics that get paired intervals, in table order (FID is a set-level metric: no per-image value).
PAIRED_COLUMNS = ('psnr', 'ssim', 'lpips', 'dists', 't_acc', 't_ned', 'p_acc', 'p_ned')
IMAGE_COLUMNS = ('psnr', 'ssim', 'lpips', 'dists')


def _is_han(ch: str) -> bool:
    return unicodedata.name(ch, '').startswith(('CJK UNIFIED IDEOGRAPH', 'CJK COMPATIBILITY IDEOGRAPH'))


def _is_latin_letter(ch: str) -> bool:
    return ch.isalpha() and unicodedata.name(ch, '').startswith('LATIN')


def text_category(text: str) -> str:
    """Category of a normalized ground-truth string (see module docstring)."""
    han = any(_is_han(c) for c in text)
    latin = any(_is_latin_letter(c) for c in text)
    if han and latin:
        return 'Mixed'
    if han:
        return 'Chinese'
    if latin:
        return 'English'
    return 'Num./Other'


def confidence_bin(confidence: float) -> int:
    """Index into CONFIDENCE_BINS; c must be in [0,1]."""
    if not 0.0 <= confidence <= 1.0:
        raise ValueError(f'confidence {confidence} outside [0,1]')
    return min(int(np.searchsorted(CONFIDENCE_EDGES, confidence, side='right')) - 1, len(CONFIDENCE_BINS) - 1)


def _column(records: Mapping[str, Mapping], names: Sequence[str], key: str) -> np.ndarray:
    missing = [n for n in names if key not in records[n]]
    if missing:
        raise KeyError(f'column {key!r} missing for {len(missing)} image(s), e.g. {missing[:3]}')
    return np.array([float(records[n][key]) for n in names])


def _mean(values: np.ndarray, mask: np.ndarray) -> Optional[float]:
    return float(values[mask].mean()) if mask.any() else None


def paired_table(a: Mapping[str, Mapping], b: Mapping[str, Mapping], names: Sequence[str],
                 n_resamples: int = N_RESAMPLES, seed: int = 0) -> List[Dict]:
    """Change B - A with paired bootstrap interval for every per-image metric both have; exact McNemar for ACC."""
    rows = []
    for key in PAIRED_COLUMNS:
        if not all(key in a[n] and key in b[n] for n in names):
            continue
        va, vb = _column(a, names, key), _column(b, names, key)
        row = {'metric': key, **paired_bootstrap(va, vb, n_resamples=n_resamples, seed=seed).as_dict()}
        row['mean_a'], row['mean_b'] = float(va.mean()), float(vb.mean())
        if key.endswith('_acc'):
            row['mcnemar'] = mcnemar_exact(va > 0.5, vb > 0.5).as_dict()
        rows.append(row)
    return rows


def _texts(records, names, prefix, lower):
    return [normalize(str(records[n].get(f'{prefix}pred', '')), lower) for n in names]


def confidence_table(a, b, names, gts, priors, prefix='t_', lower=False) -> List[Dict]:
    """Table S9: per prior-confidence bin N, prior ACC, ACC and NED of A and B."""
    conf = np.array([priors[n]['prior_confidence'] for n in names])
    prior_ok = np.array([normalize(priors[n]['prior_text'], lower) == g for n, g in zip(names, gts)])
    bins = np.array([confidence_bin(c) for c in conf])
    acc_a, acc_b = _column(a, names, f'{prefix}acc'), _column(b, names, f'{prefix}acc')
    ned_a, ned_b = _column(a, names, f'{prefix}ned'), _column(b, names, f'{prefix}ned')
    rows = []
    for i, label in enumerate(CONFIDENCE_BINS):
        m = bins == i
        rows.append({
            'bin': label, 'n': int(m.sum()), 'prior_acc': _mean(prior_ok.astype(float), m), 'acc_a': _mean(acc_a, m),
            'acc_b': _mean(acc_b, m), 'ned_a': _mean(ned_a, m), 'ned_b': _mean(ned_b, m)
        })
    return rows


def category_table(a, b, names, gts, prefix='t_') -> List[Dict]:
    """Table S11: per text category N, ACC and NED of A and B."""
    cats = np.array([text_category(g) for g in gts])
    acc_a, acc_b = _column(a, names, f'{prefix}acc'), _column(b, names, f'{prefix}acc')
    ned_a, ned_b = _column(a, names, f'{prefix}ned'), _column(b, names, f'{prefix}ned')
    return [{
        'category': c, 'n': int((cats == c).sum()), 'acc_a': _mean(acc_a, cats == c), 'acc_b': _mean(acc_b, cats == c),
        'ned_a': _mean(ned_a, cats == c), 'ned_b': _mean(ned_b, cats == c)
    } for c in CATEGORIES]


def edit_table(records_by_method: Mapping[str, Mapping], names, gts, prefix='t_', lower=False) -> List[Dict]:
    """Table S12: summed substitutions, deletions, insertions, total and edits per 100 GT characters."""
    gt_chars = sum(len(g) for g in gts)
    rows = []
    for method, records in records_by_method.items():
        ops = EditOps()
        for pred, gt in zip(_texts(records, names, prefix, lower), gts):
            ops = ops + edit_operations(pred, gt)
        rows.append({
            'method': method, 'substitutions': ops.substitutions, 'deletions': ops.deletions,
            'insertions': ops.insertions, 'total': ops.total, 'gt_chars': gt_chars,
            'edits_per_100': 100.0 * ops.total / gt_chars if gt_chars else None
        })
    return rows


def prior_strata_table(a, b, names, gts, priors, prefix='t_', lower=False) -> List[Dict]:
    """Table S9 (prior-stratified): per stratum N, mean prior confidence, ACC/NED of A and B and the
    per-image image metrics both methods have."""
    prior_ok = np.array([normalize(priors[n]['prior_text'], lower) == g for n, g in zip(names, gts)])
    conf = np.array([priors[n]['prior_confidence'] for n in names])
    cols = [f'{prefix}acc', f'{prefix}ned'] + [c for c in IMAGE_COLUMNS if all(c in a[n] and c in b[n] for n in names)]
    va = {c: _column(a, names, c) for c in cols}
    vb = {c: _column(b, names, c) for c in cols}
    rows = []
    for stratum, m in (('correct', prior_ok), ('wrong', ~prior_ok)):
        row = {'stratum': stratum, 'n': int(m.sum()), 'mean_confidence': _mean(conf, m)}
        for c in cols:
            name = c[len(prefix):] if c.startswith(prefix) else c
            row[f'{name}_a'], row[f'{name}_b'] = _mean(va[c], m), _mean(vb[c], m)
        rows.append(row)
    return rows


def prior_behaviour_table(records_by_method, names, gts, priors, prefix='t_', lower=False) -> List[Dict]:
    """Table S13: per method and prior stratum, counts of Exact GT, Copy (of a wrong prior) and Other."""
    prior_texts = [normalize(priors[n]['prior_text'], lower) for n in names]
    rows = []
    for method, records in records_by_method.items():
        preds = _texts(records, names, prefix, lower)
        for stratum in ('correct', 'wrong'):
            exact = copy = other = n = 0
            for pred, gt, prior in zip(preds, gts, prior_texts):
                if (prior == gt) != (stratum == 'correct'):
                    continue
                n += 1
                if pred == gt:
                    exact += 1
                elif stratum == 'wrong' and pred == prior:
                    copy += 1
                else:
                    other += 1
            rows.append({
                'method': method, 'stratum': stratum, 'n': n, 'exact_gt': exact,
                'copy': copy if stratum == 'wrong' else None, 'other': other
            })
    return rows


def diagnose(a: Mapping[str, Mapping], b: Mapping[str, Mapping], names: Sequence[str], labels: Mapping[str, str],
             priors: Optional[Mapping[str, Mapping]] = None, method_names=('A', 'B'), prefix: str = 't_',
             lower: bool = False, n_resamples: int = N_RESAMPLES, seed: int = 0) -> Dict:
    """All diagnostics of A (baseline) vs B (method) that the inputs allow.

    a, b: per-image rows {filename: {column: value}} (see records.PER_IMAGE_COLUMNS); names: the filenames
    (both must have all); labels: raw ground truth per filename; priors: {filename: {'prior_text',
    'prior_confidence'}} or None (then the confidence and prior tables are skipped).
    """
    gts = [normalize(labels[n], lower) for n in names]
    by_method = {method_names[0]: a, method_names[1]: b}
    has_text = all(f'{prefix}pred' in a[n] and f'{prefix}pred' in b[n] for n in names)
    out = {
        'methods': list(method_names), 'recognizer_prefix': prefix, 'lower': lower, 'n': len(names),
        'paired': paired_table(a, b, names, n_resamples, seed)
    }
    if has_text:
        out['categories'] = category_table(a, b, names, gts, prefix)
        out['edits'] = edit_table(by_method, names, gts, prefix, lower)
        if priors is not None:
            missing = [n for n in names if n not in priors]
            if missing:
                raise KeyError(f'prior CSV lacks {len(missing)} evaluated image(s), e.g. {missing[:5]}')
            out['confidence_bins'] = confidence_table(a, b, names, gts, priors, prefix, lower)
            out['prior_strata'] = prior_strata_table(a, b, names, gts, priors, prefix, lower)
            out['prior_behaviour'] = prior_behaviour_table(by_method, names, gts, priors, prefix, lower)
    return out


def _f(value, digits=4) -> str:
    if value is None:
        return '-'
    if isinstance(value, int):
        return f'{value:,}'
    return f'{value:.{digits}f}'


def _signed(value: float) -> str:
    return f'{value:+.4f}'


def diagnostics_markdown(result: Mapping) -> str:
    """Markdown tables of ``diagnose`` output, laid out as the supplement's tables."""
    a, b = result['methods']
    rec = {'t_': 'TransOCR', 'p_': 'PP-OCRv4'}.get(result['recognizer_prefix'], result['recognizer_prefix'])
    lines = [
        f'# Diagnostics: {b} vs {a} ({result["n"]:,} filename-paired images, recognizer {rec}'
        f'{", lower-cased" if result["lower"] else ""})', ''
    ]
    lines += [
        f'## Paired uncertainty ({b} - {a}, 95% paired bootstrap)', '',
        f'| Metric | {a} | {b} | Change | 95% CI | McNemar p |', '| --- | ---: | ---: | ---: | --- | ---: |'
    ]
    display = {key: name for key, name, _ in SUMMARY_METRICS}
    for r in result['paired']:
        p = r.get('mcnemar', {}).get('p_value')
        name = display.get(r['metric'], r['metric'])
        lines.append(f'| {name} | {_f(r["mean_a"])} | {_f(r["mean_b"])} | {_signed(r["change"])} | '
                     f'[{_signed(r["low"])}, {_signed(r["high"])}] | {"-" if p is None else f"{p:.4g}"} |')
    if 'confidence_bins' in result:
        lines += [
            '', '## By prior confidence', '', f'| Confidence | N | Prior ACC | {a} ACC | {b} ACC | {a} NED | '
            f'{b} NED |', '| --- | ---: | ---: | ---: | ---: | ---: | ---: |'
        ]
        for r in result['confidence_bins']:
            lines.append(f'| {r["bin"]} | {_f(r["n"])} | {_f(r["prior_acc"])} | {_f(r["acc_a"])} | {_f(r["acc_b"])} | '
                         f'{_f(r["ned_a"])} | {_f(r["ned_b"])} |')
    if 'categories' in result:
        lines += [
            '', '## By text category', '', f'| Category | N | {a} ACC | {b} ACC | {a} NED | {b} NED |',
            '| --- | ---: | ---: | ---: | ---: | ---: |'
        ]
        for r in result['categories']:
            lines.append(f'| {r["category"]} | {_f(r["n"])} | {_f(r["acc_a"])} | {_f(r["acc_b"])} | '
                         f'{_f(r["ned_a"])} | {_f(r["ned_b"])} |')
    if 'edits' in result:
        gt_chars = result['edits'][0]['gt_chars']
        lines += [
            '', f'## Character edits over {gt_chars:,} ground-truth characters', '',
            '| Method | Sub. | Del. | Ins. | Total | Edits/100 |', '| --- | ---: | ---: | ---: | ---: | ---: |'
        ]
        for r in result['edits']:
            lines.append(f'| {r["method"]} | {_f(r["substitutions"])} | {_f(r["deletions"])} | {_f(r["insertions"])} '
                         f'| {_f(r["total"])} | {_f(r["edits_per_100"], 2)} |')
    if 'prior_strata' in result:
        rows = result['prior_strata']
        keys = [k for k in rows[0] if k not in ('stratum', 'n', 'mean_confidence')]
        lines += [
            '', '## By prior correctness', '', '| Statistic | Correct prior | Wrong prior |', '| --- | ---: | ---: |',
            f'| N | {_f(rows[0]["n"])} | {_f(rows[1]["n"])} |',
            f'| Mean confidence | {_f(rows[0]["mean_confidence"])} | {_f(rows[1]["mean_confidence"])} |'
        ]
        for k in keys:
            metric, side = k.rsplit('_', 1)
            label = f'{a if side == "a" else b} {metric.upper()}'
            lines.append(f'| {label} | {_f(rows[0][k])} | {_f(rows[1][k])} |')
    if 'prior_behaviour' in result:
        lines += [
            '', '## Behaviour by prior correctness', '', '| Method | Prior | N | Exact GT | Copy | Other |',
            '| --- | --- | ---: | ---: | ---: | ---: |'
        ]
        for r in result['prior_behaviour']:
            copy = '--' if r['copy'] is None else _f(r['copy'])
            lines.append(f'| {r["method"]} | {r["stratum"]} | {_f(r["n"])} | {_f(r["exact_gt"])} | {copy} | '
                         f'{_f(r["other"])} |')
    return '\n'.join(lines) + '\n'


def load_method(eval_dir: str, summary: dict, method: str) -> Dict[str, Dict[str, object]]:
    """The per-image records of ``method`` in the evaluation folder ``eval_dir`` (its ``summary``). UsageError when
    the evaluation has no such method."""
    files = summary.get('per_image', {})
    if method not in files:
        raise UsageError(f'method {method!r} not in {os.path.join(eval_dir, "summary.json")} '
                         f'(has {sorted(files)})')
    return R.read_per_image_csv(os.path.join(eval_dir, files[method]))


def pick_recognizer(a: dict, b: dict) -> str:
    """The first recognizer (TransOCR, then PP-OCRv4) whose predictions both per-image tables have; TransOCR
    when neither has any (only the paired image-metric statistics are computed then)."""
    for name in ('transocr', 'ppocrv4'):
        column = f'{PREFIX[name]}pred'
        if all(column in row for rows in (a, b) for row in rows.values()):
            return name
    return 'transocr'


def case_handling(summary: dict, recognizer: str) -> bool:
    """Whether an evaluation lower-cased ``recognizer``'s texts (PP-OCRv4 by default, see tools/evaluate.py)."""
    protocol = summary['protocol']
    if recognizer == 'ppocrv4':
        return bool(protocol.get('ppocr_lower_case', protocol['lower_case']))
    return bool(protocol['lower_case'])


def diagnose_evaluations(eval_dir: str, baseline: str, method: str, out: str, eval_dir_baseline: Optional[str] = None,
                         prior_csv: Optional[str] = None, recognizer: Optional[str] = None,
                         resamples: int = N_RESAMPLES, seed: int = 0, plots: bool = False) -> str:
    """Diagnose ``method`` (B, from the tools/evaluate.py folder ``eval_dir``) against ``baseline`` (A, from
    ``eval_dir_baseline`` or the same folder): write ``out``/diagnostics.json and diagnostics.md (and with ``plots``
    the recognition-diagnostics figure); returns the markdown. ``prior_csv`` (the TOLA inference tool's per-image
    priors) enables the confidence bins and prior strata; ``recognizer`` defaults to ``pick_recognizer``.
    UsageError when the evaluations differ in case handling or labels."""
    summary_b = read_json(os.path.join(eval_dir, 'summary.json'), 'tools/evaluate.py summary')
    base_dir = eval_dir_baseline or eval_dir
    summary_a = read_json(os.path.join(base_dir, 'summary.json'), 'tools/evaluate.py summary')
    a = load_method(base_dir, summary_a, baseline)
    b = load_method(eval_dir, summary_b, method)
    recognizer = recognizer or pick_recognizer(a, b)
    lower = case_handling(summary_b, recognizer)
    if case_handling(summary_a, recognizer) != lower:
        raise UsageError('the two evaluations used different case handling (--lower / --ppocr-case-sensitive)')
    names = R.match_filenames({f'baseline {baseline!r}': list(a), f'method {method!r}': list(b)})
    labels = {}
    for n in names:
        if 'gt' in a[n] and 'gt' in b[n]:
            if a[n]['gt'] != b[n]['gt']:
                raise UsageError(f'{n}: the two evaluations have different labels')
            labels[n] = a[n]['gt']
    if len(labels) != len(names):
        labels = {n: '' for n in names}  # image metrics only: no recognition diagnostics
    priors = read_prior_csv(prior_csv) if prior_csv else None
    result = diagnose(a, b, names, labels, priors, (baseline, method), PREFIX[recognizer], lower, resamples, seed)
    os.makedirs(out, exist_ok=True)
    write_json(os.path.join(out, 'diagnostics.json'), result)
    text = diagnostics_markdown(result)
    write_text(os.path.join(out, 'diagnostics.md'), text)
    if plots:
        recognition_diagnostics_figure(result, os.path.join(out, 'recognition_diagnostics'))
    return text
