"""Peak resident memory of one restore of a route, in a fresh process (with its OpenVINO worker's)."""
import multiprocessing
import warnings
from typing import Dict

import torch

from tola_plugin.lab.benchmarks.inference_routes import build_reference, load_route
from tola_plugin.utils.procfs import status_bytes


def peak_rss_child(route: str, opt_path: str, checkpoint, random_weights: bool, merged: str, lq) -> Dict:
    """In a fresh process: build ``route``'s network, restore ``lq`` (one line), report its peak RSS and the RSS
    after the imports (the Python, torch and library baseline)."""
    # the baseline: this module's imports, done when the fresh process unpickled this function (the package, torch,
    # the OpenVINO backend's libraries)
    baseline = status_bytes('VmRSS')
    runtime = None
    if route == 'reference':
        net = build_reference(opt_path, checkpoint, random_weights)
    else:
        net, runtime = load_route(route, merged, 'cpu')
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net(lq, noise_seeds=[0])
    worker = runtime.worker_peak_rss() if runtime is not None else 0  # OpenVINO's own process
    user = status_bytes('VmHWM')
    return {
        'peak_rss_bytes': user + worker, 'import_rss_bytes': baseline, 'user_peak_rss_bytes': user,
        'worker_peak_rss_bytes': worker
    }


def peak_rss(route: str, *args) -> Dict:
    with multiprocessing.get_context('spawn').Pool(1) as pool:
        return pool.apply(peak_rss_child, (route, ) + args)
