"""The torch backend: a path's stages on the network's own modules (``archs/stage_runner.StageRunner``), and its
qualification probe: the image stages in the path's precisions in a child process (a kernel that crashes there ends
the child, not the user's run), then the route here. The child: ``python -m tola_plugin.runtime.torch_backend
SPEC_JSON CASES_NPZ DEVICE PRECISIONS_JSON OUT_NPZ`` (inputs ``<stage>.<i>``, precisions per image stage, outputs
``<stage>``, computed as ``TOLANet.forward`` computes them: ``image_stages.run_torch_stage``)."""
import json
import os
import sys
import tempfile
from typing import Dict

import numpy as np
import torch

from tola_plugin.archs.precision import dtype_name, precision_dtype
from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.runtime import qualification
from tola_plugin.runtime.child_process import python_command, run_child
from tola_plugin.runtime.image_stages import IMAGE_STAGES, run_torch_stage, stage_modules
from tola_plugin.runtime.plan import BackendPrecision
from tola_plugin.runtime.stage_source import load_modules
from tola_plugin.utils.cuda_math import set_tf32

PROBE_TIMEOUT = 900.0  # seconds for the child: importing the package, loading, three stages


class TorchBackend:
    """Starts a path on the torch modules of ``net`` on ``device`` (their ``weights`` read back first); ``source``:
    its model, for the probe's child."""
    checks = qualification.TORCH_CHECKS  # the text prior runs in fp32 on torch whatever the path

    def __init__(self, net, device: torch.device, source, weights):
        self.net, self.device, self.source, self.weights = net, device, source, weights

    def start(self, path: BackendPrecision) -> StageRunner:
        self.weights.load()
        return StageRunner(path.dtypes, path.name)

    def probe(self, path: BackendPrecision, reference: Dict) -> Dict:
        """The image stages in ``path``'s precisions in the child, on the ``reference``'s inputs; then, the child
        having run every kernel of the path without crashing, the route here (its runner installed)."""
        precisions = {stage: dtype_name(path.dtypes[stage]) for stage in IMAGE_STAGES}
        with tempfile.TemporaryDirectory(prefix='tola-qualify-') as folder:
            cases, outputs = os.path.join(folder, 'cases.npz'), os.path.join(folder, 'outputs.npz')
            np.savez(cases, **{f'{s}.{i}': t.numpy() for s in IMAGE_STAGES for i, t in enumerate(reference[s][0])})
            command = python_command(module='tola_plugin.runtime.torch_backend') + [
                json.dumps(self.source.spec()), cases,
                str(self.device),
                json.dumps(precisions), outputs
            ]
            run_child(command, f'the torch {path.precision} probe', PROBE_TIMEOUT,
                      env={'OMP_NUM_THREADS': str(torch.get_num_threads())})
            with np.load(outputs, allow_pickle=False) as arrays:
                result = {stage: torch.from_numpy(arrays[stage]) for stage in IMAGE_STAGES}
        finite = all(bool(torch.isfinite(out).all()) for out in result.values())
        result[qualification.ROUTE] = qualification.record_route(self.net, self.device) if finite else None
        return result

    def close(self) -> None:  # nothing to end: the stages run in this process
        pass


def probe_in_child(spec, cases_path: str, device: str, precisions, out_path: str) -> None:
    idm, vae = load_modules(spec, with_transocr=False)[:2]
    device = torch.device(device)
    if device.type == 'cuda':
        set_tf32(False)  # IEEE fp32 where fp32 is asked (docs/training_gpus.md)
    modules = {name: module.to(device) for name, module in stage_modules(idm, vae).items()}
    with np.load(cases_path, allow_pickle=False) as cases:
        outputs = {}
        for stage in IMAGE_STAGES:
            count = sum(1 for key in cases.files if key.startswith(stage + '.'))
            inputs = [torch.from_numpy(cases[f'{stage}.{i}']) for i in range(count)]
            outputs[stage] = run_torch_stage(modules[stage], inputs, precision_dtype(precisions[stage]), device).numpy()
    np.savez(out_path, **outputs)


if __name__ == '__main__':
    probe_in_child(json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5])
