"""Seconds of one TOLAModel training iteration with the text prior decoded DiffTSR's way and the fast way
(``--train-iteration``)."""
import statistics
import tempfile
import time
from collections import defaultdict
from typing import Dict

from tola_lab.benchmarks.inference_inputs import rendered_lines
from tola_lab.benchmarks.stage_timing import StageTimer
from tola_plugin.models.tola_model import TOLAModel
from tola_plugin.options.reader import read_option_file
from tola_plugin.utils.user_text import say


def training_iterations(opt_path: str, checkpoint, random_weights: bool, repeats: int) -> Dict:
    """Seconds of one TOLAModel training iteration (batch 1, the option file's losses; LPIPS with a random VGG
    trunk under ``random_weights``) with the text prior decoded DiffTSR's way ('full_prefix': before) and the fast
    way ('incremental': after), interleaved, median of ``repeats`` after a warm-up of each."""
    opt = read_option_file(opt_path)
    if 'train' not in opt:
        raise ValueError(f'{opt_path}: --train-iteration needs a training option file (a train block)')
    opt.update(num_gpu=0, dist=False, rank=0, world_size=1, is_train=True, auto_resume=False)
    opt.pop('val', None)
    workdir = tempfile.mkdtemp(prefix='tola_train_bench_')
    opt['path'] = {
        'pretrain_network_g': checkpoint, 'strict_load_g': True, 'experiments_root': workdir, 'models': workdir,
        'training_states': workdir, 'log': workdir, 'visualization': workdir
    }
    if random_weights:
        opt['network_g'].update(backbone_init='random')
        if opt['train'].get('perceptual_opt'):
            opt['train']['perceptual_opt']['pretrained_backbone'] = False  # same cost, no ImageNet file
    model = TOLAModel(opt)
    lq, gt, target = rendered_lines(1, with_targets=True)
    model.feed_data({'lq': lq, 'gt': gt, 'ocr_target': target})
    timer = StageTimer(model.bare_net)  # the text prior's share of the iteration
    runs, prior = defaultdict(list), defaultdict(list)
    for repeat in range(repeats + 1):
        for decoding in ('full_prefix', 'incremental'):
            model.bare_net.text_decoding = decoding
            timer.seconds.clear()
            start = time.perf_counter()
            model.optimize_parameters(repeat + 1)
            seconds = time.perf_counter() - start
            say(f'training iteration, text_decoding {decoding}: {seconds:.2f} s (text prior '
                f'{timer.seconds["text prior"]:.2f} s)')
            if repeat:
                runs[decoding].append(seconds)
                prior[decoding].append(timer.seconds['text prior'])
    return {
        'before_full_prefix_s': statistics.median(runs['full_prefix']),
        'after_incremental_s': statistics.median(runs['incremental']),
        'text_prior_before_s': statistics.median(prior['full_prefix']),
        'text_prior_after_s': statistics.median(prior['incremental']), 'all_s': dict(runs),
        'losses': sorted(model.log_dict), 'batch': 1
    }
