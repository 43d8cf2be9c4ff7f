"""The RT50 admission protocol (paper supp. "RT50 Construction") and the assembly of the fixed set
(tools/screen_rt50.py).

Candidates (a TSV naming ``filename`` and ``label``, optionally ``source`` and ``difficulty``) are screened in file
order: label category and length, image size, aspect and the quality statistics of the 512x128 canonical gray image
(``image_checks``); a transcription already admitted is rejected, and so is an image within the dHash Hamming
distance of an admitted one. Admitted candidates in file order then fill the category (and difficulty) quotas.
"""
import csv
import io
import os
import sys
from typing import Dict, List, Mapping, Sequence, Tuple

from tola_plugin.commands.data_preparation.image_checks import (failed_quality_rules, hamming, image_stats,
                                                                label_category, sha256_file, write_tsv)
from tola_plugin.data.image_io import read_image_file, write_image
from tola_plugin.data.text_line_source import canvas_rgb8
from tola_plugin.text.normalize import normalize_text
from tola_plugin.utils.atomic_files import read_text_file
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.user_text import say

STAT_KEYS = ['width', 'height', 'aspect', 'gray_mean', 'gray_std', 'laplacian_var', 'edge_density', 'entropy']
DIFFICULTIES = ('mild', 'medium', 'hard')


def read_candidates(path: str) -> List[Dict[str, str]]:
    """The rows of the candidates TSV (labels stripped). UsageError when a column is missing, no row is listed or a
    difficulty is not one of ``DIFFICULTIES``."""
    reader = csv.DictReader(io.StringIO(read_text_file(path, 'candidates TSV'), newline=''), delimiter='\t')
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


def screen(rows: List[Dict], images: str, lengths: Mapping[str, Tuple[int, int]], thresholds: Mapping,
           dhash_distance: int) -> List[Dict]:
    """Annotate each candidate row in place with statistics, category, status and reasons; returns the admitted
    rows in order (each holding its image, BGR uint8, in ``_image``). ``lengths``: label length range per
    category; ``thresholds``: the quality bounds of ``image_checks.failed_quality_rules``."""
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
            near = [r['filename'] for r, h in admitted if hamming(h, stats['dhash']) <= dhash_distance]
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


def select(admitted: Sequence[Dict], composition: Mapping[str, int], difficulty: Mapping[str, int],
           use_difficulty: bool) -> List[Dict]:
    """The first admitted rows that fill the ``composition`` quotas (and the ``difficulty`` quotas when
    ``use_difficulty``). UsageError naming what is still missing."""
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


def build_rt50(images: str, candidates: str, out: str, composition: Mapping[str, int], difficulty: Mapping[str, int],
               lengths: Mapping[str, Tuple[int, int]], thresholds: Mapping, dhash_distance: int,
               screen_only: bool = False) -> int:
    """Screen the candidates of ``candidates`` (images in ``images``) into ``out``/screening.tsv, then (unless
    ``screen_only``) select the set: images/RTxxx.png on the 512x128 canvas, labels.tsv, manifest.tsv. Difficulty
    quotas apply when every row has a difficulty. Prints what it did; -> 0. UsageError for a missing folder, a
    non-empty ``out`` or unfilled quotas."""
    if not os.path.isdir(images):
        raise UsageError(f'--images {images} is not a folder')
    if os.path.isdir(out) and os.listdir(out):
        raise UsageError(f'--out {out} is not empty')
    rows = read_candidates(candidates)
    use_difficulty = all(r.get('difficulty') for r in rows)
    admitted = screen(rows, images, lengths, thresholds, dhash_distance)
    os.makedirs(out, exist_ok=True)
    extra = [c for c in ('source', 'difficulty') if c in rows[0]]
    write_tsv(
        os.path.join(out, 'screening.tsv'),
        ['filename', 'label', 'category'] + extra + STAT_KEYS + ['dhash', 'sha256_source', 'status', 'reasons'], rows)
    say(f'{len(rows)} candidates, {len(admitted)} admitted', sys.stdout)
    if screen_only:
        return 0
    chosen = select(admitted, composition, difficulty, use_difficulty)
    os.makedirs(os.path.join(out, 'images'))
    width = max(3, len(str(len(chosen))))
    for n, row in enumerate(chosen, start=1):
        row['id'] = f'RT{n:0{width}d}'
        row['file'] = row['id'] + '.png'
        out_path = os.path.join(out, 'images', row['file'])
        write_image(out_path, canvas_rgb8(row.pop('_image')), order='RGB')
        row['sha256'] = sha256_file(out_path)
    with open(os.path.join(out, 'labels.tsv'), 'w', encoding='utf-8') as f:
        f.writelines(f'{r["file"]}\t{r["label"]}\n' for r in chosen)
    write_tsv(
        os.path.join(out, 'manifest.tsv'), ['id', 'file', 'label', 'category', 'difficulty', 'source', 'filename'] +
        STAT_KEYS + ['dhash', 'sha256_source', 'sha256'], chosen)
    say(f'wrote {len(chosen)} images to {os.path.join(out, "images")}', sys.stdout)
    return 0
