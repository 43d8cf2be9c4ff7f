"""PairedTextDataset: folder and LMDB modes, exact-name matching, optional HR, errors."""
import cv2
import numpy as np
import pytest
import torch

from basicsr.data import build_dataset

import tola_plugin  # noqa: F401  (registers the datasets)
from tola_plugin.data.fudanvi_lmdb import write_fudanvi_lmdb
from tola_plugin.text.alphabets import TRANSOCR_END, decode_transocr

PAIRS = {'a_01.png': 'hello', 'b_02.png': 'World', 'c_03.jpg': '数字123'}


def _img(w, h, value):
    img = np.full((h, w, 3), value, np.uint8)
    cv2.rectangle(img, (w // 4, h // 4), (w // 2, 3 * h // 4), (0, 0, 0), -1)
    return img


@pytest.fixture
def folders(tmp_path):
    lq, gt = tmp_path / 'lq', tmp_path / 'gt'
    lq.mkdir()
    gt.mkdir()
    for name in PAIRS:
        cv2.imwrite(str(lq / name), _img(128, 32, 200))
        cv2.imwrite(str(gt / name), _img(512, 128, 220))
    labels = tmp_path / 'labels.tsv'
    labels.write_text(''.join(f'{n}\t{t}\n' for n, t in PAIRS.items()), encoding='utf-8')
    return lq, gt, labels


def _opt(**kw):
    return {'type': 'PairedTextDataset', 'name': 'test', 'phase': 'val', 'io_backend': {'type': 'disk'}, **kw}


def test_folder_pairs_item_contract(folders):
    lq, gt, labels = folders
    ds = build_dataset(_opt(dataroot_lq=str(lq), dataroot_gt=str(gt), labels=str(labels)))
    assert len(ds) == 3
    item = ds[1]
    assert set(item) == {'lq', 'gt', 'lq_path', 'gt_path', 'text', 'idm_tokens', 'ocr_target'}
    for key in ('lq', 'gt'):
        assert item[key].shape == (3, 128, 512) and item[key].dtype == torch.float32
        assert 0 <= item[key].min() and item[key].max() <= 1
    assert item['lq_path'].endswith('lq/b_02.png') and item['gt_path'].endswith('gt/b_02.png')
    assert item['text'] == 'World'
    assert decode_transocr(item['ocr_target'].tolist()) == 'world'
    assert ds[2]['ocr_target'][5] == TRANSOCR_END and (ds[2]['ocr_target'][6:] == -100).all()


def test_native_lr_for_xs_networks(folders):
    """lq_size: native: the LR at 128/s x 512/s for BasicSR's x s networks (a 32x128 file passes unchanged), the HR
    on the canvas; without the option file's scale it is an error."""
    lq, gt, labels = folders
    ds = build_dataset(_opt(dataroot_lq=str(lq), dataroot_gt=str(gt), labels=str(labels), lq_size='native', scale=4))
    item = ds[0]
    assert item['lq'].shape == (3, 32, 128) and item['gt'].shape == (3, 128, 512)
    file_rgb = cv2.imread(str(lq / 'a_01.png'))[:, :, ::-1].astype(np.float32) / 255.0
    assert torch.equal(item['lq'], torch.from_numpy(np.ascontiguousarray(file_rgb.transpose(2, 0, 1))))
    assert build_dataset(_opt(dataroot_lq=str(lq), labels=str(labels), lq_size='native',
                              scale=2))[0]['lq'].shape == (3, 64, 256)
    with pytest.raises(ValueError, match="needs the option file's scale"):
        build_dataset(_opt(dataroot_lq=str(lq), labels=str(labels), lq_size='native'))
    with pytest.raises(ValueError, match='expected 256x64'):
        build_dataset(_opt(dataroot_lq=str(lq), labels=str(labels), lq_size='native', scale=2,
                           resize_to_canvas=False))[0]


def test_hr_is_optional(folders):
    lq, _, labels = folders
    item = build_dataset(_opt(dataroot_lq=str(lq), labels=str(labels)))[0]
    assert 'gt' not in item and 'gt_path' not in item and item['lq'].shape == (3, 128, 512)


def test_missing_and_unlisted_names_are_listed(folders):
    lq, gt, labels = folders
    (gt / 'c_03.jpg').unlink()
    with pytest.raises(FileNotFoundError, match=r"1 file\(s\).*missing from .*gt.*c_03.jpg"):
        build_dataset(_opt(dataroot_lq=str(lq), dataroot_gt=str(gt), labels=str(labels)))
    cv2.imwrite(str(lq / 'zz_extra.png'), _img(64, 16, 100))
    with pytest.raises(ValueError, match=r"1 image\(s\) in .*lq are not in .*zz_extra.png"):
        build_dataset(_opt(dataroot_lq=str(lq), labels=str(labels)))
    ds = build_dataset(_opt(dataroot_lq=str(lq), labels=str(labels), allow_unlisted_files=True))
    assert len(ds) == 3


def test_size_mismatch_without_resize_is_an_error(folders):
    lq, gt, labels = folders
    ds = build_dataset(_opt(dataroot_lq=str(lq), dataroot_gt=str(gt), labels=str(labels), resize_to_canvas=False))
    with pytest.raises(ValueError, match='a_01.png: size 128x32, expected 512x128'):
        ds[0]


def test_bad_labels_file(tmp_path, folders):
    lq, _, _ = folders
    bad = tmp_path / 'bad.tsv'
    bad.write_text('a_01.png hello\n', encoding='utf-8')
    with pytest.raises(ValueError, match=r'bad.tsv:1: expected "filename<TAB>transcription"'):
        build_dataset(_opt(dataroot_lq=str(lq), labels=str(bad)))
    bad.write_text('a_01.png\t \n', encoding='utf-8')
    with pytest.raises(ValueError, match=r"bad.tsv:1: empty label for 'a_01.png'"):
        build_dataset(_opt(dataroot_lq=str(lq), labels=str(bad)))
    bad.write_text('a_01.png\tx\na_01.png\ty\n', encoding='utf-8')
    with pytest.raises(ValueError, match='repeats line 1'):
        build_dataset(_opt(dataroot_lq=str(lq), labels=str(bad)))


def test_lmdb_pairs(tmp_path):
    enc = [cv2.imencode('.png', _img(512, 128, v))[1].tobytes() for v in (90, 120)]
    lq_root, gt_root = str(tmp_path / 'lq.lmdb'), str(tmp_path / 'gt.lmdb')
    write_fudanvi_lmdb(lq_root, [(enc[0], 'one'), (enc[0], 'two')])
    write_fudanvi_lmdb(gt_root, [(enc[1], 'one'), (enc[1], 'two')])
    ds = build_dataset(_opt(dataroot_lq=lq_root, dataroot_gt=gt_root, io_backend={'type': 'lmdb'}))
    item = ds[1]
    assert item['lq_path'] == item['gt_path'] == 'image-000000002' and item['text'] == 'two'
    assert not torch.equal(item['lq'], item['gt'])
    other = str(tmp_path / 'other.lmdb')
    write_fudanvi_lmdb(other, [(enc[1], 'one'), (enc[1], 'three')])
    with pytest.raises(ValueError, match='1 label.*differ.*image-000000002'):
        build_dataset(_opt(dataroot_lq=lq_root, dataroot_gt=other, io_backend={'type': 'lmdb'}))
