"""The demo backbone's training run (tools/train_demo_backbone.py is its command line; docs/demo_backbone.md).

Stages: line pool -> VAE -> TransOCR -> latent cache -> IDM + MoM. Each stage's result is kept in ``work_dir``
(``<stage>.safetensors``) and reused when run again, so an interrupted run resumes at the stage it was in (delete a
stage file to retrain it; a new VAE or TransOCR also retrains the IDM stage, which reads their latents and text
priors). The result goes to ``output_dir``: ``difftsr_demo.safetensors``, ``transocr_demo.safetensors`` and
``manifest.json`` (how they were made). Deterministic given ``seed`` and ``num_threads``.
"""
import datetime
import json
import os
import platform
import sys
import time
from typing import Optional

import torch

from tola_lab.demo import scores
from tola_lab.demo import training_stages as stages
from tola_lab.demo.latents import build_latent_cache
from tola_lab.demo.pool import build_pool
from tola_plugin.archs.backbone_builder import load_difftsr, load_transocr, save_converted
from tola_plugin.archs.idm_unet_arch import DiffTSRIDMUNet
from tola_plugin.archs.mom_arch import DiffTSRMoM
from tola_plugin.archs.tola_arch import TOLANet
from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.archs.vae_arch import DiffTSRVAE
from tola_plugin.checkpoints.demo_backbone import DIFFTSR_FILE, MANIFEST_FILE, TRANSOCR_FILE
from tola_plugin.checkpoints.transocr import save_transocr
from tola_plugin.commands.data_preparation.image_checks import sha256_file
from tola_plugin.options.reader import read_option_file
from tola_plugin.utils.checkpoint_io import require_file
from tola_plugin.utils.user_text import say

STAGES = ('vae', 'transocr', 'idm')
REQUIRED = ('name', 'seed', 'num_threads', 'work_dir', 'output_dir', 'data', 'vae', 'transocr', 'idm')
OPTIONAL = ('device', )  # 'cpu' (default) or 'cuda'


def read_options(path: str) -> dict:
    opt = read_option_file(require_file(path, 'option file', 'Give e.g. options/demo/train_demo_backbone.yml.'))
    missing = [k for k in REQUIRED if k not in opt]
    if missing:
        raise ValueError(f'{path}: missing option(s) {missing}')
    unknown = sorted(set(opt) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise ValueError(f'{path}: unknown option(s) {unknown}; expected {list(REQUIRED)} and optionally '
                         f'{list(OPTIONAL)}')
    return opt


class Logger:
    """Print and append to ``<work_dir>/train.log`` (flushed, so a background run can be followed)."""

    def __init__(self, path: str):
        self.file = open(path, 'a', encoding='utf-8')

    def __call__(self, message: str) -> None:
        line = f'{datetime.datetime.now():%Y-%m-%d %H:%M:%S} {message}'
        say(line, sys.stdout)
        self.file.write(line + '\n')
        self.file.flush()


class StageRecords:
    """``<work_dir>/stages.json``: what each stage file was made with and its results. Read afresh on every
    question and merged on every write, so a second process may train another stage (``--only``) at the
    same time."""

    def __init__(self, work: str, opt: dict, log):
        self.work, self.opt, self.log = work, opt, log
        self.path = os.path.join(work, 'stages.json')

    def file(self, stage: str) -> str:
        return os.path.join(self.work, f'{stage}.safetensors')

    def _read(self) -> dict:
        if not os.path.isfile(self.path):
            return {}
        with open(self.path, encoding='utf-8') as f:
            return json.load(f)

    def get(self, stage: str) -> dict:
        return self._read().get(stage, {})

    def made_with(self, stage: str) -> list:
        """The options a stage's result depends on (font files by name: a carried folder may move between machines;
        ``workers`` changes nothing)."""
        data = {k: v for k, v in self.opt['data'].items() if k != 'workers'}
        if data.get('fonts'):
            data['fonts'] = [os.path.basename(str(f)) for f in data['fonts']]
        return [self.opt[stage], data, int(self.opt['seed']), int(self.opt['num_threads'])]

    def digest(self, stage: str) -> str:
        """sha256 of a stage file (the identity of the inputs of the stages after it)."""
        return sha256_file(self.file(stage))

    def reusable(self, stage: str, inputs: dict = None) -> bool:
        """True if the stage file exists and was made with the current options (and ``inputs``)."""
        if not os.path.isfile(self.file(stage)):
            return False
        entry = self.get(stage)
        if entry.get('made_with') != self.made_with(stage) or entry.get('inputs') != inputs:
            self.log(f'{stage}: {self.file(stage)} was made with other options or inputs; training it again')
            return False
        self.log(f'{stage}: reusing {self.file(stage)}')
        return True

    def record(self, key: str, result: dict, inputs: dict = None, stage: str = None) -> None:
        """Merge ``result`` under ``key`` (a stage, or ``<stage>_partial`` with ``stage`` given)."""
        stage = stage or key
        records = self._read()
        total = result['iterations'] if 'iterations' in result else self.opt[stage]['iterations']
        records[key] = dict(result, iterations=int(total), made_with=self.made_with(stage), inputs=inputs)
        tmp = self.path + f'.{os.getpid()}.tmp'
        with open(tmp, 'w', encoding='utf-8') as f:
            json.dump(records, f, indent=1)
        os.replace(tmp, self.path)


def file_mb(path: str) -> float:
    return round(os.path.getsize(path) / 1e6, 3)


class StoppedAtDeadline(Exception):
    """A stage reached the run's deadline: its partial file and record are kept, and the next run resumes it."""


class StageTrainer:
    """Trains (or reuses, or resumes) one stage: ``<stage>.safetensors`` when finished; when a run stops at its
    deadline, ``<stage>.partial.safetensors`` and ``stages.json``'s ``<stage>_partial`` (iterations done, what it was
    made with); a warm start (``init_dir``) begins from that folder's ``<stage>.safetensors`` instead of random
    weights (recorded as an input, so it is retrained when the start changes)."""

    def __init__(self, records: StageRecords, device: str, deadline, clock, init_dir, log):
        self.records, self.device, self.deadline, self.clock = records, device, deadline, clock
        self.init_dir, self.log = init_dir, log

    def init_file(self, stage: str):
        path = os.path.join(self.init_dir, f'{stage}.safetensors') if self.init_dir else None
        return path if path and os.path.isfile(path) else None

    def inputs(self, stage: str, inputs=None):
        init = self.init_file(stage)
        return inputs if init is None else dict(inputs or {}, init=sha256_file(init))

    def __call__(self, stage: str, build, load, save, train, inputs=None, score=None):
        """-> the stage's modules (on ``device``), reused, or trained and saved: ``build()`` new modules, ``load(path)``
        modules from a file, ``save(modules, path)``, ``train(modules, run) -> result`` (its 'iterations_done'); with
        ``keep: true`` in the stage's options, ``init_dir``'s file as it is, scored by ``score(modules)``."""
        inputs = self.inputs(stage, inputs)
        records = self.records
        if records.reusable(stage, inputs):
            return self._to(load(records.file(stage)))
        if records.opt[stage].get('keep'):
            return self._kept(stage, load, save, score, inputs)
        partial = records.get(f'{stage}_partial')
        partial_file = records.file(f'{stage}.partial')
        start = 0
        if (os.path.isfile(partial_file) and partial.get('made_with') == records.made_with(stage)
                and partial.get('inputs') == inputs):
            modules, start = load(partial_file), int(partial['iterations_done'])
            self.log(f'{stage}: resuming {partial_file} at iteration {start}')
        elif self.init_file(stage):
            modules = load(self.init_file(stage))
            self.log(f'{stage}: starting from {self.init_file(stage)}')
        else:
            modules = build()
        modules = self._to(modules)
        budget = records.opt[stage].get('seconds')  # a GPU's stage: its schedule sized to this many seconds
        result = train(
            modules,
            stages.StageRun(self.device, start, self.deadline, self.clock, None if budget is None else float(budget)))
        total = int(result.get('iterations', records.opt[stage]['iterations']))
        if result['iterations_done'] < total:
            save(self._cpu(modules), partial_file)
            records.record(f'{stage}_partial', result, inputs, stage)
            raise StoppedAtDeadline(f'{stage}: stopped at the deadline after {result["iterations_done"]}/{total} '
                                    f'iterations; {partial_file} kept, the next run resumes it')
        save(self._cpu(modules), records.file(stage))
        records.record(stage, result, inputs)
        if os.path.isfile(partial_file):
            os.remove(partial_file)
        return self._to(modules)

    def _kept(self, stage: str, load, save, score, inputs):
        """``keep: true``: the stage is ``init_dir``'s file, untrained (a lease's time goes to the other stages)."""
        ignored = sorted(set(self.records.opt[stage]) - {'config', 'keep'})
        if ignored:
            raise ValueError(f'{stage}: keep: true trains nothing, so {ignored} would be ignored; remove them')
        if self.init_file(stage) is None:
            raise FileNotFoundError(f'{stage}: keep: true keeps init_dir\'s {stage}.safetensors, and there is none '
                                    f'(init_dir {self.init_dir!r})')
        modules = load(self.init_file(stage))
        self.log(f'{stage}: kept as it is ({self.init_file(stage)})')
        save(modules, self.records.file(stage))
        scored = score(self._to(modules)) if score else {}
        self.records.record(stage, dict(scored, kept=True, iterations=0, iterations_done=0, seconds=0.0), inputs)
        return self._to(modules)

    def _to(self, modules):
        return tuple(m.to(self.device) for m in modules)

    def _cpu(self, modules):
        return tuple(m.cpu() for m in modules)


def _frozen_vae(path: Optional[str], init_dir: Optional[str], device: str):
    """``--only idm``'s VAE: ``init_dir``'s vae.safetensors, not trained."""
    if path is None:
        raise FileNotFoundError(f'--only idm encodes with a trained VAE: give --init-dir with vae.safetensors '
                                f'(no such file in {init_dir!r})')
    return load_difftsr(path, ('vae', ))['vae'].to(device)


def train_demo_backbone(opt_path: str, work_dir: str = None, output_dir: str = None, only: str = None,
                        command: str = '', deadline_seconds: float = None, init_dir: str = None,
                        clock=time.monotonic) -> int:
    """Run (or resume) the stages of ``opt_path`` (options/demo/train_demo_backbone.yml); ``only`` 'vae',
    'transocr' or 'idm' trains just that stage (and the line pool; 'idm' encodes with ``init_dir``'s VAE, untrained);
    ``command`` is recorded in the manifest;
    ``deadline_seconds``: stop (keeping the stage's partial file) when that many seconds of ``clock`` have passed;
    ``init_dir``: start each stage from that folder's ``<stage>.safetensors`` (an earlier run's, carried in).
    -> 0 when the result is written, 3 when the run stopped at its deadline (run again to resume)."""
    opt = read_options(opt_path)
    work, out_dir = work_dir or opt['work_dir'], output_dir or opt['output_dir']
    os.makedirs(work, exist_ok=True)
    log = Logger(os.path.join(work, 'train.log'))
    device = str(opt.get('device', 'cpu'))
    torch.set_num_threads(int(opt['num_threads']))
    if device == 'cpu':
        torch.use_deterministic_algorithms(True)
    else:  # on a GPU: TF32 matmuls and cuDNN's autotuner (fixed shapes); not bit-reproducible, recorded as such
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    seed = int(opt['seed'])
    started = time.time()
    deadline = None if deadline_seconds is None else clock() + float(deadline_seconds)
    log(f'train_demo_backbone: {opt_path} seed {seed} threads {opt["num_threads"]} device {device} work_dir {work}')

    data = opt['data']
    common = dict(
        chinese_chars=data.get('chinese_chars'), degradation=data.get('degradation'),
        category_probs=data.get('category_probs', (0.4, 0.2, 0.2, 0.2)), fonts=data.get('fonts'),
        workers=int(data.get('workers', 0)), log=log)
    t0 = time.time()
    pool = build_pool(
        os.path.join(work, 'pool'), int(data['train_lines']), int(data['train_seed']), int(data.get('degradations', 1)),
        **common)
    val = build_pool(os.path.join(work, 'val_pool'), int(data['val_lines']), int(data['val_seed']), 1, **common)
    record = {'pool_seconds': round(time.time() - t0, 1)}

    # ------------------------------------------------------------------------------ stages
    stages_run = StageRecords(work, opt, log)
    trainer = StageTrainer(stages_run, device, deadline, clock, init_dir, log)
    vopt, topt, iopt = opt['vae'], opt['transocr'], opt['idm']
    vae = ocr = None

    def load_vae(path):
        return (load_difftsr(path, ('vae', ))['vae'], )

    def save_vae(modules, path):
        save_converted({'vae': modules[0]}, path)

    def build_vae():
        torch.manual_seed(seed)
        return (DiffTSRVAE(**vopt['config']), )

    def train_vae(modules, run):
        result = stages.train_vae(modules[0], pool, int(vopt['iterations']), int(vopt['batch_size']), vopt['crop'],
                                  float(vopt['lr']), float(vopt.get('kl_weight', 1e-6)),
                                  float(vopt.get('lr_fraction', 0.5)), seed=seed + 1, log=log,
                                  log_every=int(vopt.get('log_every', 50)), run=run)
        if result['iterations_done'] == result['iterations']:
            k = stages.normalise_latent_scale(modules[0],
                                              stages.images(pool.hr, range(min(256, pool.num_lines)), device=device))
            result.update(latent_rescale=k, val_psnr_reconstruction=scores.vae_psnr(modules[0], val))
        return result

    try:
        if only == 'idm':  # the IDM alone, on latents of init_dir's VAE as it is (the shipped one, say)
            vae = _frozen_vae(trainer.init_file('vae'), init_dir, device)
        elif only in (None, 'vae'):
            vae, = trainer('vae', build_vae, load_vae, save_vae, train_vae,
                           score=lambda m: {'val_psnr_reconstruction': scores.vae_psnr(m[0], val)})
            log(f'vae: held-out reconstruction PSNR {stages_run.get("vae")["val_psnr_reconstruction"]:.2f} dB')

        def load_ocr(path):
            return (load_transocr(path), )

        def save_ocr(modules, path):
            save_transocr(modules[0], path)

        def build_ocr():
            torch.manual_seed(seed + 2)
            return (TransOCR(**topt['config']), )

        def score_ocr(modules):
            return dict(
                val_acc_hr=scores.transocr_accuracy(modules[0], val.hr, val.labels),
                val_acc_lr=scores.transocr_accuracy(modules[0], val.lr, val.labels))

        def train_ocr(modules, run):
            result = stages.train_transocr(modules[0], pool, int(topt['iterations']), int(topt['batch_size']),
                                           float(topt['lr']), float(topt.get('hr_fraction', 0.3)), seed=seed + 2,
                                           log=log, log_every=int(topt.get('log_every', 50)), run=run)
            if result['iterations_done'] == result['iterations']:
                result.update(score_ocr(modules))
            return result

        def transocr_stage():
            model, = trainer('transocr', build_ocr, load_ocr, save_ocr, train_ocr, score=score_ocr)
            record_t = stages_run.get('transocr')
            log(f'transocr: held-out accuracy HR {record_t["val_acc_hr"]:.3f}, LR {record_t["val_acc_lr"]:.3f}')
            return model

        # The IDM needs TransOCR only when it trains on predicted text priors; otherwise TransOCR comes last, so a
        # second process (--only transocr) can train it during the VAE and IDM stages.
        text_probs = iopt.get('text_probs')  # absent: train_idm's default, which uses predicted priors
        needs_prior = text_probs is None or float(text_probs.get('predicted', 0)) > 0
        if only == 'idm' and needs_prior:
            raise ValueError(f'{opt_path}: --only idm trains on ground-truth or empty text (idm.text_probs without '
                             f"'predicted'); a TransOCR prior needs the whole run")
        if only == 'transocr' or (only is None and needs_prior):
            ocr = transocr_stage()
        if only in ('vae', 'transocr'):
            log(f'--only {only}: done')
            return 0

        inputs = ({'vae': sha256_file(trainer.init_file('vae'))} if only == 'idm' else
                  {s: stages_run.digest(s)
                   for s in (('vae', 'transocr') if needs_prior else ('vae', ))})
        t0 = time.time()
        cache = build_latent_cache(os.path.join(work, 'latents'), vae, ocr, pool, inputs=inputs, log=log)
        record = dict(record, latent_cache_seconds=round(time.time() - t0, 1))

        def load_idm(path):  # as the option file builds them (the norm's groups are not in the file's shapes)
            nets = load_difftsr(path, ('idm', 'mom'), configs={'idm': iopt['config'], 'mom': iopt['mom_config']})
            return nets['idm'], nets['mom']

        def save_idm(modules, path):
            save_converted({'idm': modules[0], 'mom': modules[1]}, path)

        def build_idm():
            torch.manual_seed(seed + 3)
            return DiffTSRIDMUNet(**iopt['config']), DiffTSRMoM(**iopt['mom_config'])

        def train_idm(modules, run):
            return stages.train_idm(modules[0], modules[1], cache, pool,
                                    int(iopt['iterations']), int(iopt['batch_size']), float(iopt['lr']),
                                    float(iopt.get('one_step_fraction', 0.5)), float(iopt.get('x0_weight', 1.0)),
                                    iopt.get('text_probs'), seed=seed + 3, log=log,
                                    log_every=int(iopt.get('log_every', 50)), run=run,
                                    one_step_path=bool(iopt.get('one_step_path', False)))

        idm, mom = trainer('idm', build_idm, load_idm, save_idm, train_idm, inputs)
        if only == 'idm':
            log(f'--only idm: done ({stages_run.file("idm")})')
            return 0
        if ocr is None:
            ocr = transocr_stage()
    except StoppedAtDeadline as stop:
        log(str(stop))
        return 3
    history = {s: stages_run.get(s) for s in STAGES}
    idm, vae, mom, ocr = (m.cpu() for m in (idm, vae, mom, ocr))

    # ------------------------------------------------------------------------------ result
    os.makedirs(out_dir, exist_ok=True)
    difftsr_path, transocr_path = os.path.join(out_dir, DIFFTSR_FILE), os.path.join(out_dir, TRANSOCR_FILE)
    save_converted({'idm': idm, 'vae': vae, 'mom': mom}, difftsr_path)
    save_transocr(ocr, transocr_path)
    net = TOLANet(backbone_init='checkpoint', difftsr_checkpoint=difftsr_path, transocr_checkpoint=transocr_path,
                  idm_lora=False, vae_lora=False, lrc=None).eval()  # the frozen one-step route, strictly loaded
    one_step = scores.one_step_scores(net, val)
    log('frozen one-step route on the held-out lines: ' + ', '.join(f'{k} {v:.3f}' for k, v in one_step.items()))
    sizes = {DIFFTSR_FILE: file_mb(difftsr_path), TRANSOCR_FILE: file_mb(transocr_path)}
    params = {
        name: sum(p.numel() for p in module.parameters())
        for name, module in (('idm', idm), ('vae', vae), ('mom', mom), ('transocr', ocr))
    }
    manifest = {
        'command': command,
        'options': opt,
        'seed': seed,
        'num_threads': int(opt['num_threads']),
        'stages': {s: {k: v
                       for k, v in history[s].items() if k not in ('made_with', 'inputs')}
                   for s in STAGES},
        **record,
        'held_out_one_step': one_step,
        'held_out_lines': int(data['val_lines']),
        'parameters': params,
        'file_mb': sizes,
        'wall_seconds_this_run': round(time.time() - started, 1),
        'wall_seconds_stages': round(sum(history[s]['seconds'] for s in STAGES), 1),
        'torch': torch.__version__,
        'python': platform.python_version(),
        'date': datetime.date.today().isoformat(),
    }
    with open(os.path.join(out_dir, MANIFEST_FILE), 'w', encoding='utf-8') as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
    log(f'wrote {difftsr_path} ({sizes[DIFFTSR_FILE]} MB), {transocr_path} ({sizes[TRANSOCR_FILE]} MB) and '
        f'{MANIFEST_FILE}; parameters {params}')
    return 0
