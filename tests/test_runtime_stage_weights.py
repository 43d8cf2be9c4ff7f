"""One copy of each weight: while OpenVINO's worker serves the IDM, the VAE and the text prior (TransOCR), the user's
process holds none of their weights (``runtime.stage_weights.StageWeights``), and reads them back from the merged
file, through a memory map of their own that is unmapped again, whenever torch runs them: the qualification's fp32
reference, the plain route that judges a non-finite output, the fallback after the worker died
(tests/test_runtime_qualification.py)."""
import os

import numpy as np
import pytest
import torch

from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.runtime.serving import NoPathLeft
from tola_plugin.runtime.stage_weights import StageWeights, drop_mapped_pages
from inference_testing import write_tiny_merged
from tola_testing import one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')
LINE = np.random.default_rng(0).integers(0, 256, (32, 128, 3), dtype=np.uint8)  # 1:4, one window


@pytest.fixture(scope='module')
def model(tmp_path_factory):
    return write_tiny_merged(tmp_path_factory.mktemp('weights') / 'tiny_merged.safetensors')


def mappings_of(path) -> int:
    """How many mappings of the whole file ``path`` this process has (/proc/self/maps: those from offset 0; the
    kernel may split one mapping into several areas)."""
    real = os.path.realpath(path)
    with open('/proc/self/maps', encoding='utf-8') as f:
        return sum(1 for line in f if line.rstrip('\n').endswith(real) and int(line.split()[2], 16) == 0)


def devices(module):
    return {t.device.type for t in list(module.parameters()) + list(module.buffers())}


def test_released_weights_are_read_back_from_their_own_mapping(model):
    net = TOLANet.load_for_inference(model)
    sample = (torch.rand(1, net.idm.config.in_channels, 8, 32), torch.full((1, ),
                                                                           999), torch.rand(1, 24, net.context_dim))
    with torch.inference_mode():
        expected = net.idm(*sample)
    lq = torch.rand(1, 3, 128, 512)
    with torch.inference_mode():
        prior = net.predict_text_prior(lq)
    weights = StageWeights(net, [net.idm, net.vae], model)
    assert {s.key.split('.')[0] for s in weights.slots} == {'idm', 'vae'}  # the served modules' weights only
    assert len(weights.slots) == len(net.idm.state_dict()) + len(net.vae.state_dict())
    before, resident = mappings_of(model), resident_bytes(model)
    weights.release()
    assert devices(net.idm) == devices(net.vae) == {'meta'} and devices(net.transocr) == {'cpu'}
    assert resident_bytes(model) < resident  # the pages loading touched left with them
    with torch.inference_mode():  # the weights still held are untouched
        assert all(torch.equal(a, b) for a, b in zip(net.predict_text_prior(lq)[:2], prior[:2]))
    with pytest.raises((RuntimeError, NotImplementedError)):  # a torch call on a released weight fails loudly
        with torch.inference_mode():
            net.idm(*sample)
    with weights.loaded():
        assert mappings_of(model) == before + 1  # a mapping of their own
        with torch.inference_mode():
            assert torch.equal(net.idm(*sample), expected)
        assert not any(p.requires_grad for p in net.idm.parameters())
    assert mappings_of(model) == before and devices(net.idm) == {'meta'}  # unmapped again, released again
    weights.load()
    with weights.loaded():  # loaded before: stays loaded after
        pass
    assert devices(net.idm) == {'cpu'} and not weights.released


def test_only_pages_of_the_file_are_dropped(model):
    elsewhere = torch.arange(1 << 20, dtype=torch.float32)  # ordinary memory: never dropped
    assert drop_mapped_pages([elsewhere], model) == 0
    assert torch.equal(elsewhere, torch.arange(1 << 20, dtype=torch.float32))


def test_only_weights_as_they_are_in_the_file_are_managed(model):
    net = TOLANet.load_for_inference(model)
    net.vae.double()  # no longer the file's: stays in this process
    weights = StageWeights(net, [net.idm, net.vae], model)
    assert {s.key.split('.')[0] for s in weights.slots} == {'idm'}
    assert StageWeights(net, [net.idm], None).slots == []  # no merged file: nothing to read them back from


@pytest.mark.openvino
def test_the_users_process_holds_no_served_weight_while_the_worker_serves(model):
    try:
        pipe = TOLAPipeline.from_merged(model, batch_size=1)
    except NoPathLeft as err:
        pytest.skip(f'OpenVINO does not qualify on this machine: {err}')
    try:
        if pipe.backend != 'openvino':
            pytest.skip(f'OpenVINO does not serve here: {pipe.plan.describe()}')
        source = pipe.runtime.source
        assert devices(source.idm) == devices(source.vae) == devices(pipe.net.transocr) == {'meta'}
        assert mappings_of(model) == 1  # load_for_inference's own (MoM, LRC), no second one
        assert np.isfinite(pipe(LINE).image).all()
        with pipe.runtime.plain_route():  # the judge of a non-finite output runs torch: loaded for the block
            assert devices(pipe.net.idm) == devices(pipe.net.transocr) == {'cpu'}
        assert devices(source.idm) == devices(pipe.net.transocr) == {'meta'}
    finally:
        pipe.close()
    # closed: the network has its weights back
    assert devices(pipe.net.idm) == devices(pipe.net.vae) == devices(pipe.net.transocr) == {'cpu'}


def test_the_worker_drops_mapped_weight_pages_and_reads_them_back_unchanged(tmp_path):
    """The OpenVINO worker's trimmer (``resident_memory.PageTrimmer``) on a weights file mapped read-only, as
    OpenVINO maps the IR's .bin: its pages leave the resident set, and read again they hold the same bytes."""
    import mmap

    from tola_plugin.runtime.resident_memory import PageTrimmer
    data = np.random.default_rng(0).integers(0, 256, 8 << 20, dtype=np.uint8).tobytes()
    path = tmp_path / 'stage.bin'
    path.write_bytes(data)
    with open(path, 'rb') as f:
        mapped = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    try:
        assert bytes(mapped[:]) == data  # every page read: resident
        assert resident_bytes(path) >= len(data) // 2
        assert PageTrimmer().trim() >= len(data)
        assert resident_bytes(path) == 0
        assert bytes(mapped[:]) == data  # read back unchanged
    finally:
        mapped.close()


def resident_bytes(path) -> int:
    """Resident bytes of this process's mappings of ``path`` (/proc/self/smaps)."""
    real, total, inside = os.path.realpath(path), 0, False
    with open('/proc/self/smaps', encoding='utf-8') as f:
        for line in f:
            head = line.split()
            if head and '-' in head[0] and len(head) >= 5 and not head[0].endswith(':'):
                inside = line.rstrip('\n').endswith(real)
            elif inside and head and head[0] == 'Rss:':
                total += int(head[1]) * 1024
    return total


def test_the_worker_starts_without_torch_or_numpy_from_the_package():
    """The OpenVINO worker starts in well under a second: importing it (and its page trimmer, the one module that
    calls madvise: ``MADV_DONTNEED`` is defined there only) loads neither torch nor numpy through the package."""
    import subprocess
    import sys

    from tola_plugin.runtime import resident_memory, stage_weights
    from tola_plugin.runtime.openvino_backend import worker as openvino_worker
    code = ('import runpy, sys\n'
            f'worker = runpy.run_path({openvino_worker.__file__!r}, run_name="worker")\n'
            'assert worker["PageTrimmer"]().rss_file() >= 0\n'
            'loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "numpy"))\n'
            'assert not loaded, loaded\n'
            'print("ok")\n')
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONSAFEPATH='1'))
    assert proc.returncode == 0 and proc.stdout.strip() == 'ok', proc.stderr[-2000:]
    for module in (openvino_worker, stage_weights):
        assert 'MADV_DONTNEED =' not in open(module.__file__, encoding='utf-8').read()
    assert resident_memory.MADV_DONTNEED == 4
