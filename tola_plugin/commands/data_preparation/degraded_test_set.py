"""Held-out HR text lines -> a fixed degraded test set in CTR-TSR-Test's layout: hr/, lr_x<s>/, labels.tsv
(tools/make_test_set.py, docs/own_data.md).

Each line goes through TOLA's training degradation (``TextDegradationDataset``: Real-ESRGAN or BSRGAN at x<s>, a
fixed seed), so the test pairs are of the kind every method was trained on. ``hr/`` holds the 512x128 canvases,
``lr_x<s>/`` the LR lines at 512/s x 128/s, both PNG, named after the LMDB key (``image-000000012.png``) or the
image file. ``sources.tsv`` maps each name back to where the line came from: the LMDB index and the file it was made
from (the LMDB's ``filenames.tsv``, written by tola-make-lmdb; empty for an LMDB without one), or the image file.
"""
import os
import sys
from typing import Dict, Optional

from tola_plugin.data.image_io import tensor_to_uint8, write_image
from tola_plugin.data.text_degradation_dataset import TextDegradationDataset
from tola_plugin.data.text_labels import TOOL_SKIP_HINT, InvalidLabelsError
from tola_plugin.utils.atomic_files import read_text_file, write_text
from tola_plugin.utils.cli_errors import UsageError
from tola_plugin.utils.user_text import say

SOURCES = 'sources.tsv'  # test-set name -> LMDB index and original file


def write_test_set(out: str, lmdb: Optional[str] = None, images: Optional[str] = None, labels: Optional[str] = None,
                   index_list: Optional[str] = None, scale: int = 4, seed: int = 1,
                   skip_invalid_labels: bool = False) -> int:
    """Degrade the HR lines of the LMDB ``lmdb`` or of the folder ``images`` (with its labels TSV ``labels``),
    those of ``index_list`` (0-based; default all), at x``scale`` with ``seed``, into ``out``/hr, lr_x<scale> and
    labels.tsv (written last: it marks a complete set). Invalid labels (text_labels) are an error, or left out with
    ``skip_invalid_labels``. Prints one line; -> 0. UsageError when ``out`` already holds a test set or two sources
    would get the same file name."""
    if os.path.exists(os.path.join(out, 'labels.tsv')):
        raise UsageError(f'{out} already holds a test set (labels.tsv); remove it or choose another --out')
    try:
        dataset = TextDegradationDataset({
            'name': 'test_set', 'phase': 'test', 'dataroot_gt': lmdb or images, 'labels': labels,
            'index_list': index_list, 'io_backend': {'type': 'lmdb' if lmdb else 'disk'}, 'seed': seed,
            'scales': [scale], 'lq_size': 'native', 'skip_invalid_labels': skip_invalid_labels
        })
    except InvalidLabelsError as err:  # the tool's flag, not the dataset option, drops them here
        raise err.with_hint(TOOL_SKIP_HINT) from None
    hr_dir, lr_dir = os.path.join(out, 'hr'), os.path.join(out, f'lr_x{scale}')
    os.makedirs(hr_dir, exist_ok=True)
    os.makedirs(lr_dir, exist_ok=True)
    files = lmdb_filenames(lmdb) if lmdb else {}
    rows, sources, seen = [], [], {}
    for index in range(len(dataset)):
        item = dataset[index]
        name = os.path.splitext(os.path.basename(item['gt_path']))[0] + '.png'
        if name in seen:
            raise UsageError(f'{item["gt_path"]} and {seen[name]} would both be written as {name}; rename one')
        seen[name] = item['gt_path']
        for folder, image in ((hr_dir, item['gt']), (lr_dir, item['lq'])):  # RGB in [0, 1] on 8-bit levels
            write_image(os.path.join(folder, name), tensor_to_uint8(image), order='RGB')
        rows.append(f'{name}\t{item["text"]}\n')
        if lmdb:
            key = int(item['gt_path'].rsplit('-', 1)[1])
            sources.append({'name': name, 'lmdb_index': key - 1, 'source': files.get(key, '')})
        else:
            sources.append({'name': name, 'lmdb_index': '', 'source': os.path.relpath(item['gt_path'], images)})
    write_text(
        os.path.join(out, SOURCES),
        'name\tlmdb_index\tsource\n' + ''.join(f'{r["name"]}\t{r["lmdb_index"]}\t{r["source"]}\n' for r in sources))
    with open(os.path.join(out, 'labels.tsv'), 'w', encoding='utf-8') as f:  # last: marks a complete set
        f.writelines(rows)
    mapped = '' if not lmdb or files else f' ({lmdb} has no filenames.tsv: {SOURCES} names the LMDB indices only)'
    say(
        f'wrote {len(rows)} test pairs (x{scale}, seed {seed}) to {out}; {SOURCES} maps each name to its source'
        f'{mapped}', sys.stdout)
    return 0


def lmdb_filenames(lmdb: str) -> Dict[int, str]:
    """{LMDB key index (1-based): the file it was made from} of tola-make-lmdb's ``filenames.tsv`` ({} without
    one)."""
    path = os.path.join(lmdb, 'filenames.tsv')
    if not os.path.isfile(path):
        return {}
    header, *lines = read_text_file(path, 'LMDB file list').splitlines()
    if header != 'index\tfilename':
        raise ValueError(f'{path}: expected the header "index<TAB>filename" (tola-make-lmdb writes it), got {header!r}')
    return {int(index): name for index, name in (line.split('\t', 1) for line in lines if line)}
