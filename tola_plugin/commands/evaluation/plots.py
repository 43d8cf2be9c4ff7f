"""Figures of the paper, written as PNG and PDF (matplotlib, no display needed: ``Figure`` objects, Agg).

- ``quality_latency_figure``: (a) PSNR and (b) TransOCR ACC (when given) against seconds per image (log scale).
- ``recognition_diagnostics_figure``: (a) ACC across prior-confidence bins, (b) ACC across text categories,
  (c) character edit counts, for a baseline and a method (output of ``diagnostics.diagnose``).
- ``comparison_grid``: rows = LR, methods, HR; columns = samples; row labels on the left, optional column
  titles (e.g. the ground-truth text).
- ``plot_quality_latency``, ``plot_recognition_diagnostics``, ``plot_comparison_grid``: the same figures from the
  files of the tools (tools/plot_results.py: latency CSV, tools/benchmark_inference.py's JSON, tools/evaluate.py's
  summaries, tools/diagnose.py's diagnostics.json, image folders and a labels manifest).
Chinese text in labels is drawn with a CJK font found on the system when there is one.
"""
import csv
import io
import os
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from tola_plugin.commands.evaluation.records import read_labels
from tola_plugin.data.image_io import read_image_file, write_figure
from tola_plugin.utils.atomic_files import read_json, read_text_file
from tola_plugin.utils.cli_errors import UsageError

CJK_FONTS = ('Noto Sans CJK SC', 'WenQuanYi Zen Hei', 'WenQuanYi Micro Hei', 'AR PL UMing CN', 'Droid Sans Fallback')
COLORS = ('#8c8c8c', '#d62728', '#1f77b4', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#bcbd22')


def _rc() -> dict:
    """Font fallback: DejaVu for Latin, then the first installed CJK font."""
    import logging

    from matplotlib import font_manager

    # WenQuanYi ships only a 'medium' weight; matplotlib logs a harmless warning for each lookup.
    logging.getLogger('matplotlib.font_manager').setLevel(logging.ERROR)
    installed = {f.name for f in font_manager.fontManager.ttflist}
    family = ['DejaVu Sans'] + [f for f in CJK_FONTS if f in installed]
    return {
        'font.family': family, 'font.size': 9, 'axes.titlesize': 10, 'pdf.fonttype': 42, 'axes.spines.top': False,
        'axes.spines.right': False
    }


def _save(fig, out_stem: str, dpi: int = 200) -> Tuple[str, str]:
    paths = (f'{out_stem}.png', f'{out_stem}.pdf')
    write_figure(paths[0], fig, dpi=dpi, bbox_inches='tight')
    write_figure(paths[1], fig, bbox_inches='tight')
    return paths


def quality_latency_figure(points: Sequence[Mapping], out_stem: str, highlight: Optional[str] = None,
                           acc_key: str = 't_acc') -> Tuple[str, str]:
    """points: dicts with 'method', 'seconds' (per image), 'psnr' and optionally ``acc_key``; writes
    out_stem.{png,pdf}: (a) PSNR and, when the points carry ``acc_key``, (b) TransOCR ACC against latency."""
    import matplotlib
    from matplotlib.figure import Figure
    if not points:
        raise ValueError('quality_latency_figure: no points')
    with_acc = [p for p in points if p.get(acc_key) is not None]
    if with_acc and len(with_acc) != len(points):
        lacking = [p.get('method') for p in points if p.get(acc_key) is None]
        raise ValueError(f'quality_latency_figure: {lacking} lack {acc_key} (give it for every method or none)')
    for p in points:
        missing = [k for k in ('method', 'seconds', 'psnr') if p.get(k) is None]
        if missing:
            raise ValueError(f'quality_latency_figure: point {p.get("method")!r} lacks {missing}')
        if p['seconds'] <= 0:
            raise ValueError(f'quality_latency_figure: {p["method"]!r} has non-positive seconds {p["seconds"]}')
    panels = [('psnr', 'PSNR (dB)')
              ] + ([(acc_key, 'TransOCR ACC' if acc_key == 't_acc' else acc_key)] if with_acc else [])
    with matplotlib.rc_context(_rc()):
        fig = Figure(figsize=(4.5 * len(panels), 3.4))
        axes = np.atleast_1d(fig.subplots(1, len(panels)))
        for ax, (key, label), tag in zip(axes, panels, ('(a)', '(b)')):
            for i, p in enumerate(points):
                hl = p['method'] == highlight
                ax.scatter(p['seconds'], p[key], s=80 if hl else 40, marker='*' if hl else 'o',
                           color=COLORS[1] if hl else COLORS[(i % (len(COLORS) - 2)) + 2], zorder=3, edgecolors='black',
                           linewidths=0.5)
                ax.annotate(p['method'], (p['seconds'], p[key]), textcoords='offset points', xytext=(4, 4), fontsize=8,
                            fontweight='bold' if hl else 'normal')
            ax.set_xscale('log')
            ax.set_xlabel('Inference time (s / image, log scale)')
            ax.set_ylabel(label)
            ax.set_title(f'{tag} {label.split(" (")[0]} vs. latency')
            ax.grid(True, which='both', alpha=0.3, linewidth=0.5)
        fig.tight_layout()
        return _save(fig, out_stem)


def _grouped_bars(ax, labels: Sequence[str], series: Mapping[str, Sequence[Optional[float]]], ylabel: str, title: str,
                  value_fmt: str = '{:.2f}') -> None:
    x = np.arange(len(labels))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        vals = [np.nan if v is None else v for v in values]
        bars = ax.bar(x + (i - (len(series) - 1) / 2) * width, vals, width, label=name, color=COLORS[i % len(COLORS)],
                      edgecolor='black', linewidth=0.4)
        for bar, v in zip(bars, vals):
            if not np.isnan(v):
                ax.annotate(
                    value_fmt.format(v), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    textcoords='offset points', xytext=(0, 1.5), ha='center', fontsize=6.5)
    top = np.nanmax([np.nan if v is None else v for vals in series.values() for v in vals] + [0.0])
    ax.set_ylim(0, (top if top > 0 else 1.0) * 1.22)  # head room for the value labels and the legend
    ax.set_xticks(x)
    ax.set_xticklabels(labels)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, frameon=False, loc='upper center', ncol=len(series))
    ax.grid(True, axis='y', alpha=0.3, linewidth=0.5)


def recognition_diagnostics_figure(result: Mapping, out_stem: str) -> Tuple[str, str]:
    """Three panels from ``diagnostics.diagnose`` output; writes out_stem.{png,pdf}."""
    import matplotlib
    from matplotlib.figure import Figure
    a, b = result['methods']
    with matplotlib.rc_context(_rc()):
        fig = Figure(figsize=(11, 3.3))
        axes = fig.subplots(1, 3)
        if 'confidence_bins' in result:
            rows = result['confidence_bins']
            _grouped_bars(axes[0], [f'{r["bin"]}\nN={r["n"]:,}' for r in rows],
                          {a: [r['acc_a'] for r in rows], b: [r['acc_b'] for r in rows]}, 'ACC',
                          '(a) ACC by prior confidence')
        else:
            axes[0].text(0.5, 0.5, 'no prior confidences\n(pass --prior-csv)', ha='center', va='center')
            axes[0].set_title('(a) ACC by prior confidence')
            axes[0].set_axis_off()
        if 'categories' in result:
            rows = result['categories']
            _grouped_bars(axes[1], [f'{r["category"]}\nN={r["n"]:,}' for r in rows],
                          {a: [r['acc_a'] for r in rows], b: [r['acc_b'] for r in rows]}, 'ACC',
                          '(b) ACC by text category')
        if 'edits' in result:
            rows = result['edits']
            _grouped_bars(axes[2], ['Substitutions', 'Deletions', 'Insertions'],
                          {r['method']: [r['substitutions'], r['deletions'], r['insertions']]
                           for r in rows}, 'Count', f'(c) Character edits ({rows[0]["gt_chars"]:,} GT chars)',
                          '{:,.0f}')
            from matplotlib.ticker import MaxNLocator
            axes[2].yaxis.set_major_locator(MaxNLocator(integer=True))
        fig.tight_layout()
        return _save(fig, out_stem)


def comparison_grid(rows: Sequence[Tuple[str, Sequence[np.ndarray]]], out_stem: str,
                    column_titles: Optional[Sequence[str]] = None, cell_width: float = 2.4,
                    captions: Optional[Sequence[Sequence[str]]] = None, dpi: int = 200) -> Tuple[str, str]:
    """rows: (label, images) with images as HxWx3 uint8 RGB, the same number per row (one per column).

    Each cell keeps its image's aspect ratio (128x512 text lines -> wide cells). ``captions``: optional text
    under each cell (one list per row, e.g. what a recognizer read). Writes out_stem.{png,pdf} (PNG at ``dpi``).
    """
    import matplotlib
    from matplotlib.figure import Figure
    if not rows:
        raise ValueError('comparison_grid: no rows')
    n_cols = len(rows[0][1])
    if n_cols == 0 or any(len(imgs) != n_cols for _, imgs in rows):
        raise ValueError(f'comparison_grid: every row needs the same non-zero number of images, got '
                         f'{[len(imgs) for _, imgs in rows]}')
    if column_titles is not None and len(column_titles) != n_cols:
        raise ValueError(f'comparison_grid: {len(column_titles)} column titles for {n_cols} columns')
    if captions is not None and (len(captions) != len(rows) or any(len(c) != n_cols for c in captions)):
        raise ValueError(f'comparison_grid: captions must give {len(rows)} rows of {n_cols} strings')
    caption_room = 0.22 if captions is not None else 0.0
    aspect = max(img.shape[0] / img.shape[1] for _, imgs in rows for img in imgs)
    with matplotlib.rc_context(_rc()):
        fig = Figure(
            figsize=(1.2 + cell_width * n_cols, 0.35 + len(rows) * (cell_width * aspect + 0.12 + caption_room)))
        axes = np.atleast_2d(fig.subplots(len(rows), n_cols, squeeze=False))
        for r, (label, imgs) in enumerate(rows):
            for c, img in enumerate(imgs):
                ax = axes[r, c]
                ax.imshow(img, interpolation='nearest')
                ax.set_xticks([])
                ax.set_yticks([])
                for spine in ax.spines.values():
                    spine.set_visible(False)
                if c == 0:
                    ax.set_ylabel(label, rotation=0, ha='right', va='center', fontsize=9, labelpad=6)
                if r == 0 and column_titles is not None:
                    ax.set_title(column_titles[c], fontsize=9)
                if captions is not None:
                    ax.set_xlabel(captions[r][c], fontsize=8, labelpad=2)
        fig.subplots_adjust(wspace=0.04, hspace=0.08 + (0.35 if captions is not None else 0.0))
        return _save(fig, out_stem, dpi)


def load_grid_rows(row_dirs: Sequence[Tuple[str, str]], samples: Sequence[str]) -> List[Tuple[str, List[np.ndarray]]]:
    """[(label, folder)] x sample file names -> rows of RGB images; a missing file is an error naming it."""
    return [(label, [read_image_file(os.path.join(folder, name), order='RGB') for name in samples])
            for label, folder in row_dirs]


def latency_points(latency: Mapping[str, float], summaries: Sequence[Mapping[str, Mapping[str, float]]],
                   acc_key: str = 't_acc') -> List[Dict]:
    """Join seconds per image {method: s} with evaluate.py summaries ({method: {metric: value}})."""
    merged: Dict[str, Dict[str, float]] = {}
    for summary in summaries:
        for method, values in summary.items():
            merged.setdefault(method, {}).update(values)
    points = []
    for method, seconds in latency.items():
        if method not in merged:
            raise KeyError(f'latency given for {method!r}, but no evaluation summary has it (have {sorted(merged)})')
        points.append({
            'method': method, 'seconds': seconds, 'psnr': merged[method].get('psnr'),
            acc_key: merged[method].get(acc_key)
        })
    return points


def read_latency_csv(path: str) -> Tuple[Dict[str, float], Dict[str, Dict[str, float]]]:
    """CSV with columns method, seconds_per_image (optionally psnr, t_acc) -> ({method: s}, {method: metrics}).
    UsageError when a required column is missing."""
    latency, metrics = {}, {}
    reader = csv.DictReader(io.StringIO(read_text_file(path, 'latency CSV'), newline=''))
    if not {'method', 'seconds_per_image'} <= set(reader.fieldnames or []):
        raise UsageError(f'{path} needs columns method, seconds_per_image (got {reader.fieldnames})')
    for row in reader:
        latency[row['method']] = float(row['seconds_per_image'])
        metrics[row['method']] = {k: float(row[k]) for k in ('psnr', 't_acc') if row.get(k)}
    return latency, metrics


def read_benchmark_json(path: str, method: str, route: str = 'auto', batch: int = 1) -> Tuple[Dict[str, float], Dict]:
    """tools/benchmark_inference.py's JSON -> ({method: seconds per image of ``route`` at ``batch``}, {}).
    ValueError when it has no such timing ('auto' was 'default' in files before issue 50)."""
    timings = read_json(path, 'benchmark_inference.py JSON').get('timings', {})
    key = f'{route} batch {batch}'
    key = f'default batch {batch}' if route == 'auto' and key not in timings else key
    if key not in timings:
        raise ValueError(f'{path}: no timing {key!r} (have {sorted(timings)}); is it a benchmark_inference.py JSON?')
    return {method: float(timings[key]['per_image_s'])}, {}


def plot_quality_latency(out_stem: str, latency_csv: Optional[str] = None, benchmark_json: Optional[str] = None,
                         benchmark_method: str = 'TOLA', benchmark_route: str = 'auto',
                         summary_paths: Sequence[str] = (), highlight: Optional[str] = None) -> Tuple[str, str]:
    """``quality_latency_figure`` from files: seconds per image from ``latency_csv`` and/or ``benchmark_json``
    (its batch-1 ``benchmark_route`` as ``benchmark_method``), PSNR/ACC from tools/evaluate.py's summary.json files
    ``summary_paths`` (the CSV's own psnr/t_acc columns win). ValueError when neither latency source is given."""
    if not latency_csv and not benchmark_json:
        raise ValueError('latency: give --latency CSV and/or --benchmark JSON')
    latency, own = read_latency_csv(latency_csv) if latency_csv else ({}, {})
    if benchmark_json:
        latency.update(read_benchmark_json(benchmark_json, benchmark_method, benchmark_route)[0])
    summaries = [own]
    for path in summary_paths:
        summaries.insert(0, read_json(path, 'tools/evaluate.py summary')['summary'])  # the CSV's own columns win
    return quality_latency_figure(latency_points(latency, summaries), out_stem, highlight)


def plot_recognition_diagnostics(diagnostics_json: str, out_stem: str) -> Tuple[str, str]:
    """``recognition_diagnostics_figure`` of tools/diagnose.py's diagnostics.json."""
    return recognition_diagnostics_figure(read_json(diagnostics_json, 'tools/diagnose.py JSON'), out_stem)


def plot_comparison_grid(row_dirs: Sequence[Tuple[str, str]], samples: Sequence[str], out_stem: str,
                         labels_path: Optional[str] = None) -> Tuple[str, str]:
    """``comparison_grid`` of the files ``samples`` in each (label, folder) of ``row_dirs``, column titles from the
    labels manifest ``labels_path``. UsageError when it has no label for a sample."""
    titles = None
    if labels_path:
        labels = read_labels(labels_path)
        missing = [s for s in samples if s not in labels]
        if missing:
            raise UsageError(f'{labels_path} has no label for {missing}')
        titles = [labels[s] for s in samples]
    return comparison_grid(load_grid_rows(row_dirs, samples), out_stem, titles)
