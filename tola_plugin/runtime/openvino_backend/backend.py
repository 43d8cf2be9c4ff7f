"""The OpenVINO backend: a path's stages in a worker process of its own (``client.OpenVINOWorker``), compiled from the
model's IR (``stages.StageCache``, converted once), each image stage in its precision, the text prior's in fp32; its
stage runner (``routed_stages.RoutedStages``) sends every stage there. A path it cannot start is ``CannotStart``."""
import os
from typing import Dict, Optional

import torch

from tola_plugin.runtime import qualification
from tola_plugin.runtime.child_process import ChildFailure
from tola_plugin.runtime.image_stages import IMAGE_STAGES
from tola_plugin.runtime.openvino_backend import stages
from tola_plugin.runtime.openvino_backend.client import OpenVINOWorker
from tola_plugin.runtime.plan import BackendPrecision
from tola_plugin.runtime.routed_stages import RoutedStages
from tola_plugin.runtime.text_prior_stages import KEPT


class CannotStart(RuntimeError):
    """A path its backend cannot start (the message says why); ``verdict``: what to remember of it when OpenVINO itself
    failed (it crashed or failed loading), else None: not its fault, passed over for this run only."""

    def __init__(self, why: str, verdict: Optional[qualification.Verdict] = None):
        super().__init__(why)
        self.verdict = verdict


class OpenVINOBackend:
    """Starts a path of ``net`` (its model: ``source``) in its worker (``worker``: None while none runs); ``say``:
    where its notes go."""
    checks = qualification.OPENVINO_CHECKS  # it runs the text prior's stages too

    def __init__(self, net, device: torch.device, source, say):
        self.net, self.device, self.source, self.say = net, device, source, say
        self.worker: Optional[OpenVINOWorker] = None

    def start(self, path: BackendPrecision) -> RoutedStages:
        """The stage runner of ``path`` (every stage routed to the worker), its dtypes as the worker computes them:
        each image stage in the precision OpenVINO compiled."""
        self.restart(path)
        running = BackendPrecision(path.backend, self.worker.compiled)
        return RoutedStages(self.run, running.dtypes, running.name)

    def restart(self, path: BackendPrecision) -> None:
        """A new worker for ``path`` (the IR converted first when needed), the one before ended; CannotStart saying
        why not."""
        self.close()
        try:
            cache_dir = stages.compiled_cache_dir()
            if not os.access(cache_dir, os.W_OK):
                raise OSError(f'{cache_dir} is not writable')
        except OSError as err:
            raise CannotStart(f'the cache folder cannot be written ({err}); OpenVINO keeps its converted stages there: '
                              'set XDG_CACHE_HOME to a writable folder') from None
        cache = stages.StageCache(self.source.digest)
        for attempt in (1, 2):
            try:
                cache.ensure(self.source)
            except (ChildFailure, OSError) as err:
                raise CannotStart(f'the conversion to OpenVINO failed: {err}') from None
            try:
                self.worker = OpenVINOWorker(cache.paths(), path.dtypes, torch.get_num_threads(), cache_dir)
                return
            except ChildFailure as err:
                if err.killed_from_outside:  # not OpenVINO's failure: passed over for this run, not remembered
                    raise CannotStart(
                        f'its worker was killed from outside while loading ({err.how}; not remembered)') from None
                if attempt == 2:
                    why = f'OpenVINO could not load the stages: {err.how}'
                    raise CannotStart(why, qualification.Verdict(False, why)) from None
                self.say(f'OpenVINO could not load the cached stages ({err.how}); converting them again')
                cache.remove()

    def run(self, stage: str, *tensors):
        return self.worker.run(stage, *tensors, keep=KEPT.get(stage))

    def probe(self, path: BackendPrecision, reference: Dict) -> Dict:
        """The worker's stages on the ``reference``'s inputs, the probe's text through its text prior, and the route,
        through the worker's runner (installed)."""
        outputs = {stage: self.worker.run(stage, *reference[stage][0]) for stage in ('text_encoder', ) + IMAGE_STAGES}
        outputs[qualification.TEXT_PRIOR] = self.net.decode_text(reference[qualification.TEXT_PRIOR][0][0])
        outputs[qualification.ROUTE] = qualification.record_route(self.net, self.device)
        return outputs

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
