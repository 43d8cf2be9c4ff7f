#!/usr/bin/env python
"""Screen real text images with the RT50 admission protocol (paper supp. "RT50 Construction") and
assemble the fixed set.

Candidates: --candidates TSV with a header naming at least ``filename`` and ``label`` (optional
``source``, ``difficulty`` = mild/medium/hard, assigned by the curator), images in --images. In file
order each candidate must pass: label = 2-8 Chinese characters, 3-12 English letters or 2-6 digits
(category from the label); size >= 24x8; aspect 2-10; on the 512x128 canonical gray image gray mean
in [20,235], gray std in [10,80], Laplacian variance in [2,1200], edge density in [0.01,0.65],
entropy >= 3.0; a transcription already admitted is rejected, and so is an image within dHash
Hamming distance 7 of an admitted one. All bounds are inclusive and are CLI options.

Selection: admitted candidates in file order fill the --composition quotas (and --difficulty quotas
when the column exists); IDs RT001.. follow that order. Outputs in --out: screening.tsv (every
candidate, every statistic, decision), images/RTxxx.png on the 512x128 canvas, labels.tsv (for
PairedTextDataset), manifest.tsv (ID, label, category, difficulty, source, statistics, dHash,
SHA-256 of source and canvas file). --screen-only stops after screening.tsv.

Example:
    python tools/screen_rt50.py --images raw/ --candidates raw/candidates.tsv --out data/RT50
"""
import argparse
import csv
import os

from tola_plugin.data.image_checks import (RT50_LABEL_LENGTHS, RT50_THRESHOLDS, failed_quality_rules, hamming,
                                           image_stats, label_category, sha256_file, write_png, write_tsv)
from tola_plugin.data.image_io import read_image_file
from tola_plugin.data.text_line_source import canvas_rgb8
from tola_plugin.text.normalize import normalize_text
from tola_plugin.utils.cli_errors import UsageError, run_tool

STAT_KEYS = ['width', 'height', 'aspect', 'gray_mean', 'gray_std', 'laplacian_var', 'edge_density', 'entropy']
DIFFICULTIES = ('mild', 'medium', 'hard')


def _quota(text: str, allowed):
    quota = {}
    for part in text.split(','):
        name, _, value = part.partition('=')
        if name not in allowed or not value.isdigit():
            raise argparse.ArgumentTypeError(f'expected name=count with names from {list(allowed)}, got {part!r}')
        quota[name] = int(value)
    return quota


def parse_args(argv=None):
    t = RT50_THRESHOLDS
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--images', required=True, help='folder of candidate images')
    p.add_argument('--candidates', required=True, help='TSV with header: filename, label[, source, difficulty]')
    p.add_argument('--out', required=True, help='output folder (must be empty or absent)')
    p.add_argument('--screen-only', action='store_true', help='write screening.tsv only, select nothing')
    p.add_argument('--composition', type=lambda s: _quota(s, RT50_LABEL_LENGTHS),
                   default={'chinese': 17, 'english': 17, 'numeric': 16}, help='[chinese=17,english=17,numeric=16]')
    p.add_argument('--difficulty', type=lambda s: _quota(s, DIFFICULTIES),
                   default={'mild': 10, 'medium': 20, 'hard': 20},
                   help='quotas used when the difficulty column exists [mild=10,medium=20,hard=20]')
    for category, (lo, hi) in RT50_LABEL_LENGTHS.items():
        p.add_argument(f'--{category}-len', type=int, nargs=2, default=[lo, hi], metavar=('LO', 'HI'),
                       help=f'{category} label length range, inclusive [{lo} {hi}]')
    p.add_argument('--min-width', type=int, default=t['min_width'])
    p.add_argument('--min-height', type=int, default=t['min_height'])
    for name in ('aspect', 'gray_mean', 'gray_std', 'laplacian_var', 'edge_density'):
        p.add_argument('--' + name.replace('_', '-'), type=float, nargs=2, default=list(t[name]), metavar=('LO', 'HI'),
                       help=f'inclusive range [{t[name][0]} {t[name][1]}]')
    p.add_argument('--min-entropy', type=float, default=t['min_entropy'], help=f'[{t["min_entropy"]}]')
    p.add_argument('--dhash-distance', type=int, default=t['dhash_distance'],
                   help=f'near duplicate when Hamming distance <= this [{t["dhash_distance"]}]')
    return p.parse_args(argv)


def read_candidates(path: str):
    with open(path, encoding='utf-8', newline='') as f:
        reader = csv.DictReader(f, delimiter='\t')
        missing = {'filename', 'label'} - set(reader.fieldnames or [])
        if missing:
            raise UsageError(f'{path} header lacks column(s) {sorted(missing)}; got {reader.fieldnames}')
        rows = [dict(r) for r in reader]
    if not rows:
        raise UsageError(f'{path} lists no candidates')
    for n, r in enumerate(rows, start=2):
        r['label'] = (r['label'] or '').strip()
        if r.get('difficulty') and r['difficulty'] not in DIFFICULTIES:
            raise UsageError(f'{path}:{n}: difficulty must be one of {DIFFICULTIES}, got {r["difficulty"]!r}')
    return rows


def screen(rows, images: str, args):
    """Annotate each candidate row in place with statistics, category, status and reasons."""
    lengths = {
        'chinese': tuple(args.chinese_len), 'english': tuple(args.english_len), 'numeric': tuple(args.numeric_len)
    }
    thresholds = {
        'min_width': args.min_width, 'min_height': args.min_height, 'aspect': tuple(args.aspect),
        'gray_mean': tuple(args.gray_mean), 'gray_std': tuple(args.gray_std),
        'laplacian_var': tuple(args.laplacian_var), 'edge_density': tuple(args.edge_density),
        'min_entropy': args.min_entropy
    }
    seen_labels, admitted = {}, []
    for row in rows:
        path = os.path.join(images, row['filename'])
        img = read_image_file(path)
        stats = image_stats(img)
        row.update({k: stats[k] for k in STAT_KEYS})
        row['dhash'] = f'{stats["dhash"]:016x}'
        row['sha256_source'] = sha256_file(path)
        row['category'] = label_category(row['label'], lengths) or ''
        reasons = [] if row['category'] else ['label']
        reasons += failed_quality_rules(stats, thresholds)
        if not reasons:
            key = normalize_text(row['label'], lower=True)
            near = [r['filename'] for r, h in admitted if hamming(h, stats['dhash']) <= args.dhash_distance]
            if key in seen_labels:
                reasons.append(f'repeated_transcription_of:{seen_labels[key]}')
            elif near:
                reasons.append(f'near_duplicate_of:{near[0]}')
            else:
                seen_labels[key] = row['filename']
                admitted.append((row, stats['dhash']))
                row['_image'] = img
        row['status'] = 'rejected' if reasons else 'admitted'
        row['reasons'] = ';'.join(reasons)
    return [r for r, _ in admitted]


def select(admitted, composition: dict, difficulty: dict, use_difficulty: bool):
    need_cat, need_diff, chosen = dict(composition), dict(difficulty), []
    for row in admitted:
        cat, diff = row['category'], row.get('difficulty')
        if need_cat.get(cat, 0) <= 0 or (use_difficulty and need_diff.get(diff, 0) <= 0):
            continue
        need_cat[cat] -= 1
        if use_difficulty:
            need_diff[diff] -= 1
        chosen.append(row)
    short = {k: v for k, v in need_cat.items() if v > 0}
    if use_difficulty:
        short.update({k: v for k, v in need_diff.items() if v > 0})
    if short:
        raise UsageError(f'not enough admitted candidates; still missing {short} '
                         f'(see screening.tsv for the reasons)')
    return chosen


def main(argv=None) -> int:
    args = parse_args(argv)
    if not os.path.isdir(args.images):
        raise UsageError(f'--images {args.images} is not a folder')
    if os.path.isdir(args.out) and os.listdir(args.out):
        raise UsageError(f'--out {args.out} is not empty')
    rows = read_candidates(args.candidates)
    use_difficulty = all(r.get('difficulty') for r in rows)
    admitted = screen(rows, args.images, args)
    os.makedirs(args.out, exist_ok=True)
    extra = [c for c in ('source', 'difficulty') if c in rows[0]]
    write_tsv(
        os.path.join(args.out, 'screening.tsv'),
        ['filename', 'label', 'category'] + extra + STAT_KEYS + ['dhash', 'sha256_source', 'status', 'reasons'], rows)
    print(f'{len(rows)} candidates, {len(admitted)} admitted')
    if args.screen_only:
        return 0
    chosen = select(admitted, args.composition, args.difficulty, use_difficulty)
    os.makedirs(os.path.join(args.out, 'images'))
    width = max(3, len(str(len(chosen))))
    for n, row in enumerate(chosen, start=1):
        row['id'] = f'RT{n:0{width}d}'
        row['file'] = row['id'] + '.png'
        out_path = os.path.join(args.out, 'images', row['file'])
        write_png(out_path, canvas_rgb8(row.pop('_image')))
        row['sha256'] = sha256_file(out_path)
    with open(os.path.join(args.out, 'labels.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(f'{r["file"]}\t{r["label"]}\n' for r in chosen)
    write_tsv(
        os.path.join(args.out,
                     'manifest.tsv'), ['id', 'file', 'label', 'category', 'difficulty', 'source', 'filename'] +
        STAT_KEYS + ['dhash', 'sha256_source', 'sha256'], chosen)
    print(f'wrote {len(chosen)} images to {os.path.join(args.out, "images")}')
    return 0


if __name__ == '__main__':
    run_tool(main)
