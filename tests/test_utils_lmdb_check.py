"""LMDBs (issue 33 items 4 and 11): a truncated ``data.mdb`` is an error naming it, never a SIGBUS (exit status 135,
no message); a ``num-samples`` that is not a count names the LMDB and the key."""
import os

import cv2
import numpy as np
import pytest
from reliability_testing import launch

from basicsr.utils.file_client import LmdbBackend

import tola_plugin  # noqa: F401
from tola_plugin.data.fudanvi_lmdb import FudanVILmdbReader, write_fudanvi_lmdb
from tola_testing import tiny_demo_options

TRUNCATED_SIZE = 8192  # `truncate -s 8192 data.mdb`: the two meta pages survive, every data page is gone


def write_lmdb(path, samples=4, num_samples=None):
    """A FudanVI LMDB of noise lines (about 50 KB each, so data pages lie far past the first 8 KB); ``num_samples``
    overwrites the count key (bytes)."""
    rng = np.random.default_rng(0)
    images = [
        cv2.imencode('.png', rng.integers(0, 256, (64, 256, 3), dtype=np.uint8))[1].tobytes() for _ in range(samples)
    ]
    write_fudanvi_lmdb(str(path), [(image, f'line{i}') for i, image in enumerate(images)], map_size=1 << 24)
    if num_samples is not None:
        import lmdb
        env = lmdb.open(str(path), map_size=1 << 24)
        with env.begin(write=True) as txn:
            txn.put(b'num-samples', num_samples)
        env.close()
    return str(path)


def truncated_lmdb(path) -> str:
    write_lmdb(path)
    assert os.path.getsize(os.path.join(path, 'data.mdb')) > 10 * TRUNCATED_SIZE
    os.truncate(os.path.join(path, 'data.mdb'), TRUNCATED_SIZE)
    return str(path)


def test_a_truncated_lmdb_stops_training_with_one_line(rendered_sets, tmp_path, monkeypatch, capsys):
    lmdb_path = truncated_lmdb(tmp_path / 'train.lmdb')
    opt = tiny_demo_options(rendered_sets, 'truncated', total_iter=2, freq=2)
    train = opt['datasets']['train']
    train.update(dataroot_gt=lmdb_path, io_backend={'type': 'lmdb'})
    del train['labels']
    assert launch(tmp_path, monkeypatch, opt) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # after BasicSR's log of the options
    assert 'Traceback' not in err and last.startswith('error: '), err[-2000:]
    assert f'{lmdb_path}/data.mdb: truncated LMDB: 8,192 bytes, but its header says' in last, last


def test_basicsrs_lmdb_reader_checks_too(tmp_path):
    lmdb_path = truncated_lmdb(tmp_path / 'gt.lmdb')
    with pytest.raises(ValueError, match='gt.lmdb/data.mdb: truncated LMDB'):
        LmdbBackend([lmdb_path], client_keys=['gt'])


def test_a_file_that_is_not_an_lmdb_is_named(tmp_path):
    os.makedirs(tmp_path / 'fake.lmdb')
    (tmp_path / 'fake.lmdb' / 'data.mdb').write_bytes(b'not an lmdb' * 100)
    with pytest.raises(ValueError, match=r'fake.lmdb/data.mdb: not a readable LMDB \(1,100 bytes'):
        FudanVILmdbReader(str(tmp_path / 'fake.lmdb'))


@pytest.mark.parametrize('value,needle', [
    (b'abc', "num-samples is 'abc'; expected the number of samples, a whole number >= 0"),
    (b'-1', "num-samples is '-1'; expected the number of samples"),
])
def test_a_bad_sample_count_names_the_lmdb_and_the_key(tmp_path, value, needle):
    path = write_lmdb(tmp_path / f'count_{value.decode()}.lmdb', num_samples=value)
    with pytest.raises(ValueError) as err:
        FudanVILmdbReader(path)
    assert str(err.value).startswith(path) and needle in str(err.value), str(err.value)


def test_a_complete_lmdb_reads_as_before(tmp_path):
    reader = FudanVILmdbReader(write_lmdb(tmp_path / 'good.lmdb'))
    assert len(reader) == 4 and reader.read(4)[0].shape == (64, 256, 3) and reader.read_label(1) == 'line0'
