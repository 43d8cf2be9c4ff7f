"""The shipped demo backbone (tola_plugin/assets/demo/backbone): strict loading into the networks the demo option files
build, its manifest, the merged export, and tools/train_demo_backbone.py end to end on a tiny configuration."""
import json
import os
import shutil
import sys

import cv2
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from test_eval_recognizers import cjk_font

from tola_lab.demo.shipping import STORED
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.checkpoints.demo_backbone import (DIFFTSR_FILE, TRANSOCR_FILE, demo_adaptation_record,
                                                   demo_checkpoint_paths, demo_manifest)
from tola_plugin.commands.evaluation.records import read_labels
from tola_plugin.inference.color_fix import COLOR_FIXES
from conftest import write_options
from figure_testing import capture_figures, grid_cells
from numerics import equivalent
from tola_testing import REPO, load_yaml, one_thread  # noqa: F401  (fixture)

sys.path.insert(0, os.path.join(REPO, 'tools'))
import train_demo_backbone  # noqa: E402

DEMO_OPTIONS = ('options/demo/train_TOLA_demo.yml', 'options/demo/test_TOLA_demo.yml')


@pytest.fixture(scope='module')
def demo_net(one_thread):  # noqa: F811
    """TOLANet of the demo option files (both have the same network block, asserted below)."""
    from basicsr.archs import build_network
    return build_network(load_yaml(os.path.join(REPO, DEMO_OPTIONS[0]))['network_g']).eval()


def _base_state(module):
    """A peft-wrapped module's frozen base weights under their plain names (LoRA factors left out)."""
    if hasattr(module, 'get_base_model'):
        module = module.get_base_model()
    return {k.replace('.base_layer', ''): v for k, v in module.state_dict().items() if 'lora_' not in k}


def test_demo_files_load_strictly_into_the_demo_option_networks(demo_net):
    train, test = (load_yaml(os.path.join(REPO, p))['network_g'] for p in DEMO_OPTIONS)
    assert train == test and train['backbone_init'] == 'demo'
    difftsr, transocr = (load_file(p) for p in demo_checkpoint_paths())
    for name in ('idm', 'vae', 'mom'):
        own = _base_state(getattr(demo_net, name))
        stored = {k[len(name) + 1:]: v for k, v in difftsr.items() if k.startswith(name + '.')}
        assert own.keys() == stored.keys(), name
        assert all(torch.equal(own[k], stored[k]) for k in own), name
    own = demo_net.transocr.state_dict()
    assert own.keys() == transocr.keys() and all(torch.equal(own[k], transocr[k]) for k in own)
    params = demo_manifest()['parameters']
    for name in ('idm', 'vae', 'mom'):
        module = getattr(demo_net, name)
        base = module.get_base_model() if hasattr(module, 'get_base_model') else module
        assert params[name] == sum(p.numel() for n, p in base.named_parameters() if 'lora_' not in n), name
    assert params['transocr'] == sum(p.numel() for p in demo_net.transocr.parameters())


def test_the_shipped_adaptation_is_make_demos_and_says_how_it_was_made():
    """tola_plugin/assets/demo/backbone/tola_demo_adaptation.pth: an adaptation checkpoint (1 MB) trained by the option
    file its record names (make demo's, continued), the record naming the commands, threads, machine, its sha256, size,
    and the network_g of options/demo/test_TOLA_demo.yml; it loads strictly into that network
    (path:pretrain_network_g=demo) and only with the demo backbone."""
    import hashlib

    from tola_plugin.archs.tola_arch import TOLANet
    from tola_plugin.checkpoints.demo_backbone import demo_adaptation_path
    record, path = demo_adaptation_record(), demo_adaptation_path()
    data = open(path, 'rb').read()
    assert len(data) == record['bytes'] < 2e6 and hashlib.sha256(data).hexdigest() == record['sha256']
    assert record['network_g'] == load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))['network_g']
    trained_by = load_yaml(os.path.join(REPO, record['option_file']))
    assert trained_by['network_g'] == dict(record['network_g'], backbone_init='demo')
    # the run may be stopped early (it says so); a GPU check's is sized to its time (total_iter recorded)
    assert 0 < record['iterations'] <= record.get('total_iter', trained_by['train']['total_iter'])
    assert {'psnr', 'ssim', 'p_acc', 't_acc'} <= set(record['held_out']['TOLA']) and record['machine']
    network = {k: v for k, v in record['network_g'].items() if k != 'type'}
    net = TOLANet(**network)
    net.load_adaptation_checkpoint('demo')  # strict: every LoRA and LRC tensor, the recorded settings
    with pytest.raises(ValueError, match='adapts the demo backbone; set network_g:backbone_init=demo'):
        TOLANet(**dict(network, backbone_init='random')).load_adaptation_checkpoint('demo')


def test_manifest_says_how_the_backbone_was_made():
    """The shipped backbone's manifest names how it was made: a GPU check's run (its stages trained with the options
    of options/demo/train_demo_backbone_gpu.yml at the time, recorded, each started from the backbone shipped before
    it, whose manifest it keeps as ``previous``) or the CPU's (options/demo/train_demo_backbone.yml and the stages
    trained on from it)."""
    manifest = demo_manifest()
    folder = os.path.dirname(demo_checkpoint_paths()[0])
    sizes = {f: os.path.getsize(os.path.join(folder, f)) for f in (DIFFTSR_FILE, TRANSOCR_FILE)}
    assert sum(sizes.values()) <= 30e6
    assert manifest['file_mb'] == {f: round(s / 1e6, 3) for f, s in sizes.items()}
    if 'trained_from' in manifest:
        from tola_plugin.checkpoints.difftsr import read_converted
        from tola_plugin.checkpoints.transocr import read_transocr_safetensors
        configs = read_converted(demo_checkpoint_paths()[0], ('vae', 'idm'))[1]
        configs['transocr'] = read_transocr_safetensors(demo_checkpoint_paths()[1])[1]
        assert manifest['command'].startswith('python tools/ship_demo_model.py --backbone-state ')
        assert manifest['trained_on'] and manifest['stored'] == STORED
        one_step = manifest['held_out_one_step_float32']  # the run's frozen one step on its held-out pool
        assert one_step['psnr_one_step'] > one_step['psnr_lr'] > 0
        for stage in ('vae', 'transocr', 'idm'):
            record = manifest['stages'][stage]
            made_with = record['made_with'][0]  # the stage's options in the GPU recipe of that run
            assert all(configs[stage][k] == v for k, v in made_with['config'].items())  # the files' architecture
            if not made_with.get('keep'):  # a kept stage is the previous manifest's
                assert 0 < record['iterations_done'] == record['iterations'] <= made_with['iterations']  # finished
            assert manifest['started_from'][stage].startswith(f'the shipped demo {stage}')
        manifest = manifest['previous']  # the backbone it started from
    assert_cpu_manifest(manifest, folder)


def assert_cpu_manifest(manifest, folder):
    options = load_yaml(os.path.join(REPO, 'options', 'demo', 'train_demo_backbone.yml'))
    assert manifest['command'].startswith('python tools/train_demo_backbone.py -opt ')
    assert manifest['seed'] == options['seed'] and manifest['num_threads'] == options['num_threads']
    for stage in ('vae', 'transocr', 'idm'):
        record = manifest['stages'][stage]
        assert record['iterations'] == options[stage]['iterations']
        finals = [v for k, v in record.items() if k.startswith('final_')]
        assert finals and all(v == v and abs(v) < 1e6 for v in finals)  # present and finite
        assert isinstance(record['seconds'], float)  # how long the stage took is recorded (not asserted)
    # the committed files come from the committed option file; output_dir says where they were written, not how
    # they were made (the folder moved from tola_plugin/demo_backbone to tola_plugin/demo/backbone after training, then
    # to tola_plugin/assets/demo/backbone)
    made = {k: v for k, v in manifest['options'].items() if k != 'output_dir'}
    assert made == {k: v for k, v in options.items() if k != 'output_dir'}
    assert os.path.realpath(os.path.join(REPO, options['output_dir'])) == os.path.realpath(folder)
    for stage, record in manifest.get('continued', {}).items():  # trained on from the stage above, by its own file
        on = load_yaml(os.path.join(REPO, record['option_file']))
        assert record['iterations'] == on[stage]['iterations'] and 0 < record['iterations_done'] <= record['iterations']
        assert record['command'] and stage in ('transocr', 'idm')
        if stage == 'transocr':
            assert record['stored'] == 'float16' and 0 <= record['val_acc_lr'] <= 1
        else:  # the IDM with the one-step path (tests/test_demo_one_step_path.py): float32, its one step measured
            assert record['stored'] == STORED and record['held_out_one_step']['psnr_one_step'] > 0


@pytest.mark.numerics
def test_merged_export_of_the_demo_model_round_trips(demo_net, tmp_path):
    """save_merged records the demo TransOCR's own architecture, so from_merged rebuilds the same network."""
    net = TOLANet(backbone_init='demo', lrc={'type': 'LatentResidualCorrection'}).double().eval()
    with torch.no_grad():
        for p in net.lrc.parameters():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.01)
    lq = torch.rand(1, 3, 64, 256, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # multiple of 16
    with torch.no_grad():
        before = net(lq, noise_seeds=[3])
    path = str(tmp_path / 'merged.safetensors')
    net.save_merged(path)
    assert net.merged_options()['backbone_init'] == 'empty'  # the rebuild says what it is: every weight loaded next
    rng = torch.get_rng_state()
    merged = TOLANet.from_merged(path)
    assert torch.equal(torch.get_rng_state(), rng)  # building the empty modules draws nothing from the global stream
    assert merged.transocr.arch_options == demo_net.transocr.arch_options
    with torch.no_grad():
        after = merged(lq, noise_seeds=[3])
    # float64 weights and inputs (the file keeps the dtype): merged and unmerged are equal in exact arithmetic; the
    # rebuilt network's memory-mapped weights may make kernels sum in another order
    assert next(merged.parameters()).dtype == torch.float64
    equivalent(after, before, 'merged vs unmerged demo model')


def test_missing_demo_file_names_it_and_the_rebuild_command(monkeypatch, tmp_path):
    monkeypatch.setattr('tola_plugin.checkpoints.demo_backbone.demo_backbone_dir', lambda: str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r'difftsr_demo\.safetensors.*train_demo_backbone\.yml'):
        TOLANet(backbone_init='demo')


def test_training_tool_tiny_run_resumes_and_loads_strictly(tmp_path, one_thread, capsys):  # noqa: F811
    options = load_yaml(os.path.join(REPO, 'tests', 'data', 'demo_backbone', 'tiny_backbone.yml'))
    options['data']['fonts'] = [cjk_font()]  # one font file: reading every system CJK font's cmap takes seconds
    opt = write_options(tmp_path / 'tiny.yml', options)
    args = ['-opt', opt, '--work-dir', str(tmp_path / 'work'), '--output-dir', str(tmp_path / 'out')]
    assert train_demo_backbone.main(args) == 0
    first = {f: load_file(str(tmp_path / 'out' / f)) for f in (DIFFTSR_FILE, TRANSOCR_FILE)}
    manifest = json.loads((tmp_path / 'out' / 'manifest.json').read_text(encoding='utf-8'))
    assert set(manifest['stages']) == {'vae', 'transocr', 'idm'}
    assert set(
        manifest['held_out_one_step']) == {'psnr_lr', 'psnr_one_step', 'transocr_acc_lr', 'transocr_acc_one_step'}
    capsys.readouterr()
    assert train_demo_backbone.main(args) == 0  # a second run reuses every stage ...
    log = capsys.readouterr().out
    assert all(f'{s}: reusing' in log for s in ('vae', 'transocr', 'latents', 'idm'))
    again = {f: load_file(str(tmp_path / 'out' / f)) for f in first}  # ... and writes the same tensors
    assert all(torch.equal(again[f][k], first[f][k]) for f in first for k in first[f])
    net = TOLANet(
        difftsr_checkpoint=str(tmp_path / 'out' / DIFFTSR_FILE),
        transocr_checkpoint=str(tmp_path / 'out' / TRANSOCR_FILE), lrc=None)
    vae = net.vae.get_base_model()
    assert all(a is None for a in vae.encoder.mid_block.attentions + vae.decoder.mid_block.attentions)
    assert net.transocr.arch_options['embed_dim'] == options['transocr']['config']['embed_dim']


class StepClock:
    """An injected clock that advances one second each time it is read: the deadline falls at a chosen check."""

    def __init__(self):
        self.now = -1.0

    def __call__(self):
        self.now += 1.0
        return self.now


def test_training_stops_at_its_deadline_keeps_the_stage_and_resumes_it(tmp_path, one_thread, capsys):  # noqa: F811
    """The run's clock is read once at the start (0) and once before every iteration: VAE (2 iterations) at 1 and 2,
    the IDM at 3 and 4 (a deadline of 4 s stops it after one iteration). The next run resumes the IDM at iteration 1
    and finishes; a third run in a new folder warm-starts every stage from the first one's files."""
    from tola_lab.demo.training import train_demo_backbone as train
    options = load_yaml(os.path.join(REPO, 'tests', 'data', 'demo_backbone', 'tiny_backbone.yml'))
    options['data']['fonts'] = [cjk_font()]
    options['vae']['iterations'], options['idm']['iterations'] = 2, 3
    opt = write_options(tmp_path / 'tiny.yml', options)
    work, out = str(tmp_path / 'work'), str(tmp_path / 'out')
    assert train(opt, work, out, deadline_seconds=4, clock=StepClock()) == 3
    assert 'idm: stopped at the deadline after 1/3 iterations' in capsys.readouterr().out
    assert os.path.isfile(os.path.join(work, 'idm.partial.safetensors')) and not os.path.exists(out)
    records = json.loads((tmp_path / 'work' / 'stages.json').read_text(encoding='utf-8'))
    assert records['vae']['iterations_done'] == 2 and records['idm_partial']['iterations_done'] == 1
    assert train(opt, work, out) == 0
    log = capsys.readouterr().out
    assert 'vae: reusing' in log and 'idm: resuming' in log and 'at iteration 1' in log
    assert not os.path.exists(os.path.join(work, 'idm.partial.safetensors'))
    assert json.loads((tmp_path / 'work' / 'stages.json').read_text(encoding='utf-8'))['idm']['iterations_done'] == 3
    assert os.path.isfile(os.path.join(out, DIFFTSR_FILE))
    assert train(opt, str(tmp_path / 'work2'), str(tmp_path / 'out2'), init_dir=work) == 0
    log = capsys.readouterr().out
    assert all(f'{s}: starting from {os.path.join(work, s)}.safetensors' in log for s in ('vae', 'idm', 'transocr'))
    # a TransOCR trained on (here the first run's) installed as the shipped one: float16, measured, recorded
    from tola_lab.demo.shipping import install_stage
    folder = tmp_path / 'shipped'
    folder.mkdir()
    shutil.copy(os.path.join(os.path.dirname(demo_checkpoint_paths()[0]), 'manifest.json'), folder)
    before = json.loads((folder / 'manifest.json').read_text(encoding='utf-8')).get('continued', {}).get('transocr')
    record = install_stage('transocr', write_options(tmp_path / 'on.yml', dict(options, work_dir=work)), 'cmd',
                           str(folder))
    assert record['previous'] == before  # the shipped one's record, kept with the one replacing it
    stored = load_file(str(folder / TRANSOCR_FILE))
    assert all(t.dtype == torch.float16 for t in stored.values() if t.is_floating_point())
    manifest = json.loads((folder / 'manifest.json').read_text(encoding='utf-8'))
    assert manifest['continued']['transocr'] == record
    assert record['iterations_done'] == options['transocr']['iterations']
    assert 0 <= record['val_acc_lr'] <= 1 and record['stored'] == 'float16' and record['command'] == 'cmd'
    assert manifest['file_mb'][TRANSOCR_FILE] == round(os.path.getsize(folder / TRANSOCR_FILE) / 1e6, 3)


def test_a_kept_stage_is_its_init_file_untrained_and_scored(tmp_path, one_thread, capsys):  # noqa: F811
    """``keep: true`` (a lease's time to the other stages): the stage is init_dir's file, tensor for tensor, with its
    held-out scores recorded; training options beside it, or no file to keep, are errors naming the stage."""
    from tola_lab.demo.training import train_demo_backbone as train
    from tola_plugin.archs.backbone_builder import save_converted
    from tola_plugin.archs.transocr_arch import TransOCR
    from tola_plugin.archs.vae_arch import DiffTSRVAE
    from tola_plugin.checkpoints.transocr import save_transocr
    options = load_yaml(os.path.join(REPO, 'tests', 'data', 'demo_backbone', 'tiny_backbone.yml'))
    options['data']['fonts'] = [cjk_font()]
    first = tmp_path / 'first'  # an earlier run's stage files (here untrained ones)
    first.mkdir()
    save_converted({'vae': DiffTSRVAE(**options['vae']['config'])}, str(first / 'vae.safetensors'))
    save_transocr(TransOCR(**options['transocr']['config']), str(first / 'transocr.safetensors'))
    for stage in ('vae', 'transocr'):
        options[stage] = {'config': options[stage]['config'], 'keep': True}
    opt = write_options(tmp_path / 'kept.yml', options)
    assert train(opt, str(tmp_path / 'work'), str(tmp_path / 'out2'), init_dir=str(first)) == 0
    log = capsys.readouterr().out
    assert 'vae: kept as it is' in log and 'transocr: kept as it is' in log and 'idm 1/1' in log
    records = json.loads((tmp_path / 'work' / 'stages.json').read_text(encoding='utf-8'))
    for stage in ('vae', 'transocr'):
        kept, init = (load_file(os.path.join(d, f'{stage}.safetensors')) for d in (str(tmp_path / 'work'), str(first)))
        assert kept.keys() == init.keys() and all(torch.equal(kept[k], init[k]) for k in kept)
        assert records[stage]['kept'] and records[stage]['iterations_done'] == 0
    assert 'val_psnr_reconstruction' in records['vae'] and 0 <= records['transocr']['val_acc_lr'] <= 1
    with pytest.raises(FileNotFoundError, match=r'vae: keep: true .*init_dir'):
        train(opt, str(tmp_path / 'work3'), str(tmp_path / 'out3'))
    options['vae']['lr'] = 1e-3
    with pytest.raises(ValueError, match=r"vae: keep: true trains nothing, so \['lr'\] would be ignored"):
        train(
            write_options(tmp_path / 'bad.yml', options), str(tmp_path / 'work4'), str(tmp_path / 'out4'),
            init_dir=str(first))


def test_demo_chinese_pool_is_what_the_renderer_draws(tmp_path):
    from tola_plugin.data.text_render import TextLineRenderer, chinese_pool, common_chinese, demo_chinese
    pool = demo_chinese()
    assert len(pool) == len(set(pool)) == 100 and set(pool) <= set(common_chinese())
    renderer = TextLineRenderer([cjk_font()], seed=0, chinese_chars='demo')
    han = ''.join(ch for i in range(16) for ch in renderer.render(i)[1] if ord(ch) > 0x2E80)
    assert han and set(han) <= set(pool)
    bad = tmp_path / 'pool.txt'
    bad.write_text('电a', encoding='utf-8')
    with pytest.raises(ValueError, match="'a'"):
        chinese_pool(str(bad))


def test_demo_report_writes_images_metrics_and_grid(rendered_sets, tmp_path, one_thread, monkeypatch):  # noqa: F811
    """The report rebuilds the held-out pairs of the test option file; with 'restored' = LR every gain is 0."""
    from basicsr.utils import imwrite, tensor2img

    from tola_lab.demo.report import make_report, report_closing
    from tola_plugin.data.text_degradation_dataset import TextDegradationDataset
    test = load_yaml(os.path.join(REPO, DEMO_OPTIONS[1]))
    ds = test['datasets']['test_1']
    ds.update(
        dataroot_gt=os.path.join(rendered_sets['val'], 'hr'), labels=os.path.join(rendered_sets['val'], 'labels.tsv'))
    opt_path = write_options(tmp_path / 'test.yml', test)
    results = tmp_path / 'results'
    dataset = TextDegradationDataset(dict(ds, phase='val', scale=1))
    for i in range(len(dataset)):  # the "restored" images the test launcher would have saved: the LR itself
        item = dataset[i]
        stem = os.path.splitext(os.path.basename(item['lq_path']))[0]
        imwrite(tensor2img(item['lq']), str(results / 'visualization' / ds['name'] / f'{stem}_{test["name"]}.png'))
    figures = capture_figures(monkeypatch)
    report = make_report(opt_path, grid_samples=2, results_dir=str(results), log=lambda m: None)
    assert report['held_out_lines'] == len(dataset) == 2
    assert all(report['TOLA_minus_LR'][k] == 0 for k in report['TOLA_minus_LR'])
    assert report['targets_met'] == {'psnr_gain': False, 'p_acc_gain': False}
    closing = report_closing(report)  # the demo's last line: no "NOT met", what to expect and why digits vary
    assert 'NOT met' not in closing and closing.startswith('TOLA against its LR input: PSNR +0.00 dB')
    assert ': not above its input (docs/demo_backbone.md' in closing and 'What varies by CPU' in closing
    mixed = dict(report, TOLA_minus_LR=dict(report['TOLA_minus_LR'], psnr=0.3, ssim=0.09, p_acc=-0.1))
    assert 'above its input in PSNR, SSIM, not in PP-OCRv4 ACC (docs' in report_closing(mixed)
    shipped = demo_adaptation_record()['held_out']['TOLA']
    assert f'read PSNR {shipped["psnr"]:.2f} dB, PP-OCRv4 ACC {shipped["p_acc"]:.4f}' in closing
    assert {'psnr', 'ssim', 'p_acc', 't_acc'} <= set(report['LR'])
    saved = json.loads((results / 'metrics.json').read_text(encoding='utf-8'))
    assert saved['TOLA'] == report['TOLA']
    assert set(saved['color_fix_psnr']) == set(COLOR_FIXES)  # each colour fix measured on the lines
    assert all(10 < v < 100 for v in saved['color_fix_psnr'].values())
    for sub in ('lr', 'tola', 'hr'):
        assert sorted(os.listdir(results / sub)) == ['000001.png', '000002.png']
    (fig, stem), = figures  # LR | TOLA | HR per line, each cell the file written above, captioned with what was read
    assert stem == str(results / 'grid') and (results / 'grid.png').exists()
    assert [ax.get_title() for ax in fig.axes[:3]] == ['LR input', 'TOLA (one step)', 'HR reference']
    rows = grid_cells(fig)
    texts = read_labels(os.path.join(rendered_sets['val'], 'labels.tsv')).values()
    assert len(rows) == 2 and all(label in texts for label, _ in rows)  # each row named by its line's text
    for (_, cells), name in zip(rows, ('000001.png', '000002.png')):
        for cell, sub in zip(cells, ('lr', 'tola', 'hr')):
            assert np.array_equal(cell, cv2.imread(str(results / sub / name))[:, :, ::-1])
    captions = [ax.get_xlabel() for ax in fig.axes]
    assert all(c.startswith('PP-OCRv4: ') and c[-1] in '✓✗' for c in captions[0::3] + captions[1::3])


def test_bundled_real_samples_are_listed_and_small():
    from tola_plugin.assets.samples import sample_labels, sample_paths
    from tola_plugin.data.image_io import read_image_file
    paths = sample_paths()
    assert 4 <= len(paths) <= 6 and sum(os.path.getsize(p) for p in paths) <= 600_000
    assert sorted(sample_labels()) == sorted(os.path.basename(p) for p in paths)
    assert all(read_image_file(p).shape == (128, 512, 3) for p in paths)
    readme = open(os.path.join(os.path.dirname(paths[0]), 'README.md'), encoding='utf-8').read()
    assert 'Apache-2.0' in readme and 'YuzheZhang-1999/DiffTSR' in readme


def test_a_time_budget_sizes_the_stage_s_schedule_once_its_speed_is_measured():
    """A stage with ``seconds`` (a GPU whose speed is not known in advance) times iterations 10-40 of its run on the
    injected clock and cuts its total to what the budget allows; its cosine schedule then ends at that total."""
    from tola_lab.demo.training_stages import Progress, StageRun, _optimizer, _resized
    now = [0.0]
    run = StageRun(start=5, seconds=100.0, clock=lambda: now[0])
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer, scheduler = _optimizer([param], 1e-3, 1000, warmup=20, start=5)
    progress = Progress('vae', 1000, 1000, lambda message: None, start=5)
    it, total = 5, 1000
    while it < total:
        now[0] = 2.0 * (it - 5)  # 2 s an iteration
        total, resized = _resized(run, it, total, optimizer, 20, progress)
        scheduler = resized or scheduler
        if it == 45:
            assert total == 45 + int((100 - 80) / 2)  # iteration 40 of the run: 80 s spent, 20 left, 2 s each
        optimizer.step()
        scheduler.step()
        it += 1
    assert it == total == progress.total == 55 and scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)
    assert StageRun(seconds=None).sized(40, 1000) is None  # no budget: the file's schedule
    fast = StageRun(seconds=1e6, clock=lambda: 0.0)
    assert [fast.sized(i, 1000) for i in (0, 10, 40)] == [None, None, 1000]  # at most the file's iterations
