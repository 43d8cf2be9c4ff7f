"""The GPU check's demo_model step: trains the demo model on the lent GPU within the time left, resumably, and packs
what the next lease or this repository needs into ``out`` (at most ``MAX_FILES`` files of ``MAX_FILE_BYTES``).

1. The demo backbone (options/demo/train_demo_backbone_gpu.yml: the shipped sizes, longer schedules, larger batches):
   its line pool rendered on the machine's cores with the carried font subsets (``CARRY/fonts``: the image has no CJK
   font), then VAE, IDM + MoM and TransOCR (``lab/demo/training``), each sized to its time budget, stopping at the
   deadline with the stage in progress kept. ``CARRY/demo_model_state`` (an earlier lease's packed files) is unpacked
   first, so its finished stages are reused and its unfinished one resumes. Each stage starts from the shipped one when
   the option file builds the same architecture (``shipped_start``: the CPU trained them for hours).
2. When the backbone is finished: TOLA's adaptation of it (options/demo/train_TOLA_demo.yml with the GPU's batch and
   iterations that fit the time left; from the carried adaptation when there is one, else from the shipped one when
   the backbone started from the shipped stages), through BasicSR's launcher. Its lines render in a second process
   while the backbone trains.
3. Held-out scores (the backbone's held-out pool: LR, TOLA, TOLA without its text; PSNR and TransOCR accuracy).
4. ``out``: the stage files (``pack_state``: float16, the IDM float32), the adaptation, ``demo_model.json`` (the
   record) and the log.

Measured for real here, not on the GPU: the scores the package ships with (tools/ship_demo_model.py, on the stored
files). A dry run does all of it on the CPU with the tests' tiny backbone and a few iterations."""
import glob
import json
import os
import shutil
import sys
import time
from typing import Dict, Optional

import torch

from tola_lab.gpu_check.configs import read_yaml, write_yaml
from tola_plugin.checkpoints.demo_backbone import MANIFEST_FILE, demo_adaptation_path
from tola_plugin.utils.atomic_files import read_json_dict
from tola_plugin.utils.process_tree import TreeTimeout, run_tree

GPU_BACKBONE = 'options/demo/train_demo_backbone_gpu.yml'
DRY_RUN_BACKBONE = 'tests/data/demo_backbone/tiny_backbone.yml'
ADAPTATION = 'options/demo/train_TOLA_demo.yml'
STATE = 'demo_model_state'  # in the carry: an earlier lease's ``out``
FONTS = 'fonts'  # in the carry: font subsets of the demo's characters (``lab/demo/fonts``)
ADAPTATION_FILE = 'adaptation.pth'
RECORD_FILE = 'demo_model.json'
MAX_FILES, MAX_FILE_BYTES = 6, 16 * 2**20  # what comes back from a lease: 8 files (2 are the report's) of 16 MiB
LOG_TAIL_LINES = 200  # of the backbone's train.log, kept in the record (a file of its own would be a seventh)
# The adaptation on a GPU: batch, lines, and seconds per iteration assumed when sizing its schedule to the time left
# (an H100 trains the full-size TOLA at 0.71 s per batch-16 iteration; the demo's is far smaller, its text prior's 24
# greedy steps dominate). A run slower than that is stopped at the deadline and its last checkpoint kept.
GPU_ADAPTATION = dict(batch=16, lines=3000, seconds_per_iteration=0.15, checkpoint_every=200, min_iter=200,
                      max_iter=20000)
DRY_ADAPTATION = dict(batch=2, lines=4, seconds_per_iteration=5.0, checkpoint_every=2, min_iter=2, max_iter=4)
RESERVE_S = 60  # after training: held-out scores and packing


def carried_fonts(data: str):
    """The carried font files; FileNotFoundError naming the folder and the command that writes it."""
    fonts = sorted(glob.glob(os.path.join(data, FONTS, '*.ttf')))
    if not fonts:
        raise FileNotFoundError(f'no font subsets in {os.path.join(data, FONTS)}: the GPU image has no CJK font; '
                                f'`make gpu-carry` writes them (lab/demo/fonts.py)')
    return fonts


def pack_state(work: str, out: str) -> Dict[str, str]:
    """The backbone's stage files of ``work`` (finished and partial) in float16 but the IDM (float32: its ε̂ reaches ẑ0
    times 101.6, the shipped file keeps it so), and its ``stages.json`` with each
    recorded input digest (the IDM's record names its VAE file's) rewritten to the float16 file's, so the next run
    that unpacks them reuses and resumes exactly what this one finished and left. -> {file written: its sha256}."""
    from tola_lab.demo.shipping import to_float16
    from tola_plugin.commands.data_preparation.image_checks import sha256_file
    os.makedirs(out, exist_ok=True)
    digests = {}
    for path in sorted(glob.glob(os.path.join(work, '*.safetensors'))):
        target = os.path.join(out, os.path.basename(path))
        to_float16(path, target, keep=('idm.', ))
        digests[sha256_file(path)] = sha256_file(target)
    records_path = os.path.join(work, 'stages.json')
    if os.path.isfile(records_path):
        with open(records_path, encoding='utf-8') as f:
            text = f.read()
        for old, new in digests.items():
            text = text.replace(old, new)
        with open(os.path.join(out, 'stages.json'), 'w', encoding='utf-8') as f:
            f.write(text)
    return {os.path.basename(p): sha256_file(p) for p in sorted(glob.glob(os.path.join(out, '*.safetensors')))}


def unpack_state(state: str, work: str) -> bool:
    """Copy an earlier lease's packed stage files and records into ``work`` (unless ``work`` has records of its own,
    which are newer). -> whether anything was unpacked."""
    if not os.path.isfile(os.path.join(state, 'stages.json')) or os.path.isfile(os.path.join(work, 'stages.json')):
        return False
    os.makedirs(work, exist_ok=True)
    for path in glob.glob(os.path.join(state, '*.safetensors')) + [os.path.join(state, 'stages.json')]:
        shutil.copy2(path, work)
    return True


def shipped_start(opt: Dict, work: str) -> Dict[str, str]:
    """The backbone training's ``init_dir``: a folder holding the shipped demo model's stage files whose architecture
    ``opt`` builds (the TransOCR; the VAE; the IDM + MoM when the VAE starts there too, its latent space being the
    VAE's), so a GPU trains on from what the CPU trained for hours. -> {'folder', stage: 'the shipped ...'}; no
    folder when none matches (every stage starts from random weights)."""
    from tola_plugin.archs.backbone_builder import load_difftsr, save_converted
    from tola_plugin.checkpoints.demo_backbone import demo_checkpoint_paths
    from tola_plugin.checkpoints.difftsr import read_converted
    from tola_plugin.checkpoints.transocr import read_transocr_safetensors
    difftsr, transocr = demo_checkpoint_paths()
    _, configs = read_converted(difftsr, ('vae', 'idm', 'mom'))
    same = lambda mine, shipped: all(shipped.get(k) == v for k, v in mine.items())  # noqa: E731
    matches = {
        'transocr': same(opt['transocr']['config'],
                         read_transocr_safetensors(transocr)[1]), 'vae': same(opt['vae']['config'], configs['vae'])
    }
    matches['idm'] = matches['vae'] and same(opt['idm']['config'], configs['idm']) and same(
        opt['idm']['mom_config'], configs['mom'])
    if not any(matches.values()):
        return {}
    folder = os.path.join(work, 'init')
    os.makedirs(folder, exist_ok=True)
    if matches['transocr']:
        shutil.copy2(transocr, os.path.join(folder, 'transocr.safetensors'))
    for stage, parts in (('vae', ('vae', )), ('idm', ('idm', 'mom'))):
        if matches[stage]:  # in float32, as a stage file of a run
            save_converted(load_difftsr(difftsr, parts), os.path.join(folder, f'{stage}.safetensors'))
    return dict({s: f'the shipped demo {s}' for s, m in matches.items() if m}, folder=folder)


def backbone_options(root: str, data: str, work: str, dry_run: bool) -> str:
    """The backbone's option file for this machine: the GPU file (dry run: the tests' tiny one on the CPU) with the
    carried fonts and the step's folders. -> its path."""
    opt = read_yaml(os.path.join(root, DRY_RUN_BACKBONE if dry_run else GPU_BACKBONE))
    opt['data']['fonts'] = carried_fonts(data)
    opt.update(work_dir=os.path.join(work, 'backbone'), output_dir=os.path.join(work, 'backbone', 'out'))
    if not dry_run:
        opt['data']['workers'] = min(int(opt['data']['workers']), max(1, (os.cpu_count() or 2) - 2))
    return write_yaml(os.path.join(work, 'backbone.yml'), opt)


def adaptation_lines(work: str, fonts, dry_run: bool):
    """Start rendering the adaptation's lines (seed 0, as ``make demo``'s) in a second process, so they are ready when
    the backbone is. -> (the process, or None when they exist; their folder)."""
    import multiprocessing

    from tola_plugin.commands.data_preparation.rendered_lines import write_rendered_lines
    lines = os.path.join(work, 'adaptation_lines')
    if os.path.isfile(os.path.join(lines, 'labels.tsv')):
        return None, lines
    size = DRY_ADAPTATION if dry_run else GPU_ADAPTATION
    process = multiprocessing.get_context('spawn').Process(
        target=write_rendered_lines, args=(size['lines'], ), kwargs=dict(seed=0, out=lines, fonts=fonts,
                                                                         chinese_chars='demo'), daemon=True)
    process.start()
    return process, lines


def adaptation_options(root: str, work: str, backbone_out: str, lines: str, start: Optional[str], dry_run: bool,
                       seconds: float) -> Dict:
    """``make demo``'s adaptation of the trained backbone on ``lines``, sized to ``seconds``; from the adaptation
    checkpoint ``start`` when given. -> {'option_file', 'total_iter'}."""
    from tola_plugin.checkpoints.demo_backbone import DIFFTSR_FILE, TRANSOCR_FILE
    size = DRY_ADAPTATION if dry_run else GPU_ADAPTATION
    total = min(size['max_iter'], max(size['min_iter'], int(seconds / size['seconds_per_iteration'])))
    opt = read_yaml(os.path.join(root, ADAPTATION))
    opt.update(name='demo_TOLA_gpu', num_gpu=0 if dry_run else 1)
    train_set = opt['datasets']['train']
    train_set.update(dataroot_gt=lines, labels=os.path.join(lines, 'labels.tsv'), batch_size_per_gpu=size['batch'],
                     num_worker_per_gpu=0 if dry_run else 12, dataset_enlarge_ratio=100)
    opt['network_g'].update(backbone_init='checkpoint', difftsr_checkpoint=os.path.join(backbone_out, DIFFTSR_FILE),
                            transocr_checkpoint=os.path.join(backbone_out, TRANSOCR_FILE))
    opt['path']['pretrain_network_g'] = start
    train = opt['train']
    train.update(total_iter=total, warmup_iter=min(int(train.get('warmup_iter', 0)), total // 10))
    train['scheduler']['periods'] = [total]
    opt['logger'].update(print_freq=max(1, total // 20), save_checkpoint_freq=size['checkpoint_every'])
    return {'option_file': write_yaml(os.path.join(work, 'adaptation.yml'), opt), 'total_iter': total}


def launch_training(option_file: str, seconds: float, cwd: str) -> Dict:
    """BasicSR's launcher (``tola_plugin.train``) on ``option_file`` in ``cwd``, killed with its workers after
    ``seconds``. -> {'exit_status', 'output_tail' (why it failed, else ''), 'seconds'}."""
    t0, record = time.monotonic(), {'output_tail': ''}
    try:
        proc = run_tree([sys.executable, '-m', 'tola_plugin.train', '-opt', option_file], timeout=seconds, cwd=cwd)
        record.update(exit_status=proc.returncode, output_tail=proc.stderr[-1500:] if proc.returncode else '')
    except TreeTimeout:
        record['exit_status'] = 'stopped at the deadline (its last checkpoint kept)'
    return dict(record, seconds=round(time.monotonic() - t0, 1))


def latest_checkpoint(experiment: str) -> Optional[str]:
    """The newest network checkpoint BasicSR saved (``net_g_latest.pth`` or the highest ``net_g_N.pth``)."""
    models = os.path.join(experiment, 'models')
    latest = os.path.join(models, 'net_g_latest.pth')
    if os.path.isfile(latest):
        return latest
    numbered = glob.glob(os.path.join(models, 'net_g_*.pth'))
    return max(numbered, key=lambda p: int(os.path.basename(p)[6:-4]), default=None)


def held_out_scores(adaptation: str, network: Dict, val_pool: str, device: str) -> Dict:
    """The trained model (``network``: the adaptation's network_g, on the trained backbone's files) on the backbone's
    held-out pool: PSNR and TransOCR accuracy of the LR input, of TOLA and of TOLA with the null text prior
    (``*_tola_null_prior``: how much the IDM uses the text)."""
    from tola_lab.demo.pool import open_pool
    from tola_lab.demo.scores import one_step_scores
    from tola_plugin.archs.tola_arch import TOLANet
    net = TOLANet(**{k: v for k, v in network.items() if k != 'type'})
    net.load_adaptation_checkpoint(adaptation)
    pool = open_pool(val_pool)
    scores = one_step_scores(net.to(device).eval(), pool)
    blind = one_step_scores(net.set_switches(text_prior='null'), pool)
    scores.update({f'{k}_null_prior': blind[k] for k in ('psnr_one_step', 'transocr_acc_one_step')})
    return {k.replace('one_step', 'tola'): round(v, 4) for k, v in scores.items()}


def demo_model_step(root: str, data: str, work: str, dry_run: bool, out: str, seconds: float) -> Dict:
    """Train within ``seconds`` (less ``RESERVE_S``), pack into ``out``; -> the step's figures."""
    from tola_lab.demo.training import train_demo_backbone
    start = time.monotonic()
    device = 'cpu' if dry_run else 'cuda'
    if not dry_run and not torch.cuda.is_available():
        return {'passed': False, 'error': 'no usable GPU'}
    fonts = carried_fonts(data)
    os.makedirs(work, exist_ok=True)
    state = os.path.join(data, STATE)
    unpacked = unpack_state(state, os.path.join(work, 'backbone'))
    option_file = backbone_options(root, data, work, dry_run)
    opt = read_yaml(option_file)
    left = lambda: seconds - RESERVE_S - (time.monotonic() - start)  # noqa: E731
    renderer, lines = adaptation_lines(work, fonts, dry_run)
    shipped = shipped_start(opt, work)
    rc = train_demo_backbone(option_file, command=f'GPU check demo_model step ({"dry run" if dry_run else device})',
                             deadline_seconds=max(left(), 1.0), init_dir=shipped.get('folder'))
    with open(os.path.join(opt['work_dir'], 'stages.json'), encoding='utf-8') as f:
        stages = json.load(f)
    record = {
        'device': torch.cuda.get_device_name(0) if device == 'cuda' else 'cpu (dry run)', 'unpacked_state': unpacked,
        'started_from': {s: shipped.get(s, 'random weights')
                         for s in ('vae', 'idm', 'transocr')},
        'backbone': 'finished' if rc == 0 else 'stopped at the deadline (resumes from the packed files)',
        'stages': stages, 'backbone_seconds': round(time.monotonic() - start, 1)
    }
    adaptation = None
    if rc == 0:  # the frozen one step on the held-out pool as the backbone's run measured it (float32), then TOLA
        record['held_out_one_step'] = read_json_dict(os.path.join(opt['output_dir'],
                                                                  MANIFEST_FILE))['held_out_one_step']
        carried = os.path.join(state, ADAPTATION_FILE)
        begin = (carried if os.path.isfile(carried) else demo_adaptation_path() if 'idm' in shipped else None)
        if renderer is not None:
            renderer.join(max(left(), 1.0))
            renderer.terminate()
        sized = adaptation_options(root, work, opt['output_dir'], lines, begin, dry_run, max(left() - 30, 1.0))
        record['adaptation'] = dict(sized, started_from=begin or 'fresh adapters')
        if os.path.isfile(os.path.join(lines, 'labels.tsv')):
            record['adaptation'].update(launch_training(sized['option_file'], max(left(), 1.0), work))
        else:
            record['adaptation'].update(
                exit_status=f'the adaptation\'s lines were not rendered in time ({lines}; the '
                f'renderer\'s exit code {renderer.exitcode})', seconds=0.0)
        adaptation = latest_checkpoint(os.path.join(work, 'experiments', 'demo_TOLA_gpu'))
        if adaptation is not None:
            network = read_yaml(sized['option_file'])['network_g']
            record['held_out'] = held_out_scores(adaptation, network, os.path.join(opt['work_dir'], 'val_pool'), device)
    pack_state(opt['work_dir'], out)
    if adaptation is not None:
        shutil.copy2(adaptation, os.path.join(out, ADAPTATION_FILE))
    with open(os.path.join(opt['work_dir'], 'train.log'), encoding='utf-8') as f:
        record['backbone_log_tail'] = f.read().splitlines()[-LOG_TAIL_LINES:]
    record['seconds'] = round(time.monotonic() - start, 1)
    with open(os.path.join(out, RECORD_FILE), 'w', encoding='utf-8') as f:
        json.dump(record, f, indent=1, default=str)
    files = {name: os.path.getsize(os.path.join(out, name)) for name in os.listdir(out)}
    fits = len(files) <= MAX_FILES and max(files.values()) <= MAX_FILE_BYTES
    return {
        'passed': fits and rc in (0, 3), 'backbone': record['backbone'], 'held_out': record.get('held_out'),
        'adaptation': {k: v
                       for k, v in record.get('adaptation', {}).items()
                       if k != 'output_tail'}, 'out': out, 'files': files, 'seconds': record['seconds']
    }
