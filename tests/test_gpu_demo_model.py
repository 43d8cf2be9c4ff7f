"""The GPU check's demo_model step (tola_lab/gpu_check/demo_model_step.py) in a dry run on the CPU: the tests'
tiny backbone and a few adaptation iterations, rendered with the carried font subsets only; what it packs fits what a
lease brings back, and a second lease that carries the packed files in resumes from them instead of starting over.
And the rrdb_baseline step (the demo's plain CNN with a GPU's compute), sized and dry-run the same way."""
import json
import os
import shutil

import pytest
import torch
from safetensors import safe_open

from tola_lab.demo.fonts import demo_characters, write_font_subsets
from tola_lab.gpu_check.configs import read_yaml
from tola_lab.gpu_check.demo_model_step import (ADAPTATION_FILE, DRY_RUN_BACKBONE, GPU_ADAPTATION, GPU_BACKBONE,
                                                MAX_FILE_BYTES, MAX_FILES, RECORD_FILE, STATE, carried_fonts,
                                                demo_model_step, shipped_start)
from tola_lab.gpu_check.report import SECTIONS
from tola_lab.gpu_check.rrdb_baseline_step import OPTIONS as RRDB_OPTIONS
from tola_lab.gpu_check.rrdb_baseline_step import RECORD_FILE as RRDB_RECORD
from tola_lab.gpu_check.rrdb_baseline_step import WEIGHTS_FILE as RRDB_WEIGHTS
from tola_lab.gpu_check.rrdb_baseline_step import rrdb_baseline_step, rrdb_options
from tola_plugin.commands.data_preparation.image_checks import sha256_file
from conftest import run_launcher
from tola_testing import REPO, one_thread  # noqa: F401  (fixture)

RRDB_TEST_OPTIONS = 'options/demo/test_RRDB_demo_same_data.yml'

pytestmark = pytest.mark.usefixtures('one_thread')


@pytest.fixture(scope='module')
def carry(tmp_path_factory):
    """A carry folder holding only the font subsets (what `make gpu-carry` writes as fonts/)."""
    data = tmp_path_factory.mktemp('carry')
    written = write_font_subsets(str(data / 'fonts'))
    assert written and all(os.path.getsize(p) < 200_000 for p in written)  # subsets, not whole CJK fonts
    return data


def test_font_subsets_cover_the_demo_characters(carry):
    from fontTools.ttLib import TTFont
    for path in carried_fonts(str(carry)):
        cmap = TTFont(path).getBestCmap()
        assert all(ord(c) in cmap for c in demo_characters()), path


def test_missing_fonts_name_the_folder_and_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match=r'fonts.*make gpu-carry'):
        carried_fonts(str(tmp_path))


def test_the_gpu_backbone_starts_every_stage_from_the_shipped_one(tmp_path):
    """The GPU option file builds the shipped architectures: each stage starts from the shipped weights (which the CPU
    trained for hours), written as stage files the training loads strictly (a kept stage needs them: ``keep: true``
    fails without); the dry run's tiny backbone cannot, and starts from random weights."""
    from tola_plugin.archs.backbone_builder import load_difftsr
    from tola_plugin.checkpoints.demo_backbone import demo_checkpoint_paths
    opt = read_yaml(os.path.join(REPO, GPU_BACKBONE))
    started = shipped_start(opt, str(tmp_path))
    assert [s for s in ('vae', 'transocr', 'idm') if opt[s].get('keep')] == ['vae', 'transocr']  # the time: the IDM's
    assert {k: v
            for k, v in started.items()
            if k != 'folder'} == {s: f'the shipped demo {s}'
                                  for s in ('vae', 'idm', 'transocr')}
    folder = started['folder']
    assert sha256_file(os.path.join(folder, 'transocr.safetensors')) == sha256_file(demo_checkpoint_paths()[1])
    shipped = load_difftsr(demo_checkpoint_paths()[0], ('vae', 'idm', 'mom'))
    for stage, parts in (('vae', ('vae', )), ('idm', ('idm', 'mom'))):
        written = load_difftsr(os.path.join(folder, f'{stage}.safetensors'), parts)
        for part in parts:
            mine, theirs = written[part].state_dict(), shipped[part].state_dict()
            assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert shipped_start(read_yaml(os.path.join(REPO, DRY_RUN_BACKBONE)), str(tmp_path / 'tiny')) == {}


def test_an_idm_starts_from_the_shipped_one_only_on_the_shipped_vae(tmp_path):
    """The IDM works in its VAE's latent space: another VAE architecture starts both from random weights."""
    opt = read_yaml(os.path.join(REPO, GPU_BACKBONE))
    opt['vae']['config']['block_out_channels'] = [8, 16, 32]
    started = shipped_start(opt, str(tmp_path))
    assert 'vae' not in started and 'idm' not in started and started['transocr'] == 'the shipped demo transocr'
    assert sorted(os.listdir(started['folder'])) == ['transocr.safetensors']


@pytest.mark.gpu_dry_run
def test_dry_run_packs_what_a_lease_brings_back_and_the_next_lease_resumes(carry, tmp_path, monkeypatch):
    monkeypatch.setenv('FONTCONFIG_FILE', os.devnull)  # like the GPU image: no system font to fall back on
    out = tmp_path / 'out'
    result = demo_model_step(REPO, str(carry), str(tmp_path / 'lease1'), True, str(out), seconds=600)
    assert result['passed'], result
    assert result['backbone'] == 'finished' and result['adaptation']['exit_status'] == 0
    files = sorted(os.listdir(out))
    assert files == sorted(
        ['vae.safetensors', 'idm.safetensors', 'transocr.safetensors', 'stages.json', ADAPTATION_FILE, RECORD_FILE])
    assert len(files) <= MAX_FILES and all(os.path.getsize(out / f) <= MAX_FILE_BYTES for f in files)
    for name in ('vae', 'idm', 'transocr'):  # float16, but the IDM (its errors reach ẑ0 times 101.6)
        with safe_open(str(out / f'{name}.safetensors'), 'pt') as f:
            dtypes = {str(f.get_tensor(k).dtype) for k in f.keys() if not k.startswith('mom.')}
            assert dtypes <= ({'torch.float32', 'torch.int64'} if name == 'idm' else {'torch.float16', 'torch.int64'})
    stages = json.loads((out / 'stages.json').read_text(encoding='utf-8'))
    assert stages['idm']['inputs']['vae'] == sha256_file(str(out / 'vae.safetensors'))  # the packed file's digest
    record = json.loads((out / RECORD_FILE).read_text(encoding='utf-8'))
    assert set(record['held_out']) == {
        'psnr_lr', 'psnr_tola', 'transocr_acc_lr', 'transocr_acc_tola', 'psnr_tola_null_prior',
        'transocr_acc_tola_null_prior'
    }
    assert any(line.startswith('| TOLA, null text prior | ') for line in SECTIONS['demo_model'](result))  # the report
    assert set(record['held_out_one_step']) == {'psnr_lr', 'psnr_one_step', 'transocr_acc_lr', 'transocr_acc_one_step'}
    assert any('idm' in line for line in record['backbone_log_tail'])

    # The next lease carries the packed files in: every stage is reused, the adaptation starts from the carried one.
    os.rename(out, carry / STATE)
    try:
        again = demo_model_step(REPO, str(carry), str(tmp_path / 'lease2'), True, str(tmp_path / 'out2'), seconds=600)
    finally:
        os.rename(carry / STATE, tmp_path / 'state1')
    assert again['passed'], again
    record = json.loads((tmp_path / 'out2' / RECORD_FILE).read_text(encoding='utf-8'))
    assert record['unpacked_state'] is True
    log = '\n'.join(record['backbone_log_tail'])
    assert all(f'{s}: reusing' in log for s in ('vae', 'idm', 'transocr')), log
    assert record['adaptation']['started_from'].endswith(os.path.join(STATE, ADAPTATION_FILE))


def test_the_plain_cnn_on_a_gpu_is_the_cpu_row_s_network_at_the_adaptation_s_batch_sized_to_its_time(tmp_path):
    """The rrdb_baseline step trains the CPU row's RRDBNet (the same option file) on the GPU adaptation's lines and
    batch, its cosine schedule ending where the step's time does."""
    sized = rrdb_options(REPO, str(tmp_path), str(tmp_path / 'lines'), False, seconds=400)
    opt, cpu_row = read_yaml(sized['option_file']), read_yaml(os.path.join(REPO, RRDB_OPTIONS))
    assert opt['network_g'] == cpu_row['network_g'] and opt['train']['pixel_opt'] == cpu_row['train']['pixel_opt']
    assert sized['total_iter'] == 8000 == opt['train']['total_iter'] and opt['train']['scheduler']['periods'] == [8000]
    train_set = opt['datasets']['train']
    assert train_set['batch_size_per_gpu'] == GPU_ADAPTATION['batch'] and opt['num_gpu'] == 1
    assert train_set['dataroot_gt'] == str(tmp_path / 'lines') and train_set['scales'] == [4]


@pytest.mark.gpu_dry_run
def test_dry_run_of_the_plain_cnn_brings_back_its_weights_and_record(carry, tmp_path, monkeypatch):
    monkeypatch.setenv('FONTCONFIG_FILE', os.devnull)
    out = tmp_path / 'out'
    result = rrdb_baseline_step(REPO, str(carry), str(tmp_path / 'work'), True, str(out), seconds=600)
    assert result['passed'] and result['exit_status'] == 0, result
    assert sorted(os.listdir(out)) == sorted([RRDB_WEIGHTS, RRDB_RECORD])
    state = torch.load(str(out / RRDB_WEIGHTS), weights_only=True)['params']
    assert state['conv_first.weight'].shape == (32, 3, 3, 3)  # the CPU row's RRDBNet, 32 features
    assert 'iterations planned' in SECTIONS['rrdb_baseline'](result)[0]
    # back here: docs/demo_backbone.md's scoring command on the returned weights (make demo's folder layout)
    val = shutil.copytree(tmp_path / 'work' / 'adaptation_lines', tmp_path / 'here' / 'demo_data' / 'tola_val')
    run_launcher([
        '-m', 'tola_plugin.test', '-opt',
        os.path.join(REPO, RRDB_TEST_OPTIONS), '--force_yml', 'name=demo_RRDB_gpu_test',
        f'path:pretrain_network_g={out / RRDB_WEIGHTS}'
    ], cwd=tmp_path / 'here')
    restored = tmp_path / 'here' / 'results' / 'demo_RRDB_gpu_test' / 'visualization' / 'rendered_val'
    assert len(os.listdir(restored)) == len(os.listdir(val)) - 1  # every line but labels.tsv
