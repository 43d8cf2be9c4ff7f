"""Peak resident memory of one restore of a route, in a fresh process (with its OpenVINO worker's)."""
import multiprocessing
import warnings
from typing import Dict

import torch

from tola_lab.benchmarks.inference_routes import build_reference, load_route
from tola_plugin.utils.procfs import status_bytes


def worker_peak_rss(runtime) -> int:
    """Peak resident memory of the runtime's OpenVINO worker (bytes; 0 without one): the benchmark adds it to the
    user's process's."""
    worker = runtime.worker if runtime is not None else None
    if worker is None or not worker.alive():
        return 0
    return status_bytes('VmHWM', worker.proc.pid)


def peak_rss_child(route: str, opt_path: str, checkpoint, random_weights: bool, merged: str, lq) -> Dict:
    """In a fresh process: build ``route``'s network, restore ``lq`` (one line), report its peak RSS and the RSS
    after the imports (the Python, torch and library baseline)."""
    # the baseline: this module's imports, done when the fresh process unpickled this function (the package, torch,
    # the OpenVINO backend's libraries)
    baseline = status_bytes('VmRSS')  # VmHWM below: unlike getrusage's ru_maxrss, not carried over through exec
    runtime = None
    if route == 'reference':
        net = build_reference(opt_path, checkpoint, random_weights)
    else:
        net, runtime = load_route(route, merged, 'cpu')
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net(lq, noise_seeds=[0])
    worker = worker_peak_rss(runtime)  # OpenVINO's own process
    user = status_bytes('VmHWM')
    return {
        'peak_rss_bytes': user + worker, 'import_rss_bytes': baseline, 'user_peak_rss_bytes': user,
        'worker_peak_rss_bytes': worker
    }


def peak_rss(route: str, *args) -> Dict:
    with multiprocessing.get_context('spawn').Pool(1) as pool:
        return pool.apply(peak_rss_child, (route, ) + args)
