"""One step of the GPU check in a process of its own (``python -m tola_lab.gpu_check.step_child STEP RESULT_JSON
--root ROOT --data DATA --work WORK --seconds S --report-dir DIR [--dry-run]``): a step that crashes, hangs or leaves
the GPU's memory in a bad state ends with its process, which run.py kills with everything it started when the deadline
comes."""
import argparse
import json
import os
import sys
import traceback
from typing import Callable, Dict

from tola_plugin.utils.user_text import say


def step_functions(root: str, data: str, work: str, dry_run: bool, seconds: float = 0.0,
                   report_dir: str = '') -> Dict[str, Callable[[], Dict]]:
    """{step name: a call running it}; each step's module is imported when it runs. ``seconds``: the step's time;
    ``report_dir``: where a step writes the files a lease brings back."""

    def smoke():
        from tola_lab.gpu_check.smoke_step import smoke_step
        return smoke_step(root, data, dry_run)

    def memory():
        from tola_lab.gpu_check.memory_step import memory_step
        return memory_step(root, data, work, dry_run)

    def precision():
        from tola_lab.gpu_check.precision_step import precision_step
        return precision_step(root, data, dry_run)

    def inference():
        from tola_lab.gpu_check.inference_step import inference_step
        return inference_step(root, work, dry_run, seconds)

    def cuda_tests():
        from tola_lab.gpu_check.cuda_tests_step import cuda_tests_step
        return cuda_tests_step(root, data, work, dry_run, seconds)

    def demo_model():
        from tola_lab.gpu_check.demo_model_step import demo_model_step
        return demo_model_step(root, data, work, dry_run, os.path.join(report_dir, 'demo_model'), seconds)

    def rrdb_baseline():
        from tola_lab.gpu_check.rrdb_baseline_step import rrdb_baseline_step
        return rrdb_baseline_step(root, data, work, dry_run, os.path.join(report_dir, 'rrdb_baseline'), seconds)

    def resume():
        from tola_lab.gpu_check.resume_step import resume_step
        return resume_step(root, data, os.path.join(work, 'resume'), dry_run)

    def shared_gpu():
        from tola_lab.gpu_check.shared_gpu_step import shared_gpu_step
        return shared_gpu_step(root, data, os.path.join(work, 'shared_gpu'), dry_run)

    return {
        'smoke': smoke, 'demo_model': demo_model, 'rrdb_baseline': rrdb_baseline, 'memory': memory,
        'precision': precision, 'inference': inference, 'cuda_tests': cuda_tests, 'resume': resume,
        'shared_gpu': shared_gpu
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('step')
    parser.add_argument('result')
    parser.add_argument('--root', required=True)
    parser.add_argument('--data', required=True)
    parser.add_argument('--work', required=True)
    parser.add_argument('--seconds', type=float, default=0.0)
    parser.add_argument('--report-dir', default='')
    parser.add_argument('--dry-run', action='store_true')
    args = parser.parse_args(argv)
    steps = step_functions(args.root, args.data, args.work, args.dry_run, args.seconds, args.report_dir)
    try:
        result = steps[args.step]()
    except Exception as err:  # the step's error, reported with its traceback; the parent goes on to the next step
        result = {'passed': False, 'error': f'{type(err).__name__}: {err}', 'traceback': traceback.format_exc()}
        for line in result['traceback'].splitlines():  # into the step's log
            say(line)
    with open(args.result, 'w', encoding='utf-8') as f:
        json.dump(result, f, default=str)
    return 0


if __name__ == '__main__':
    sys.exit(main())
