"""Install a trained demo model into the package (``tola_plugin/assets/demo/backbone/``), measure it there: the scores
the package records are those of the stored files, on ``make demo``'s 32 held-out lines, through the test launcher and
the demo report (tools/ship_demo_model.py is the command line; docs/demo_backbone.md, "Shipping a demo model").

- ``install_backbone``: a backbone trained elsewhere (the GPU check's demo_model step packs its stage files): the VAE,
  IDM + MoM and TransOCR stage files composed into the two shipped files, stored in float16, and the manifest.
- ``install_stage``: one stage trained on from the shipped one (tools/train_demo_backbone.py ``--only <stage>
  --init-dir``): a TransOCR (float16) or an IDM + MoM (beside the shipped VAE), measured on the stored files, recorded
  in the manifest.
- ``ship_adaptation``: an adaptation checkpoint (LoRA + LRC) copied in as the demo model, measured, and its record
  written (how it was made, given by the caller, and its held-out scores)."""
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from typing import Dict, Optional, Sequence

import yaml

from tola_plugin.checkpoints.demo_backbone import (ADAPTATION_FILE, ADAPTATION_RECORD, DIFFTSR_FILE, MANIFEST_FILE,
                                                   TRANSOCR_FILE, demo_backbone_dir)
from tola_plugin.commands.data_preparation.image_checks import sha256_file
from tola_plugin.options.reader import read_option_file as read_yaml
from tola_plugin.utils.atomic_files import read_json_dict

TEST_OPTIONS = 'options/demo/test_TOLA_demo.yml'
STORED = 'idm float32, vae and mom float16'  # _save_backbone
HELD_OUT = ('demo_data/tola_val', 32, 1)  # make demo's held-out lines: folder, lines, seed


def to_float16(src: str, dst: str, keep: Sequence[str] = ()) -> None:
    """A safetensors file with its floating-point tensors stored in float16 (metadata and other tensors kept); tensors
    whose names start with one of ``keep`` stay in float32."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(src, 'pt') as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(
        {k: v.half() if v.is_floating_point() and not k.startswith(tuple(keep)) else v
         for k, v in tensors.items()}, dst, metadata=meta)


def _save_backbone(nets: Dict, path: str) -> None:
    """The shipped backbone file: VAE and MoM in float16, the IDM in float32 (its ε̂ reaches ẑ0 times 101.6; the
    one-step path's 1/√(1−ᾱ) = 1.00005 is 1 in float16), the path's weights written exactly again where a float16
    stage file (a GPU's pack) rounded them."""
    from tola_lab.demo.one_step_path import FixedPath, is_grafted
    from tola_plugin.archs.backbone_builder import save_converted
    if is_grafted(nets['idm']):
        FixedPath(nets['idm']).restore()
    save_converted(nets, path + '.tmp')
    to_float16(path + '.tmp', path, keep=('idm.', ))
    os.remove(path + '.tmp')


def install_backbone(state: str, folder: Optional[str] = None, command: str = '') -> Dict:
    """Compose ``state``'s stage files (vae, idm + mom, transocr ``.safetensors`` and ``stages.json``; the GPU check's
    ``demo_model.json`` when there) into the shipped backbone files in ``folder`` (default: the package's;
    ``_save_backbone``; TransOCR float16), with a manifest that keeps the one it replaces as ``previous``."""
    from tola_plugin.archs.backbone_builder import load_difftsr, load_transocr
    folder = folder or demo_backbone_dir()
    with open(os.path.join(state, 'stages.json'), encoding='utf-8') as f:
        stages = json.load(f)
    unfinished = [s for s in ('vae', 'idm', 'transocr') if not os.path.isfile(os.path.join(state, f'{s}.safetensors'))]
    if unfinished:
        raise FileNotFoundError(f'{state}: stage(s) {unfinished} not finished (no <stage>.safetensors); run the GPU '
                                f'check\'s demo_model step again with this state carried in')
    run = read_json_dict(os.path.join(state, 'demo_model.json')) or {}
    previous = read_json_dict(os.path.join(folder, MANIFEST_FILE))
    nets = dict(
        load_difftsr(os.path.join(state, 'vae.safetensors'), ('vae', )),
        **load_difftsr(os.path.join(state, 'idm.safetensors'), ('idm', 'mom')))
    _save_backbone(nets, os.path.join(folder, DIFFTSR_FILE))
    to_float16(os.path.join(state, 'transocr.safetensors'), os.path.join(folder, TRANSOCR_FILE))
    ocr = load_transocr(os.path.join(folder, TRANSOCR_FILE))
    parameters = {name: sum(p.numel() for p in m.parameters()) for name, m in dict(nets, transocr=ocr).items()}
    stages = {s: {k: v for k, v in stages[s].items() if k != 'inputs'} for s in ('vae', 'transocr', 'idm')}
    manifest = {
        'command': command, 'trained_from': state, 'stored': STORED, 'trained_on': run.get('device'),
        'started_from': run.get('started_from'), 'backbone_seconds': run.get('backbone_seconds'),
        'held_out_one_step_float32': run.get('held_out_one_step'), 'stages': stages, 'parameters': parameters,
        'file_mb': {f: round(os.path.getsize(os.path.join(folder, f)) / 1e6, 3)
                    for f in (DIFFTSR_FILE, TRANSOCR_FILE)}, 'date': datetime.date.today().isoformat(),
        'previous': previous
    }
    with open(os.path.join(folder, MANIFEST_FILE), 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
    return manifest


def _stage_file(opt_path: str, stage: str, run: str):
    """(stages.json's record of ``stage``, its file) of the run of ``opt_path``: finished or stopped at its deadline."""
    work = read_yaml(opt_path)['work_dir']
    stages = read_json_dict(os.path.join(work, 'stages.json')) or {}
    key = stage if stage in stages else f'{stage}_partial'
    source = os.path.join(work, f'{stage}.safetensors' if key == stage else f'{stage}.partial.safetensors')
    if key not in stages or not os.path.isfile(source):
        raise FileNotFoundError(f'{work}: no {stage} stage file ({stage}[.partial].safetensors with stages.json); '
                                f'run {run} first')
    return {k: v for k, v in stages[key].items() if k not in ('inputs', 'made_with')}, source


def _val_pool(opt_path: str):
    from tola_lab.demo.pool import build_pool
    opt = read_yaml(opt_path)
    data = opt['data']
    return build_pool(
        os.path.join(opt['work_dir'], 'val_pool'), int(data['val_lines']), int(data['val_seed']), 1,
        chinese_chars=data.get('chinese_chars'), degradation=data.get('degradation'),
        category_probs=data.get('category_probs'), fonts=data.get('fonts'))


def _record_continued(folder: str, stage: str, record: Dict, files: Sequence[str]) -> Dict:
    """``record`` as the manifest's ``continued[stage]``, the one it replaces kept as its ``previous``."""
    manifest = read_json_dict(os.path.join(folder, MANIFEST_FILE))
    continued = manifest.setdefault('continued', {})
    record['previous'], continued[stage] = continued.get(stage), record
    for name in files:
        manifest['file_mb'][name] = round(os.path.getsize(os.path.join(folder, name)) / 1e6, 3)
    with open(os.path.join(folder, MANIFEST_FILE), 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
    return record


def install_stage(stage: str, opt_path: str, command: str = '', folder: Optional[str] = None) -> Dict:
    """The ``stage`` ('transocr' or 'idm') of the run of ``opt_path`` (tools/train_demo_backbone.py ``--only <stage>
    --init-dir``: its work_dir's stage file, finished or stopped at its deadline) installed in the shipped files of
    ``folder`` (default: the package's): TransOCR in float16; an IDM + MoM in the backbone file beside the shipped VAE
    (``_save_backbone``); measured on the run's held-out pool from the stored files (TransOCR's accuracy; the frozen
    one-step route), recorded in the manifest's ``continued[stage]``. -> that record."""
    if stage not in ('transocr', 'idm'):
        raise ValueError(f"install_stage: stage {stage!r}: 'transocr' or 'idm' (a VAE trained on moves the latent "
                         f'the IDM was trained in: train the backbone again)')
    from tola_lab.demo.scores import one_step_scores, transocr_accuracy
    from tola_plugin.archs.backbone_builder import load_difftsr, load_transocr
    from tola_plugin.archs.tola_arch import TOLANet
    folder = folder or demo_backbone_dir()
    kept, source = _stage_file(opt_path, stage, f'tools/train_demo_backbone.py -opt {opt_path} --only {stage}')
    val = _val_pool(opt_path)
    difftsr, transocr = os.path.join(folder, DIFFTSR_FILE), os.path.join(folder, TRANSOCR_FILE)
    if stage == 'transocr':
        to_float16(source, transocr)
        ocr = load_transocr(transocr)
        stored, scores = 'float16', dict(
            val_acc_hr=transocr_accuracy(ocr, val.hr, val.labels),
            val_acc_lr=transocr_accuracy(ocr, val.lr, val.labels))
    else:
        _save_backbone(dict(load_difftsr(difftsr, ('vae', )), **load_difftsr(source, ('idm', 'mom'))), difftsr)
        net = TOLANet(backbone_init='checkpoint', difftsr_checkpoint=difftsr, transocr_checkpoint=transocr,
                      idm_lora=False, vae_lora=False, lrc=None).eval()  # the frozen one-step route, strictly loaded
        stored, scores = STORED, dict(held_out_one_step=one_step_scores(net, val))
    record = dict(kept, option_file=opt_path, command=command, source=source, stored=stored,
                  date=datetime.date.today().isoformat(), **scores)
    return _record_continued(folder, stage, record, (TRANSOCR_FILE if stage == 'transocr' else DIFFTSR_FILE, ))


def held_out_lines(root: str) -> str:
    """``make demo``'s held-out lines (rendered like tools/run_demo.sh when absent). -> their folder."""
    folder, num, seed = HELD_OUT
    folder = os.path.join(root, folder)
    if not os.path.isfile(os.path.join(folder, 'labels.tsv')):
        from tola_plugin.commands.data_preparation.rendered_lines import write_rendered_lines
        write_rendered_lines(num, seed=seed, out=folder, chinese_chars='demo')
    return folder


def measure(root: str, work: str, adaptation: str = 'demo', log=print) -> Dict:
    """The demo backbone with ``adaptation`` ('demo': the shipped one, as stored) on the held-out lines: the test
    launcher, then the demo report (PSNR/SSIM, PP-OCRv4 and TransOCR of LR and TOLA). -> the report."""
    from tola_lab.demo.report import make_report
    lines = held_out_lines(root)
    opt = read_yaml(os.path.join(root, TEST_OPTIONS))
    opt['name'] = 'demo_TOLA_shipped' if adaptation == 'demo' else 'demo_TOLA_measured'
    opt['path']['pretrain_network_g'] = adaptation if adaptation == 'demo' else os.path.abspath(adaptation)
    test = opt['datasets']['test_1']
    test.update(dataroot_gt=lines, labels=os.path.join(lines, 'labels.tsv'))
    os.makedirs(work, exist_ok=True)
    option_file = os.path.join(work, 'test_shipped.yml')
    with open(option_file, 'w', encoding='utf-8') as f:
        yaml.safe_dump(opt, f, sort_keys=False, allow_unicode=True)
    subprocess.run([sys.executable, '-m', 'tola_plugin.test', '-opt', option_file], cwd=work, check=True)
    return make_report(option_file, results_dir=os.path.join(work, 'results', opt['name']), log=log)


def ship_adaptation(adaptation: str, provenance: Dict, root: str, work: str, log=print) -> Dict:
    """Copy ``adaptation`` in as the demo model, measure it as stored, and write its record (``provenance``: what,
    commands, option file, objective, iterations, batch, threads, seconds, machine). -> the record."""
    folder = demo_backbone_dir()
    target = os.path.join(folder, ADAPTATION_FILE)
    if not (os.path.exists(target) and os.path.samefile(adaptation, target)):  # the shipped one re-measured
        shutil.copy2(adaptation, target)
    report = measure(root, work, log=log)
    record = dict(
        provenance, sha256=sha256_file(target), bytes=os.path.getsize(target),
        network_g=read_yaml(os.path.join(root, TEST_OPTIONS))['network_g'], torch=_torch_version(),
        python=platform.python_version(), measured=datetime.date.today().isoformat(), held_out={
            'lines': report['held_out_lines'],
            'note': 'measured on the stored files by tools/ship_demo_model.py (test launcher + demo report, colour fix '
            'none)', 'LR': report['LR'], 'TOLA': report['TOLA'], 'TOLA_psnr_by_color_fix': report['color_fix_psnr']
        })
    with open(os.path.join(folder, ADAPTATION_RECORD), 'w', encoding='utf-8') as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
    return record


def _torch_version() -> str:
    import torch
    return torch.__version__
