"""tools/ and their modules in tola_plugin/data: make_lmdb round trip, 98/2 split, RT50 screening thresholds,
RealCE-200 and RT50 builds."""
import importlib
import os

import cv2
import numpy as np
import pytest

from basicsr.data import build_dataset

import tola_plugin  # noqa: F401
from tola_plugin.commands.data_preparation import rt50_screening
from tola_plugin.commands.data_preparation.dataset_split import split_indices
from tola_plugin.commands.data_preparation.image_checks import (RT50_THRESHOLDS, dhash, failed_quality_rules,
                                                                gray_entropy, hamming, image_stats, label_category)
from tola_plugin.data.fudanvi_lmdb import shared_lmdb_env
from tola_plugin.data.text_line_source import LmdbLineSource
from tola_plugin.utils.cli_errors import UsageError


def _tool(name):
    """The command line ``tola-<name>`` (tola_cli/<name>.py; tools/<name>.py is its alias in a clone)."""
    return importlib.import_module(f'tola_cli.{name}')


def _text_image(text, w=512, h=128, seed=0, bg=185, fg=95, noise=4.0):
    img = np.full((h, w, 3), bg, np.uint8)
    cv2.putText(img, text, (8, int(h * 0.72)), cv2.FONT_HERSHEY_SIMPLEX, h / 48, (fg, fg, fg), max(1, h // 24))
    rng = np.random.default_rng(seed)
    return np.clip(img + rng.normal(0, noise, img.shape), 0, 255).astype(np.uint8)


# ----------------------------------------------------------------------------------------- make_lmdb / split
def test_make_lmdb_round_trip(tmp_path):
    images = tmp_path / 'imgs'
    images.mkdir()
    rows = [('b.png', 'second'), ('a.jpg', '第一'), ('c.png', 'x y')]
    originals = {}
    for name, _ in rows:
        ok, buf = cv2.imencode(os.path.splitext(name)[1], _text_image(name, 200, 50))
        (images / name).write_bytes(buf.tobytes())
        originals[name] = buf.tobytes()
    (tmp_path / 'labels.tsv').write_text(''.join(f'{n}\t{t}\n' for n, t in rows), encoding='utf-8')
    out = str(tmp_path / 'db.lmdb')
    tool = _tool('make_lmdb')
    assert tool.main(['--images', str(images), '--labels', str(tmp_path / 'labels.tsv'), '--out', out]) == 0
    src = LmdbLineSource(out)
    assert src.labels == [t for _, t in rows] and src.key(0) == 'image-000000001'
    with shared_lmdb_env(out).begin() as txn:
        assert txn.get(b'image-000000002') == originals['a.jpg'] and txn.get(b'num-samples') == b'3'
    assert (tmp_path / 'db.lmdb' / 'filenames.tsv').read_text(encoding='utf-8').splitlines()[1] == '1\tb.png'
    with pytest.raises(UsageError, match='already holds an LMDB'):
        tool.main(['--images', str(images), '--labels', str(tmp_path / 'labels.tsv'), '--out', out])
    (images / 'a.jpg').write_bytes(b'garbage')
    with pytest.raises(ValueError, match='a.jpg: not a decodable image'):
        tool.main(['--images', str(images), '--labels', str(tmp_path / 'labels.tsv'), '--out', str(tmp_path / 'x')])
    # the failed write leaves nothing behind, so the rerun after fixing the file is accepted
    assert not (tmp_path / 'x').exists()
    (images / 'a.jpg').write_bytes(originals['a.jpg'])
    assert tool.main(['--images',
                      str(images), '--labels',
                      str(tmp_path / 'labels.tsv'), '--out',
                      str(tmp_path / 'x')]) == 0


def test_one_label_rule_from_the_first_tool_on(tmp_path, capsys):
    """docs/data.md, "Labels": a phrase with spaces passes every tool (whitespace is removed for the recognizers);
    an invalid label stops tola-make-lmdb, the first tool, naming the labels file's line and the flag that drops it;
    with --skip-invalid-labels (make_lmdb, make_test_set) such lines are left out with a warning."""
    images = tmp_path / 'imgs'
    images.mkdir()
    rows = [('a.png', 'Hello World'), ('b.png', 'ok'), ('c.png', 'snow\u2603man'), ('d.png', 'z' * 25)]
    for name, _ in rows:
        ok, buf = cv2.imencode('.png', _text_image(name, 200, 50))
        (images / name).write_bytes(buf.tobytes())
    labels = tmp_path / 'labels.tsv'
    labels.write_text('\n'.join(f'{n}\t{t}' for n, t in rows[:2]) + '\n\n' + '\n'.join(f'{n}\t{t}'
                                                                                       for n, t in rows[2:]),
                      encoding='utf-8')  # a blank line: the line numbers are the file's
    tool = _tool('make_lmdb')
    with pytest.raises(ValueError) as err:
        tool.main(['--images', str(images), '--labels', str(labels), '--out', str(tmp_path / 'no.lmdb')])
    assert str(err.value).startswith(f'2 invalid label(s) in {labels} (add --skip-invalid-labels to drop them)')
    assert f'{labels}:4 (c.png): character' in str(err.value) and 'U+2603' in str(err.value)
    assert f'{labels}:5 (d.png): label' in str(err.value) and not (tmp_path / 'no.lmdb').exists()
    out = str(tmp_path / 'ok.lmdb')
    assert tool.main(['--images', str(images), '--labels', str(labels), '--out', out, '--skip-invalid-labels']) == 0
    assert 'warning: ' in capsys.readouterr().err and LmdbLineSource(out).labels == ['Hello World', 'ok']
    test_set = tmp_path / 'test'
    assert _tool('make_test_set').main(['--lmdb', out, '--out', str(test_set)]) == 0
    assert (test_set / 'labels.tsv').read_text(encoding='utf-8').splitlines()[0].endswith('\tHello World')
    # a folder with the invalid ones: make_test_set names its own flag (not the dataset option)
    with pytest.raises(ValueError, match=r'invalid label.*add --skip-invalid-labels to drop them'):
        _tool('make_test_set').main(['--images', str(images), '--labels', str(labels), '--out', str(tmp_path / 't2')])
    assert _tool('make_test_set').main(
        ['--images',
         str(images), '--labels',
         str(labels), '--out',
         str(tmp_path / 't3'), '--skip-invalid-labels']) == 0
    assert len((tmp_path / 't3' / 'labels.tsv').read_text(encoding='utf-8').splitlines()) == 2


def test_make_test_set_maps_each_name_back_to_its_source(tmp_path, capsys):
    """tola-make-test-set names an LMDB's lines by key (image-%09d.png); sources.tsv maps each name to its LMDB
    index (the 0-based index of the index lists) and the file tola-make-lmdb made it from; from a folder, to the
    file."""
    images = tmp_path / 'imgs'
    images.mkdir()
    rows = [('first.png', 'one'), ('second.jpg', 'two'), ('third.png', 'three')]
    for name, _ in rows:
        ok, buf = cv2.imencode(os.path.splitext(name)[1], _text_image(name, 200, 50))
        (images / name).write_bytes(buf.tobytes())
    labels = tmp_path / 'labels.tsv'
    labels.write_text(''.join(f'{n}\t{t}\n' for n, t in rows), encoding='utf-8')
    lmdb = str(tmp_path / 'db.lmdb')
    assert _tool('make_lmdb').main(['--images', str(images), '--labels', str(labels), '--out', lmdb]) == 0
    (tmp_path / 'held_out.txt').write_text('2\n1\n', encoding='utf-8')
    test_set = tmp_path / 'test'
    assert _tool('make_test_set').main(
        ['--lmdb', lmdb, '--index-list',
         str(tmp_path / 'held_out.txt'), '--out',
         str(test_set)]) == 0
    assert 'sources.tsv maps each name to its source' in capsys.readouterr().out
    mapping = (test_set / 'sources.tsv').read_text(encoding='utf-8').splitlines()
    assert mapping[0] == 'name\tlmdb_index\tsource'
    assert sorted(mapping[1:]) == ['image-000000002.png\t1\tsecond.jpg', 'image-000000003.png\t2\tthird.png']
    names = [line.split('\t')[0] for line in (test_set / 'labels.tsv').read_text(encoding='utf-8').splitlines()]
    assert sorted(names) == sorted(line.split('\t')[0] for line in mapping[1:])
    assert _tool('make_test_set').main(
        ['--images', str(images), '--labels',
         str(labels), '--out', str(tmp_path / 'from_folder')]) == 0
    assert (tmp_path / 'from_folder' / 'sources.tsv').read_text(encoding='utf-8').splitlines()[1:] == [
        'first.png\t\tfirst.png', 'second.png\t\tsecond.jpg', 'third.png\t\tthird.png'
    ]


def test_split_matches_paper_counts_and_is_deterministic(tmp_path):
    tool = _tool('split_dataset')
    train, val = split_indices(list(range(63644)))
    assert (len(train), len(val)) == (62371, 1273)  # paper: 62,371 / 1,273
    assert set(train).isdisjoint(val) and sorted(train + val) == list(range(63644))
    assert split_indices(list(range(63644))) == (train, val)
    assert split_indices(list(range(63644)), seed=1)[1] != val
    assert len(split_indices(list(range(63644)), method='stride')[1]) == 1273
    out = tmp_path / 'split'
    assert tool.main(['--num', '100', '--out-dir', str(out)]) == 0
    lines = (out / 'val_index.txt').read_text().split()
    assert len(lines) == 2 and len((out / 'train_index.txt').read_text().split()) == 98


# ----------------------------------------------------------------------------------------- screening rules
def _flat(value, w=512, h=128):
    return np.full((h, w, 3), value, np.uint8)


def _two_levels(a, b):
    img = _flat(a)
    img[:, 256:] = b
    return img


@pytest.mark.parametrize('img,rule,ok', [
    (_flat(20), 'gray_mean', True),
    (_flat(19), 'gray_mean', False),
    (_flat(235), 'gray_mean', True),
    (_flat(236), 'gray_mean', False),
    (_two_levels(100, 120), 'gray_std', True),
    (_two_levels(100, 119), 'gray_std', False),
    (_two_levels(40, 200), 'gray_std', True),
    (_two_levels(39, 201), 'gray_std', False),
    (_flat(128, 24, 8), 'size', True),
    (_flat(128, 23, 8), 'size', False),
    (_flat(128, 28, 7), 'size', False),
    (_flat(128, 24, 12), 'aspect', True),
    (_flat(128, 25, 13), 'aspect', False),
    (_flat(128, 80, 8), 'aspect', True),
    (_flat(128, 81, 8), 'aspect', False),
])
def test_image_rules_at_thresholds(img, rule, ok):
    assert (rule not in failed_quality_rules(image_stats(img))) == ok


def test_entropy_rule_at_threshold():
    levels8 = np.repeat(np.arange(8, dtype=np.uint8) * 30, 512 * 128 // 8).reshape(128, 512)
    levels7 = np.repeat(np.arange(7, dtype=np.uint8) * 30, 512 * 128 // 7 + 1)[:512 * 128].reshape(128, 512)
    assert gray_entropy(levels8) == 3.0 and gray_entropy(levels7) < 3.0
    assert 'entropy' not in failed_quality_rules(image_stats(np.dstack([levels8] * 3)))
    assert 'entropy' in failed_quality_rules(image_stats(np.dstack([levels7] * 3)))


@pytest.mark.parametrize('name,lo,hi', [('laplacian_var', 2.0, 1200.0), ('edge_density', 0.01, 0.65),
                                        ('gray_mean', 20.0, 235.0), ('gray_std', 10.0, 80.0), ('aspect', 2.0, 10.0)])
def test_range_rules_are_inclusive(name, lo, hi):
    base = {
        'width': 100, 'height': 20, 'aspect': 5.0, 'gray_mean': 100.0, 'gray_std': 30.0, 'laplacian_var': 100.0,
        'edge_density': 0.1, 'entropy': 4.0
    }
    assert failed_quality_rules(base) == []
    assert (RT50_THRESHOLDS[name]) == (lo, hi)
    for value, ok in ((lo, True), (hi, True), (np.nextafter(lo, -np.inf), False), (np.nextafter(hi, np.inf), False)):
        assert (failed_quality_rules(dict(base, **{name: value})) == []) == ok
    assert failed_quality_rules(dict(base, entropy=3.0)) == [] and failed_quality_rules(dict(base, entropy=2.999))


@pytest.mark.parametrize('label,category', [('测试', 'chinese'), ('测', None), ('一二三四五六七八', 'chinese'),
                                            ('一二三四五六七八九', None), ('abc', 'english'), ('ab', None),
                                            ('ABCDEFGHIJKL', 'english'), ('ABCDEFGHIJKLM', None), ('12', 'numeric'),
                                            ('1', None), ('123456', 'numeric'), ('1234567', None), ('ab12', None),
                                            ('测a', None)])
def test_label_rules(label, category):
    assert label_category(label) == category


def test_dhash_and_hamming():
    img = cv2.cvtColor(_text_image('HASH'), cv2.COLOR_BGR2GRAY)
    assert dhash(img) == dhash(img.copy()) and hamming(dhash(img), dhash(255 - img)) > 32
    assert hamming(0b1011, 0b0001) == 2


# ----------------------------------------------------------------------------------------- RT50
def _rt50_inputs(tmp_path):
    images = tmp_path / 'cands'
    images.mkdir()
    rows = [
        ('c1.png', '文字', 'mild'),
        ('e1.png', 'Hello', 'medium'),
        ('n1.png', '2026', 'hard'),
        ('e2.png', 'hello', 'mild'),  # repeated transcription (case-insensitive)
        ('e3.png', 'World', 'hard'),  # near duplicate (patched hash)
        ('x1.png', 'ab', 'hard'),  # label too short for English
        ('f1.png', 'Flat', 'mild'),
        ('e4.png', 'Again', 'hard')
    ]
    for i, (name, label, _) in enumerate(rows):
        drawn = label if label.isascii() else 'Zhong Wen'  # cv2 has no CJK glyphs; the label is what counts
        img = _flat(200, 300, 60) if name == 'f1.png' else _text_image(drawn, 300, 60, i)
        cv2.imwrite(str(images / name), img)
    tsv = tmp_path / 'cands.tsv'
    tsv.write_text('filename\tlabel\tsource\tdifficulty\n' + ''.join(f'{n}\t{l}\tweb\t{d}\n' for n, l, d in rows),
                   encoding='utf-8')
    return images, tsv


def test_screen_rt50_end_to_end(tmp_path, monkeypatch):
    tool = _tool('screen_rt50')
    real_stats = rt50_screening.image_stats
    # dHash per candidate in file order: c1, e1, n1, e2, e3 (7 bits from c1), x1, f1, e4 (>= 8 bits from all)
    hashes, calls = [0, 0xFF00, 0xFF0000, 0x1, 0x7F, 0x3, 0x5, 0xFF << 40], []

    def stats_with_controlled_hash(img):
        calls.append(1)
        return dict(real_stats(img), dhash=hashes[(len(calls) - 1) % len(hashes)])

    monkeypatch.setattr(rt50_screening, 'image_stats', stats_with_controlled_hash)
    images, tsv = _rt50_inputs(tmp_path)
    out = tmp_path / 'rt'
    args = [
        '--images',
        str(images), '--candidates',
        str(tsv), '--out',
        str(out), '--composition', 'chinese=1,english=2,numeric=1', '--difficulty', 'mild=1,medium=1,hard=2'
    ]
    assert tool.main(args) == 0
    lines = (out / 'screening.tsv').read_text(encoding='utf-8').splitlines()
    header = lines[0].split('\t')
    rows = {r.split('\t')[0]: dict(zip(header, r.split('\t'))) for r in lines[1:]}
    assert {n for n, r in rows.items() if r['status'] == 'admitted'} == {'c1.png', 'e1.png', 'n1.png', 'e4.png'}
    assert rows['e2.png']['reasons'] == 'repeated_transcription_of:e1.png'
    # e3's hash 0x7F is 7 bits from c1's: rejected; n1 and e4 are exactly 8 bits from c1: admitted
    assert rows['e3.png']['reasons'].startswith('near_duplicate_of:')
    assert rows['x1.png']['reasons'].startswith('label') and 'gray_std' in rows['f1.png']['reasons']
    assert rows['c1.png']['category'] == 'chinese' and float(rows['c1.png']['entropy']) >= 3.0
    manifest = (out / 'manifest.tsv').read_text(encoding='utf-8').splitlines()
    assert [m.split('\t')[0] for m in manifest[1:]] == ['RT001', 'RT002', 'RT003', 'RT004']
    assert cv2.imread(str(out / 'images' / 'RT001.png')).shape == (128, 512, 3)
    ds = build_dataset({
        'type': 'PairedTextDataset', 'phase': 'val', 'name': 'rt', 'io_backend': {'type': 'disk'},
        'dataroot_lq': str(out / 'images'), 'labels': str(out / 'labels.tsv')
    })
    assert len(ds) == 4 and 'gt' not in ds[0]
    with pytest.raises(UsageError, match='still missing'):
        tool.main(args[:5] + [str(tmp_path / 'rt2'), '--composition', 'chinese=2,english=2,numeric=1'])


def test_rt50_and_realce200_defaults_are_the_papers():
    """Paper supp.: RT50 = 17 Chinese, 17 English, 16 numeric; 10 mild, 20 medium, 20 hard. RealCE-200 = 200 pairs
    from the 13 mm (LR) and 52 mm (reference) images of the validation split."""
    rt50 = _tool('screen_rt50').parse_args(['--images', 'i', '--candidates', 'c', '--out', 'o'])
    assert rt50.composition == {'chinese': 17, 'english': 17, 'numeric': 16}
    assert rt50.difficulty == {'mild': 10, 'medium': 20, 'hard': 20}
    assert (rt50.chinese_len, rt50.english_len, rt50.numeric_len) == ([2, 8], [3, 12], [2, 6])
    assert (rt50.min_width, rt50.min_height, rt50.dhash_distance) == (24, 8, 7)
    realce = _tool('build_realce200').parse_args(['--root', 'r', '--out', 'o'])
    assert (realce.count, realce.split, realce.lr_focal, realce.ref_focal) == (200, 'val', '13mm', '52mm')


# ----------------------------------------------------------------------------------------- RealCE-200
def _realce_layout(tmp_path):
    root = tmp_path / 'RealCE'
    for sub in ('13mm', '52mm', 'annos'):
        (root / 'val' / sub).mkdir(parents=True)
    lines = {
        'img1': [
            '10,10,210,10,210,60,10,60,文字识别',
            '10,80,60,80,60,90,10,90,tiny',  # box too small
            '220,10,260,10,260,110,220,110,tall',  # aspect < 1
            '10,120,300,120,300,170,10,170,###',  # illegible
            '250,200,470,200,470,250,250,250,hello world'
        ],
        'img2': [
            '20,20,260,20,260,70,20,70,文字识别',  # duplicate transcription
            '20,100,300,100,300,150,20,150,Test,Line',
            '20,180,300,180,300,230,20,230,flat'
        ],
    }
    for stem, anns in lines.items():
        hr = np.full((300, 500, 3), 190, np.uint8)
        for k, ann in enumerate(anns):
            x = [int(v) for v in ann.split(',')[:8]]
            if not ann.endswith('flat'):
                cv2.putText(hr, 'Ab12' * 3, (x[0] + 2, x[5] - 8), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (60 + 10 * k, ) * 3, 2)
        hr = np.clip(hr + np.random.default_rng(len(stem)).normal(0, 3, hr.shape), 0, 255).astype(np.uint8)
        cv2.imwrite(str(root / 'val' / '52mm' / f'{stem}.jpg'), hr)
        cv2.imwrite(str(root / 'val' / '13mm' / f'{stem}.jpg'), cv2.GaussianBlur(hr, (7, 7), 2))
        (root / 'val' / 'annos' / f'{stem}.txt').write_bytes('\n'.join(anns).encode('gbk'))
    return root


def test_build_realce200_end_to_end(tmp_path):
    tool = _tool('build_realce200')
    root = _realce_layout(tmp_path)
    out = tmp_path / 'r200'
    assert tool.main(['--root', str(root), '--out', str(out), '--count', '3']) == 0
    cands = (out / 'candidates.tsv').read_text(encoding='utf-8').splitlines()
    header = cands[0].split('\t')
    rows = [dict(zip(header, line.split('\t'))) for line in cands[1:]]
    reason = {(r['source'], r['line']): r['reason'] for r in rows}
    assert reason[('img1.jpg', '2')] == 'box_size' and reason[('img1.jpg', '3')] == 'aspect'
    assert reason[('img1.jpg', '4')] == 'transcription' and reason[('img2.jpg', '3')] == 'sharpness'
    assert reason[('img2.jpg', '1')] == 'duplicate_text_of:img1.jpg#1'
    labels = (out / 'labels.tsv').read_text(encoding='utf-8').splitlines()
    assert labels == ['R001.png\t文字识别', 'R002.png\thelloworld', 'R003.png\tTest,Line']
    manifest = (out / 'manifest.tsv').read_text(encoding='utf-8').splitlines()
    head = manifest[0].split('\t')
    first = dict(zip(head, manifest[1].split('\t')))
    assert first['lr_source'] == 'val/13mm/img1.jpg' and first['ref_source'] == 'val/52mm/img1.jpg'
    assert (first['x0'], first['y0'], first['x1'], first['y1']) == ('10', '10', '210', '60')
    from tola_plugin.commands.data_preparation.image_checks import sha256_file
    assert first['sha256_lr'] == sha256_file(str(out / 'lr' / 'R001.png'))
    ds = build_dataset({
        'type': 'PairedTextDataset', 'phase': 'val', 'name': 'r', 'io_backend': {'type': 'disk'},
        'dataroot_lq': str(out / 'lr'), 'dataroot_gt': str(out / 'hr'), 'labels': str(out / 'labels.tsv')
    })
    assert len(ds) == 3 and ds[0]['gt'].shape == (3, 128, 512)
    again = tmp_path / 'again'
    assert tool.main(['--root', str(root), '--out', str(again), '--count', '3']) == 0
    assert (again / 'manifest.tsv').read_bytes() == (out / 'manifest.tsv').read_bytes()
    lax = tmp_path / 'lax'
    assert tool.main(['--root', str(root), '--out', str(lax), '--count', '3', '--min-ref-sharpness', '0']) == 0
    assert '\tcontrast\t' in (lax / 'candidates.tsv').read_text(encoding='utf-8')
    with pytest.raises(UsageError, match='only 3 candidates'):
        tool.main(['--root', str(root), '--out', str(tmp_path / 'x'), '--count', '4'])
