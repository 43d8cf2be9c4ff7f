"""The runtime of one inference network, decided once and visible: ``Runtime(net, device, backend, precision=...)``
plans (the device, the backend and the precision into one ``RuntimePlan``), has the path's backend start it
(``torch_backend.py``, ``openvino_backend/backend.py``: each hands back the stage runner installed in the network with
``TOLANet.running``), and serves (``serve``: a batch on the current path; a path that fails while serving,
``PATH_FAILURES``: a non-finite output, its worker dead or hung, is left for the next one that works, which runs the
batch again: docs/reliability.md).

The plan: the device (given, else CUDA when available, else the CPU); the backends to try (``backend`` 'auto':
OpenVINO then torch on a CPU, torch on a GPU); each stage's precision (the entry point's request: one precision on
every stage, or 'auto': ``plan.auto_paths``); the paths in that order (``plan.candidate_paths``). A path other than
the plain fp32 torch route must qualify (``qualification.py``); one that does not, or cannot start (OpenVINO missing,
its cache folder not writable, a conversion that fails), is passed over with one line saying why and how to
re-qualify. With no path left the request is an error naming every failure and the way out. The plan names each
stage's precision as it computes: on OpenVINO the one it compiled, which a CPU without the instructions for the
requested one replaces.
"""
import contextlib
from typing import Callable, Dict, List, Optional, TypeVar

import torch

from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.runtime import qualification
from tola_plugin.runtime.child_process import ChildFailure
from tola_plugin.runtime.image_stages import stage_modules
from tola_plugin.runtime.openvino_backend import stages as openvino_stages
from tola_plugin.runtime.openvino_backend.backend import CannotStart, OpenVINOBackend
from tola_plugin.runtime.plan import (BACKENDS, BackendPrecision, RuntimePlan, candidate_paths, check_precision,
                                      substitutions)
from tola_plugin.runtime.stage_source import StageSource
from tola_plugin.runtime.stage_weights import StageWeights
from tola_plugin.runtime.torch_backend import TorchBackend
from tola_plugin.utils.cuda_math import set_tf32
from tola_plugin.utils.devices import resolve_device
from tola_plugin.utils.user_text import note

REQUALIFY = ('re-qualify with `tola-infer --requalify` (TOLAPipeline.from_merged(..., requalify=True)), or delete '
             'the verdicts in qualification.json of the cache folder (docs/inference.md, "Qualification")')
#: times a runtime starts its OpenVINO worker again after a death by a signal from outside (``restart_after``)
MAX_RESTARTS = 3
Batch = TypeVar('Batch')


class NoPathLeft(RuntimeError, ValueError):
    """Every path of the request failed to qualify or failed while serving. A ValueError too: the request is the
    user's to change, so a command says it in one ``error:`` line (utils/cli_errors.py), not a traceback."""


class NonFiniteOutput(RuntimeError):
    """The network returned NaN or infinity: never written; the batch is run again on the next path (``serve``)."""


#: a failure of the path the network runs on (its output, its worker): the runtime moves to the next path and the batch
#: runs again (``Runtime.serve``)
PATH_FAILURES = (NonFiniteOutput, ChildFailure)


def resolve_backends(backend: str, device: torch.device, notes: List) -> List[str]:
    """The backends to try for ``backend`` (one of BACKENDS) on ``device``, preferred first; what 'auto' leaves out
    is appended to ``notes`` as (path, why). An explicit 'openvino' that cannot run is a ValueError naming the fix."""
    if backend not in BACKENDS:
        raise ValueError(f'backend must be one of {BACKENDS}, got {backend!r}')
    if backend == 'torch':
        return ['torch']
    if device.type != 'cpu':
        if backend == 'openvino':
            raise ValueError(f'backend openvino runs on the CPU, the device is {device} (use backend torch or auto)')
        return ['torch']
    missing = openvino_stages.openvino_missing()
    if missing:
        if backend == 'openvino':
            raise ValueError(f'backend openvino: {missing}')
        notes.append(('openvino', missing))
        return ['torch']
    return ['openvino'] if backend == 'openvino' else ['openvino', 'torch']


class Runtime:
    """Where and how the inference TOLANet ``net`` runs (module docstring). ``precision``: the request ('fp32',
    'bf16', 'fp16' or 'auto'), decided by the entry point; None: the network's own precision switch (a merged file's
    recorded one). ``source``: the merged file ``net`` was loaded from (names the model in the caches; None: a hash of
    its stage tensors). ``requalify``: drop this machine's cached verdicts of the model first. ``say``: where the
    one-line notes go (stderr)."""

    def __init__(self, net, device=None, backend: str = 'auto', allow_tf32: bool = False, source: Optional[str] = None,
                 requalify: bool = False, say: Callable[[str], None] = note, precision: Optional[str] = None):
        self.net, self.say = net, say
        self.precision = check_precision(net.precision if precision is None else precision)
        self.device = resolve_device(None if device is None else str(device))
        self.backend, self.allow_tf32 = backend, allow_tf32
        self.source = StageSource(net.idm, net.vae, net.transocr, source)
        self.restarts = 0  # of the worker, after deaths from outside (restart_after)
        self.no_path = ''  # why no path is left, once serving has used them all (serve fails every batch saying so)
        self._reference = None
        self._qualified_reason = ''
        if self.device.type == 'cuda':
            set_tf32(allow_tf32)
        # the network on its own torch runner for the runtime's life, each started path's runner above it
        self._own_runner, self._path_runner = contextlib.ExitStack(), contextlib.ExitStack()
        self._own_runner.enter_context(net.running(StageRunner()))
        net.to(self.device)
        self.weights = StageWeights(net, [*stage_modules(net.idm, net.vae).values(), net.transocr],
                                    source if self.device.type == 'cpu' else None)
        self.backends = self.new_backends()
        if requalify:
            qualification.forget(self.source.digest)
        self.plan = self._decide()

    def new_backends(self) -> Dict:
        """backend name -> a backend that starts its paths for this network (none started yet)."""
        return {
            'torch': TorchBackend(self.net, self.device, self.source, self.weights),
            'openvino': OpenVINOBackend(self.net, self.device, self.source, self.say)
        }

    @property
    def worker(self):
        """The OpenVINO worker serving now (``openvino_backend/client.OpenVINOWorker``), or None."""
        return self.backends['openvino'].worker

    # ------------------------------------------------------------------------------------------------ deciding
    def _decide(self) -> RuntimePlan:
        passed: List = []
        backends = resolve_backends(self.backend, self.device, passed)
        self.candidates = candidate_paths(self.device, backends, self.precision)
        return self._first_that_works(passed)

    def _first_that_works(self, passed: List) -> RuntimePlan:
        while self.candidates:
            path = self.candidates.pop(0)
            why, running = self._start(path)
            if not why:
                reason = 'the plain fp32 torch route' if path.plain else self._qualified_reason
                return RuntimePlan(self.device, running, (self.backend, self.precision), reason, tuple(passed),
                                   None if running == path else path)
            passed.append((path.name, why))
            if self.candidates:
                self.say(f'{path.name} is not used: {why}; trying {self.candidates[0].name} ({REQUALIFY})')
        failures = '; '.join(f'{name}: {why}' for name, why in passed)
        raise NoPathLeft(f'backend {self.backend}, precision {self.precision} on {self.device}: no path can run '
                         f'({failures}). Ask for another path (--backend torch --precision fp32 is the plain route '
                         f'and always runs), or {REQUALIFY}')

    def _start(self, path: BackendPrecision):
        """Make ``path`` the network's way of running (its backend's stage runner installed) -> ('' when it runs
        (qualified or plain), else why not, the network back on its own torch runner; the path as it computes: on
        OpenVINO each stage in the precision it compiled)."""
        self._stop()
        key = None if path.plain else qualification.verdict_key(self.device, path, self.source.digest)
        cached = key and qualification.cached_verdict(key)
        if cached is not None and not cached.qualified:  # not started only to fail again
            return f'{cached.reason} (verdict cached on this machine)', path
        if path.backend != 'torch':  # one copy of each weight: torch's here only while torch runs (its start loads)
            self.weights.release()
        backend = self.backends[path.backend]
        if path.plain:
            self._path_runner.enter_context(self.net.running(backend.start(path)))
            return '', path
        if cached is None:  # no silent wait: what runs now, once, and about how long
            self.say(f'qualifying {path.name} on this machine, once for this model (the plain fp32 route and it on '
                     'one probe line, compared: seconds for the demo model, a minute or two at full size)')
            with contextlib.suppress(RuntimeError):  # before a worker holds its weights; qualify() judges an error
                self.reference()
        try:
            runner = backend.start(path)
        except CannotStart as err:
            if err.verdict is not None:  # OpenVINO crashed or failed loading: remembered like a wrong result
                qualification.store_verdict(key, err.verdict)
            return str(err), path
        self._path_runner.enter_context(self.net.running(runner))
        running = BackendPrecision(path.backend, runner.dtypes)
        verdict = qualification.qualify(key, lambda: backend.probe(path, self.reference()), self.reference, running,
                                        backend.checks)
        if not verdict.qualified:
            self._stop()
            return verdict.reason + (f' ({substitutions(path, running)})' if running != path else ''), running
        self._qualified_reason = (
            'qualified on this machine' +
            (f' in {verdict.seconds:g} s' if verdict.source == 'measured' else ' (cached verdict)'))
        return '', running

    def reference(self):
        """The fp32 torch route's stage inputs and outputs on the probe (computed once)."""
        if self._reference is None:
            with self.weights.loaded():
                self._reference = qualification.record_reference(self.net, self.device)
        return self._reference

    # ------------------------------------------------------------------------------------------------ serving
    @property
    def running(self) -> str:
        """The path the network runs on now, as messages name it (the plain route's while it judges)."""
        return self.net.stage_runner.name

    def serve(self, run: Callable[[], Batch]) -> Batch:
        """``run()`` (a batch through the network) on the current path -> its result. When the path fails
        (``PATH_FAILURES``) the batch runs again on the next path that works (``fail``). A non-finite output is first
        judged by the plain fp32 torch route: finite there, the path is to blame (it is disqualified and the plain
        route's result kept); non-finite there too, the input is (the batch fails, the path stays). A worker killed
        from outside (SIGKILL of the OOM killer or a user, SIGTERM) is started again and the batch run again
        (``restart_after``, bounded); only a second death on the same batch counts against the path. Without a path
        left the batch fails with the reasons (RuntimeError), and so does every later one."""
        if self.no_path:  # the plan's worker may be gone (killed again while it restarted): never run it
            raise RuntimeError(self.no_path)
        restarted = False
        while True:
            try:
                return run()
            except PATH_FAILURES as err:
                if not restarted and self.restart_after(err):
                    restarted = True
                    continue
                judged, remember = None, True
                if isinstance(err, ChildFailure) and err.killed_from_outside:
                    if restarted:  # killed again on the same windows: they are what kills it
                        err = ChildFailure(err.what, f'{err.how}, again on the same windows after a restart')
                    else:  # restarts used up: this run moves on, the verdict stays
                        remember = False
                if isinstance(err, NonFiniteOutput) and not self.plan.path.plain:
                    with self.plain_route():
                        judged = run()  # NonFiniteOutput: the input's failure
                try:
                    self.fail(err, remember)
                except NoPathLeft as none_left:
                    if judged is not None:
                        return judged
                    self.no_path = f'no output written: {none_left}'
                    raise RuntimeError(self.no_path) from None
                if judged is not None:
                    return judged

    def restart_after(self, error: BaseException) -> bool:
        """After ``error`` while serving: when the OpenVINO worker was killed from outside (the OOM killer, a user, a
        container limit: ``ChildFailure.killed_from_outside``), which says nothing of the path, start it again (at
        most MAX_RESTARTS times per runtime) and say so; True when it runs again (the caller runs its batch again),
        False when the failure is the path's to answer for (``fail``)."""
        if not (isinstance(error, ChildFailure) and error.killed_from_outside and self.plan.backend == 'openvino'
                and self.restarts < MAX_RESTARTS):
            return False
        self.restarts += 1
        self.say(f'{self.plan.path.name}: its worker was killed from outside ({error.how}: the OOM killer, a user or '
                 f'a container limit, not a fault of the path, whose verdict is kept); starting it again '
                 f'({self.restarts} of at most {MAX_RESTARTS}) and running the batch again')
        try:
            self.backends['openvino'].restart(self.plan.path)
        except CannotStart as err:
            self.say(f'{self.plan.path.name}: the worker could not start again: {err}')
            return False
        return True

    def fail(self, error: BaseException, remember: bool = True) -> RuntimePlan:
        """The current path failed while serving (``error``: a non-finite output, its worker dead or hung): record
        the verdict (unless ``remember`` is False: a failure that says nothing of the path, such as a worker killed
        from outside once too often), say so, and move to the next path that works; NoPathLeft when none is left."""
        failed = self.plan
        why = f'failed while serving: {error}' + ('' if remember else ' (not remembered: not a fault of the path)')
        if remember and not failed.path.plain:
            key = qualification.verdict_key(self.device, failed.requested or failed.path, self.source.digest)
            qualification.store_verdict(key, qualification.Verdict(False, why))
        passed = list(failed.passed_over) + [(failed.path.name, why)]
        if self.candidates:
            self.say(f'{failed.path.name} {why}; trying {self.candidates[0].name} ({REQUALIFY})')
        self.plan = self._first_that_works(passed)
        self.say(self.plan.describe())
        return self.plan

    @contextlib.contextmanager
    def plain_route(self):
        """The plain fp32 torch route for the duration of the block (the judge of a non-finite output: when it is
        finite there, the current path is to blame)."""
        plain = RuntimePlan.reference(self.device).path
        with self.net.running(StageRunner(plain.dtypes, plain.name)), self.weights.loaded():
            yield

    def replan(self, precision: Optional[str] = None) -> RuntimePlan:
        """Decide again (for the request ``precision``; None: the same request)."""
        if precision is not None:
            self.precision = check_precision(precision)
        self.plan, self.no_path = self._decide(), ''
        return self.plan

    def _stop(self) -> None:
        """Every backend closed (the OpenVINO worker ended), the network back on its own torch runner."""
        for backend in self.backends.values():
            backend.close()
        self._path_runner.close()

    def close(self) -> None:
        """End the worker, give the network the runner it had before the runtime back (its own torch runner: it runs as
        its precision switch asks) and remove what was exported for the children."""
        self._stop()
        self._own_runner.close()
        self.weights.load()
        self.source.close()
