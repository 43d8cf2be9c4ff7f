"""Helpers of the BasicSR-launcher tests: a checkout-like folder with BasicSR's own train.py/test.py, any option file
of ours shrunk to a one-iteration CPU run, the commands of a docs page, and BasicSR's launchers run in process."""
import copy
import importlib
import os
import re
import runpy
import shlex
import shutil
import sys
import warnings
from importlib.metadata import entry_points

import yaml

import basicsr

from tola_plugin.metrics.tola_iqa_metric import WEIGHTED_METRICS
from tola_plugin.utils import run_lock
from tola_testing import REPO, load_yaml, tiny_backbone

# Tiny constructor overrides of BasicSR's networks (same classes and code paths, a few channels).
TINY_NETWORKS = {
    'RRDBNet': dict(num_feat=8, num_block=1, num_grow_ch=4),
    'SwinIR': dict(embed_dim=12, depths=[1], num_heads=[2], mlp_ratio=1),
    'EDSR': dict(num_feat=8, num_block=1),
    'RCAN': dict(num_feat=16, num_group=1, num_block=1),
    'VGGStyleDiscriminator': dict(num_feat=4),
    'UNetDiscriminatorSN_basicsr': dict(num_feat=4),
}


def make_checkout(root):
    """``root/basicsr/{train,test}.py``: the installed basicsr package's own launcher scripts, as in a BasicSR
    checkout (the rest of the package is the installed one). Returns the two script paths."""
    scripts = {}
    os.makedirs(os.path.join(root, 'basicsr'), exist_ok=True)
    for name in ('train', 'test'):
        scripts[name] = os.path.join(root, 'basicsr', f'{name}.py')
        shutil.copyfile(os.path.join(os.path.dirname(basicsr.__file__), f'{name}.py'), scripts[name])
    return scripts


def tiny_options(opt, total_iter=1):
    """One of our option files (dict) shrunk for a CPU test: tiny networks, ``total_iter`` iterations of batch 2,
    validation and a checkpoint at the end; the ImageNet-weighted parts (VGG19 perceptual loss of ESRGAN, LPIPS
    trunks) without their files, the text-aware models' TransOCR the demo backbone's. Data paths, models, losses
    and everything else stay as the file says.
    """
    opt = copy.deepcopy(opt)
    opt['num_gpu'] = 0
    for key in ('network_g', 'network_d'):
        net = opt.get(key)
        if net is None:
            continue
        if net['type'] == 'TOLANet':
            for path_key in ('difftsr_checkpoint', 'transocr_checkpoint'):
                net.pop(path_key, None)
            net.update(tiny_backbone())
        else:
            net.update(TINY_NETWORKS[net['type']])
    for phase, ds in opt['datasets'].items():
        if phase == 'train':
            ds.update(batch_size_per_gpu=2, num_worker_per_gpu=0)
    train = opt.get('train')
    if train:
        train['total_iter'] = total_iter
        train['warmup_iter'] = -1
        scheduler = train['scheduler']
        if scheduler['type'] == 'CosineAnnealingRestartLR':
            scheduler.update(periods=[total_iter], restart_weights=[1])
        if train.get('ocr_recognizer'):
            train['ocr_recognizer'] = 'demo'  # the official transocr.pth cannot be here: the demo backbone's TransOCR
        perceptual = train.get('perceptual_opt')
        if perceptual and perceptual['type'] == 'LPIPSLoss':
            perceptual['pretrained_backbone'] = False
        elif perceptual:
            train['perceptual_opt'] = None  # BasicSR's PerceptualLoss would fetch vgg19-dcbb9e9d.pth
        opt['val']['val_freq'] = total_iter
        opt['logger'].update(print_freq=1, save_checkpoint_freq=total_iter)
    metrics = (opt.get('val') or {}).get('metrics') or {}
    for name in [n for n, m in metrics.items() if m.get('type') in WEIGHTED_METRICS]:
        del metrics[name]
    return opt


def write_tiny_option_file(relative, cwd, total_iter=1):
    """The repository's ``relative`` option file, shrunk (``tiny_options``), written to the same path under cwd."""
    path = os.path.join(cwd, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        yaml.safe_dump(
            tiny_options(load_yaml(os.path.join(REPO, relative)), total_iter), f, sort_keys=False, allow_unicode=True)
    return path


def run_basicsr_in_process(module, args, cwd, monkeypatch):
    """``python -m basicsr.train|test ARGS`` in this process: BasicSR's own script runs as ``__main__`` (its root is
    site-packages, so the plugin puts the outputs under ``cwd``)."""
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, 'argv', [module, *args])
    try:
        with warnings.catch_warnings():  # basicsr/__init__ imports basicsr.train itself, and runpy says so
            warnings.filterwarnings('ignore', '.* found in sys.modules after import of package', RuntimeWarning)
            runpy.run_module(module, run_name='__main__', alter_sys=True)
    finally:
        run_lock.release_all()


def run_tool_in_process(script, args):
    """``python tools/SCRIPT ARGS`` in this process (``main(argv)``, the tool convention); returns its status."""
    sys.path.insert(0, os.path.join(REPO, 'tools'))
    try:
        module = __import__(os.path.splitext(script)[0])
    finally:
        sys.path.pop(0)
    return module.main(args)


def doc_commands(relative):
    """The ``python ...`` and ``tola-...`` commands of the ```bash blocks of a docs page, continuation lines joined,
    as argv lists (``python`` itself dropped; a console script keeps its name first)."""
    text = open(os.path.join(REPO, relative), encoding='utf-8').read()
    commands = []
    for block in re.findall(r'```bash\n(.*?)```', text, re.S):
        for line in block.replace('\\\n', ' ').splitlines():
            line = line.split('  #')[0].strip()
            if line.startswith('python '):
                commands.append(shlex.split(line)[1:])
            elif line.startswith('tola-'):
                commands.append(shlex.split(line))
    return commands


def console_script(name):
    """The module of the installed console script ``name`` (its entry point in the package's metadata)."""
    (entry, ) = entry_points(group='console_scripts', name=name)
    return importlib.import_module(entry.module)


def run_doc_command(argv, cwd, monkeypatch, total_iter=1, shrink=True):
    """Run one command of a docs page in ``cwd`` as a shell would (``$VARIABLES`` expanded): BasicSR's launchers in
    process, on the tiny version of their option file (written under ``cwd`` at the same relative path) when
    ``shrink``, else on the option file the command names; the tools (``tools/X.py``, console scripts) through their
    ``main``."""
    argv = [os.path.expandvars(a) for a in argv]
    if argv[0] == '-m' and argv[1] in ('basicsr.train', 'basicsr.test'):
        args = list(argv[2:])
        if shrink:
            write_tiny_option_file(args[args.index('-opt') + 1], cwd, total_iter)
        return run_basicsr_in_process(argv[1], args, cwd, monkeypatch)
    monkeypatch.chdir(cwd)
    if argv[0].startswith('tools/'):
        assert run_tool_in_process(os.path.basename(argv[0]), argv[1:]) == 0, argv
        return None
    if argv[0].startswith('tola-'):
        assert console_script(argv[0]).main(argv[1:]) == 0, argv
        return None
    raise AssertionError(f'no way to run {argv} in the tests')
