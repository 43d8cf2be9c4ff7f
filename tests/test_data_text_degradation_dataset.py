"""TextDegradationDataset: item contract, chain/scale rates, reproducibility, errors."""
import os

import cv2
import lmdb
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from basicsr.data import build_dataset
from basicsr.data.data_sampler import EnlargedSampler

import tola_plugin  # noqa: F401  (registers the datasets)
from tola_plugin.data.fudanvi_lmdb import write_fudanvi_lmdb
from tola_plugin.data.text_degradation_dataset import DegradationError, TextDegradationDataset
from tola_plugin.data.text_labels import TextLabelError, text_targets
from tola_plugin.text.alphabets import IDM_PAD, TRANSOCR_END, decode_idm, decode_transocr

LABELS = ['Hello', 'world42', 'TOLA', 'abc', 'xyz7', 'Test', 'line', 'Ok99']


def _png(text, width=None):
    img = np.full((48, width or 30 + 26 * len(text), 3), 250, np.uint8)
    cv2.putText(img, text, (6, 36), cv2.FONT_HERSHEY_SIMPLEX, 1.0, (10, 10, 10), 2)
    return cv2.imencode('.png', img)[1].tobytes()


@pytest.fixture(scope='module')
def lmdb_root(tmp_path_factory):
    root = str(tmp_path_factory.mktemp('hr') / 'hr.lmdb')
    write_fudanvi_lmdb(root, [(_png(t), t) for t in LABELS])
    return root


def _opt(root, **extra):
    opt = {
        'type': 'TextDegradationDataset', 'name': 'train', 'phase': 'train', 'dataroot_gt': root,
        'io_backend': {'type': 'lmdb'}, 'seed': 0
    }
    opt.update(extra)
    return opt


def test_item_contract(lmdb_root):
    ds = build_dataset(_opt(lmdb_root))
    assert isinstance(ds, TextDegradationDataset) and len(ds) == len(LABELS)
    item = ds[1]
    assert set(item) == {'lq', 'gt', 'lq_path', 'gt_path', 'text', 'idm_tokens', 'ocr_target'}
    for key in ('lq', 'gt'):
        assert item[key].shape == (3, 128, 512) and item[key].dtype == torch.float32
        assert 0.0 <= item[key].min() and item[key].max() <= 1.0
    assert item['lq_path'] == item['gt_path'] == 'image-000000002'
    assert item['text'] == 'world42'
    assert item['idm_tokens'].shape == (24, ) and item['idm_tokens'].dtype == torch.int64
    assert decode_idm(item['idm_tokens'].tolist()) == 'world42' and item['idm_tokens'][7] == IDM_PAD
    ocr = item['ocr_target']
    assert ocr.shape == (25, ) and ocr.dtype == torch.int64
    assert ocr[7] == TRANSOCR_END and (ocr[8:] == -100).all()
    assert decode_transocr(ocr[:8].tolist()) == 'world42'
    # upper case: IDM keeps DiffTSR's lower-cased text, OCR target is lower-cased too
    assert decode_idm(ds[0]['idm_tokens'].tolist()) == 'hello' and ds[0]['text'] == 'Hello'
    assert not torch.equal(item['lq'], item['gt'])  # never HR as LR


def test_chain_and_scale_rates(lmdb_root):
    ds = build_dataset(_opt(lmdb_root, chain_probs={'realesrgan': 0.3, 'bsrgan': 0.7}, scale_probs=[0.2, 0.3, 0.5]))
    n = 4000
    plans = [ds.plan(i) for i in range(n)]
    chains = np.array([p[0] == 'realesrgan' for p in plans])
    scales = np.array([p[1] for p in plans])
    interps = np.array([p[2] for p in plans])
    tol = 4 * np.sqrt(0.25 / n)  # 4 sigma
    assert abs(chains.mean() - 0.3) < tol
    for s, p in ((1, 0.2), (2, 0.3), (4, 0.5)):
        assert abs((scales == s).mean() - p) < tol
    for interp in (cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_LANCZOS4):
        assert abs((interps == interp).mean() - 1 / 3) < tol
    default = build_dataset(_opt(lmdb_root))
    plans = [default.plan(i) for i in range(n)]
    assert abs(np.mean([p[0] == 'bsrgan' for p in plans]) - 0.5) < tol
    assert all(abs(np.mean([p[1] == s for p in plans]) - 1 / 3) < tol for s in (1, 2, 4))


def test_plan_matches_what_getitem_uses(lmdb_root):
    ds = build_dataset(_opt(lmdb_root))
    real, used = dict(ds.chains), []

    def spy(name):

        def call(img, scale, rng):
            used.append((name, scale))
            return real[name](img, scale, rng)

        return call

    ds.chains = {name: spy(name) for name in real}
    for i in range(6):
        ds[i]
    assert used == [ds.plan(i)[:2] for i in range(6)]


def _collect(ds, workers):
    loader = DataLoader(ds, batch_size=2, num_workers=workers, shuffle=False)
    return torch.cat([b['lq'] for b in loader])


def test_same_seed_same_pairs_across_workers(lmdb_root):
    a = _collect(build_dataset(_opt(lmdb_root, seed=5)), 0)
    b = _collect(build_dataset(_opt(lmdb_root, seed=5)), 2)
    assert torch.equal(a, b)
    c = _collect(build_dataset(_opt(lmdb_root, seed=6)), 0)
    assert all(not torch.equal(a[i], c[i]) for i in range(len(a)))


def test_epoch_changes_pairs_and_sampler_forwards_it(lmdb_root):
    ds = build_dataset(_opt(lmdb_root))
    first = ds[3]['lq']
    sampler = EnlargedSampler(ds, num_replicas=1, rank=0)
    sampler.set_epoch(4)
    assert ds.epoch == 4
    assert not torch.equal(first, ds[3]['lq'])
    ds.set_epoch(0)
    assert torch.equal(first, ds[3]['lq'])


def test_folder_source_with_index_list(tmp_path):
    names = []
    for i, text in enumerate(LABELS[:4]):
        name = f'img_{i}.png'
        (tmp_path / name).write_bytes(_png(text))
        names.append(name)
    (tmp_path / 'labels.tsv').write_text(''.join(f'{n}\t{t}\n' for n, t in zip(names, LABELS)), encoding='utf-8')
    (tmp_path / 'index.txt').write_text('3\n1\n', encoding='utf-8')
    ds = build_dataset(
        _opt(
            str(tmp_path), io_backend={'type': 'disk'}, labels=str(tmp_path / 'labels.tsv'),
            index_list=str(tmp_path / 'index.txt')))
    assert len(ds) == 2
    assert [ds[i]['text'] for i in range(2)] == ['abc', 'world42']
    assert os.path.basename(ds[0]['lq_path']) == 'img_3.png'


def test_index_list_is_zero_based_plus_one_for_lmdb(lmdb_root, tmp_path):
    (tmp_path / 'index.txt').write_text('0\n7\n', encoding='utf-8')
    ds = build_dataset(_opt(lmdb_root, index_list=str(tmp_path / 'index.txt')))
    assert [ds[i]['lq_path'] for i in range(2)] == ['image-000000001', 'image-000000008']
    (tmp_path / 'bad.txt').write_text('8\n', encoding='utf-8')
    with pytest.raises(ValueError, match=r'index 8 outside \[0, 8\)'):
        build_dataset(_opt(lmdb_root, index_list=str(tmp_path / 'bad.txt')))


def _raw_lmdb(path, entries):
    """An LMDB with exactly ``entries`` (bypassing the writer's own checks)."""
    env = lmdb.open(path, map_size=1 << 24)
    with env.begin(write=True) as txn:
        for key, value in entries.items():
            txn.put(key, value)
    env.close()
    return path


def test_corrupt_image_missing_key_and_empty_label(tmp_path):
    good = {b'image-000000001': _png('good'), b'label-000000001': b'good'}
    root = _raw_lmdb(
        str(tmp_path / 'corrupt'),
        {**good, b'image-000000002': b'not an image', b'label-000000002': b'broken', b'num-samples': b'2'})
    ds = build_dataset(_opt(root))
    with pytest.raises(ValueError, match='image-000000002: not a decodable image'):
        ds[1]
    root = _raw_lmdb(str(tmp_path / 'no_label'), {**good, b'image-000000002': _png('x'), b'num-samples': b'2'})
    with pytest.raises(KeyError, match='missing key label-000000002'):
        build_dataset(_opt(root))
    root = _raw_lmdb(str(tmp_path / 'no_image'), {**good, b'label-000000002': b'x', b'num-samples': b'2'})
    ds = build_dataset(_opt(root))
    with pytest.raises(KeyError, match='missing key image-000000002'):
        ds[1]
    root = _raw_lmdb(
        str(tmp_path / 'empty'), {**good, b'image-000000002': _png('x'), b'label-000000002': b'', b'num-samples': b'2'})
    with pytest.raises(TextLabelError, match='image-000000002: empty label'):
        build_dataset(_opt(root))
    root = _raw_lmdb(str(tmp_path / 'no_count'), good)
    with pytest.raises(KeyError, match='num-samples'):
        build_dataset(_opt(root))


def test_unknown_character_errors_or_is_skipped(tmp_path):
    """The label rule of every tool (docs/data.md, "Labels"): whitespace is removed for the targets, so a phrase with
    spaces is valid; a character outside the TransOCR alphabet or more than 24 characters is not."""
    root = str(tmp_path / 'chars.lmdb')
    write_fudanvi_lmdb(root, [(_png('ok'), 'ok'), (_png('x'), 'a\u2603b'), (_png('long'), 'y' * 25),
                              (_png('phrase'), 'Two Words  here')])
    with pytest.raises(TextLabelError, match=r"2 invalid label.*skip_invalid_labels: true.*image-000000002.*U\+2603"):
        build_dataset(_opt(root))
    ds = build_dataset(_opt(root, skip_invalid_labels=True))
    assert len(ds) == 2 and ds[0]['text'] == 'ok' and ds[1]['text'] == 'Two Words  here'  # the raw label is kept
    assert ds[1]['ocr_target'].tolist()[:13] == text_targets('twowordshere', 'x')[1].tolist()[:13]


def test_failing_degradation_raises_retries_or_skips(lmdb_root):
    calls = {'n': 0}

    def broken(img, scale, rng):
        calls['n'] += 1
        raise RuntimeError('boom')

    ds = build_dataset(_opt(lmdb_root))
    ds.chains = {'realesrgan': broken, 'bsrgan': broken}
    with pytest.raises(DegradationError, match=r'sample 2 \(image-000000003\).*boom'):
        ds[2]

    ds = build_dataset(_opt(lmdb_root, on_degradation_error='retry', max_retries=2))
    real = dict(ds.chains)

    def flaky(name):

        def call(img, scale, rng):
            calls['n'] += 1
            if calls['n'] % 2:
                raise RuntimeError('flaky')
            return real[name](img, scale, rng)

        return call

    calls['n'] = 0
    ds.chains = {name: flaky(name) for name in real}
    item = ds[2]
    assert ds.failures['retried'] == 1 and not torch.equal(item['lq'], item['gt'])

    # skip: a failing sample is replaced by the next one, which is degraded normally
    ds = build_dataset(_opt(lmdb_root, on_degradation_error='skip', max_retries=1))
    real = dict(ds.chains)
    failing = {'on': True}

    def first_fails(name):

        def call(img, scale, rng):
            if failing['on']:
                failing['on'] = False
                raise RuntimeError('once')
            return real[name](img, scale, rng)

        return call

    ds.chains = {name: first_fails(name) for name in real}
    item = ds[2]
    assert item['lq_path'] == 'image-000000004' and ds.failures['skipped'] == 1
    ds.chains = {'realesrgan': broken, 'bsrgan': broken}
    with pytest.raises(DegradationError, match='all failed'):
        ds[2]


def test_bad_options_are_rejected(lmdb_root):
    with pytest.raises(ValueError, match='chain_probs'):
        build_dataset(_opt(lmdb_root, chain_probs={'realesrgan': 0.5, 'bsrgan': 0.6}))
    with pytest.raises(KeyError, match='unknown name'):
        build_dataset(_opt(lmdb_root, chain_probs={'realesrgan': 0.5, 'identity': 0.5}))
    with pytest.raises(ValueError, match='scales'):
        build_dataset(_opt(lmdb_root, scales=[3]))
    with pytest.raises(ValueError, match='persistent_workers'):
        build_dataset(_opt(lmdb_root, persistent_workers=True, num_worker_per_gpu=2))
    with pytest.raises(KeyError, match='labels'):
        build_dataset(_opt(lmdb_root, io_backend={'type': 'disk'}))


def test_native_lr_is_the_canvas_lr_before_its_resize(lmdb_root):
    """lq_size: native (the baselines' x4 input) is the chain's 32x128 LR of the same random stream: resized with the
    sample's planned interpolation it is, bit for bit, the 128x512 LR TOLA trains on."""
    canvas = build_dataset(_opt(lmdb_root, scales=[4]))
    native = build_dataset(_opt(lmdb_root, scales=[4], lq_size='native', scale=4))
    for i in range(4):
        a, b = canvas[i], native[i]
        assert b['lq'].shape == (3, 32, 128) and torch.equal(a['gt'], b['gt'])
        interpolation = canvas.plan(i)[2]
        up = cv2.resize(b['lq'].numpy().transpose(1, 2, 0), (512, 128), interpolation=interpolation)
        assert np.array_equal(np.clip(up, 0, 1), a['lq'].numpy().transpose(1, 2, 0))


def test_gt_size_crops_one_region_of_both_without_changing_the_degradation(lmdb_root):
    whole = build_dataset(_opt(lmdb_root, scales=[4], lq_size='native', scale=4))
    crops = build_dataset(_opt(lmdb_root, scales=[4], lq_size='native', scale=4, gt_size=64))
    positions = []
    for i in range(len(LABELS)):
        w, c = whole[i], crops[i]
        assert c['gt'].shape == (3, 64, 64) and c['lq'].shape == (3, 16, 16)
        found = {(top, left)
                 for top in range(0, 128 - 64 + 1, 4)
                 for left in range(0, 512 - 64 + 1, 4) if torch.equal(w['gt'][:, top:top + 64, left:left + 64], c['gt'])
                 and torch.equal(w['lq'][:, top // 4:top // 4 + 16, left // 4:left // 4 + 16], c['lq'])}
        assert found, f'sample {i}: the crops are not one aligned region of the uncropped pair'
        positions.append(found)
    assert len({frozenset(p) for p in positions}) > 1  # drawn per sample


def test_native_and_crop_options_are_checked(lmdb_root):
    with pytest.raises(ValueError, match='needs one scale'):
        build_dataset(_opt(lmdb_root, lq_size='native'))  # scales [1, 2, 4]
    with pytest.raises(ValueError, match="option file's scale is 2"):
        build_dataset(_opt(lmdb_root, lq_size='native', scales=[4], scale=2))
    with pytest.raises(ValueError, match='lq_size must be one of'):
        build_dataset(_opt(lmdb_root, lq_size='small'))
    with pytest.raises(ValueError, match=r'gt_size must be an integer in \[1, 128\] divisible by .* \(4\), got 30'):
        build_dataset(_opt(lmdb_root, lq_size='native', scales=[4], gt_size=30))
    with pytest.raises(ValueError, match='gt_size'):
        build_dataset(_opt(lmdb_root, gt_size=256))


def test_basicsr_dataloader_epochs_are_reproducible(lmdb_root):
    """BasicSR's own sampler + dataloader with 2 workers: set_epoch reaches the workers."""
    from basicsr.data import build_dataloader
    opt = _opt(lmdb_root, use_shuffle=True, num_worker_per_gpu=2, batch_size_per_gpu=4, dataset_enlarge_ratio=1)
    ds = build_dataset(opt)
    sampler = EnlargedSampler(ds, num_replicas=1, rank=0)
    loader = build_dataloader(ds, opt, num_gpu=0, dist=False, sampler=sampler, seed=0)

    def epoch_pairs(epoch):
        sampler.set_epoch(epoch)  # what basicsr/train.py does before prefetcher.reset()
        return {p: lq for b in loader for p, lq in zip(b['lq_path'], b['lq'])}

    e1, e2, e1_again = epoch_pairs(1), epoch_pairs(2), epoch_pairs(1)
    assert set(e1) == set(e2) == {f'image-{i:09d}' for i in range(1, 9)}
    assert all(torch.equal(e1[k], e1_again[k]) for k in e1)
    assert all(not torch.equal(e1[k], e2[k]) for k in e1)


def test_enlarged_sampler_visits_get_their_own_degradation(lmdb_root):
    ds = build_dataset(_opt(lmdb_root))
    sampler = EnlargedSampler(ds, num_replicas=1, rank=0, ratio=3)
    sampler.set_epoch(2)
    visits = list(sampler)
    assert sorted(visits) == list(range(3 * len(ds)))  # unfolded indices for this dataset
    by_key = {}
    for v in visits[:12]:
        item = ds[v]
        by_key.setdefault(item['lq_path'], []).append(item['lq'])
        assert item['lq_path'] == f'image-{v % len(ds) + 1:09d}'
    repeated = [lqs for lqs in by_key.values() if len(lqs) > 1]
    assert repeated and all(not torch.equal(a, b) for lqs in repeated for a, b in zip(lqs, lqs[1:]))
    plain = EnlargedSampler(list(range(5)), num_replicas=1, rank=0, ratio=3)  # BasicSR behaviour kept
    assert sorted(plain) == sorted(list(range(5)) * 3)
