"""The runtime of one inference network, decided once and visible: ``Runtime(net, device, backend, precision=...)``
resolves the device, the backend and the precision into one ``RuntimePlan``, installs the path's stage runner in the
network (``TOLANet.use_stage_runner``: the one call that changes how it runs), and serves: ``serve`` runs a batch on
the current path and, when that path fails, moves to the next one that qualifies by its own rules.

The decision: the device (given, else CUDA when available, else the CPU); the backends to try (``backend`` 'auto':
OpenVINO then torch on a CPU, torch on a GPU; 'openvino' or 'torch' alone); the precision of each stage (the request,
decided by the entry point: explicit, one precision on every stage, or 'auto': the fast precisions per stage, then
fewer of them, then fp32: ``plan.auto_paths``); the paths in that order (``plan.candidate_paths``). A path other than
the plain fp32 torch route must qualify (``qualification.py``: its stages and its route's ẑ0 and image); one that
does not, or cannot start (OpenVINO missing, its cache folder not writable, a conversion that fails), is passed over
with one line saying why and how to re-qualify. When no path is left an explicit request is an error naming every
failure and the way out. The plan names each stage's precision as it computes: on OpenVINO the one it compiled, which a
CPU without the instructions for the requested one replaces.

Serving (``serve``): a path that fails while serving (``PATH_FAILURES``: a non-finite output, its worker dead or hung)
is left for the next path that works, and the batch runs again there (docs/reliability.md).
"""
import contextlib
import json
import os
from typing import Callable, List, Optional, TypeVar

import numpy as np
import torch

from tola_plugin.archs.precision import dtype_name
from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.runtime import openvino_stages, qualification
from tola_plugin.runtime.child_process import ChildFailure, python_command, run_child
from tola_plugin.runtime.image_stages import IMAGE_STAGES, stage_modules
from tola_plugin.runtime.openvino_client import OpenVINOWorker
from tola_plugin.runtime.plan import (BACKENDS, BackendPrecision, RuntimePlan, candidate_paths, check_precision,
                                      substitutions)
from tola_plugin.runtime.routed_stages import RoutedStages
from tola_plugin.runtime.stage_source import StageSource
from tola_plugin.runtime.stage_weights import StageWeights
from tola_plugin.runtime.text_prior_stages import KEPT
from tola_plugin.utils.cuda_math import set_tf32
from tola_plugin.utils.devices import resolve_device
from tola_plugin.utils.user_text import note

REQUALIFY = ('re-qualify with `tola-infer --requalify` (TOLAPipeline.from_merged(..., requalify=True)), or delete '
             'the verdicts in qualification.json of the cache folder (docs/inference.md, "Qualification")')
TORCH_PROBE_TIMEOUT = 900.0  # seconds for the torch child: importing the package, loading, three stages
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
        self.worker: Optional[OpenVINOWorker] = None
        self.restarts = 0  # of the worker, after deaths from outside (restart_after)
        self.no_path = ''  # why no path is left, once serving has used them all (serve fails every batch saying so)
        self._reference = None
        self._qualified_reason = ''
        if self.device.type == 'cuda':
            set_tf32(allow_tf32)
        net.use_stage_runner(StageRunner())
        net.to(self.device)
        # the weights of the stages the worker serves (the text prior's TransOCR too): in this process only while
        # torch runs them
        self.weights = StageWeights(net, [*stage_modules(net.idm, net.vae).values(), net.transocr],
                                    source if self.device.type == 'cpu' else None)
        if requalify:
            qualification.forget(self.source.digest)
        self.plan = self._decide()

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
        """Make ``path`` the network's way of running (its stage runner installed) -> ('' when it runs (qualified or
        plain), else why not, the network back on its own torch runner; the path as it computes: on OpenVINO each
        stage in the precision it compiled)."""
        self._close_worker()
        self.net.use_stage_runner(StageRunner())
        if path.backend == 'torch':
            self.weights.load()
            self.net.use_stage_runner(StageRunner(path.dtypes, path.name))
        if path.plain:
            return '', path
        key = qualification.verdict_key(self.device, path, self.source.digest)
        running = path
        if qualification.cached_verdict(key) is None:  # no silent wait: what runs now, once, and about how long
            self.say(f'qualifying {path.name} on this machine, once for this model (the plain fp32 route and it on '
                     'one probe line, compared: seconds for the demo model, a minute or two at full size)')
        if path.backend == 'torch':
            verdict = qualification.qualify(key, lambda: self._torch_probe(path), self.reference, path)
        else:
            cached = qualification.cached_verdict(key)
            if cached is not None and not cached.qualified:
                return f'{cached.reason} (verdict cached on this machine)', path
            self.weights.release()
            if cached is None:  # the fp32 reference before the worker holds its weights: torch's are gone by then
                with contextlib.suppress(RuntimeError):  # qualify() meets the error again and judges it
                    self.reference()
            why, verdict = self._start_openvino(path)
            if verdict is not None:  # it crashed or failed loading: remembered like a wrong result
                qualification.store_verdict(key, verdict)
            if why:
                return why, path
            running = self._route_openvino(path)
            verdict = qualification.qualify(key, self._openvino_probe, self.reference, running,
                                            qualification.OPENVINO_CHECKS)
        if not verdict.qualified:
            self._close_worker()
            self.net.use_stage_runner(StageRunner())
            computed = f' ({substitutions(path, running)})' if running != path else ''
            return verdict.reason + computed + (' (verdict cached on this machine)'
                                                if verdict.source == 'cache' else ''), running
        self._qualified_reason = (
            'qualified on this machine' +
            (f' in {verdict.seconds:g} s' if verdict.source == 'measured' else ' (cached verdict)'))
        return '', running

    def _route_openvino(self, path: BackendPrecision) -> BackendPrecision:
        """Install the runner of the worker started for ``path`` (every stage routed to it, the text prior's too) ->
        the path as it computes: each image stage in the precision OpenVINO compiled."""
        running = BackendPrecision(path.backend, self.worker.compiled)
        self.net.use_stage_runner(RoutedStages(self._run_openvino, running.dtypes, running.name))
        return running

    @contextlib.contextmanager
    def unqualified(self, path: BackendPrecision):
        """The network runs ``path`` for the block without qualifying it: what the benchmark measures, the errors of
        paths that do not qualify among them (``benchmarks/precision_route.py``). Yields the path as it computes;
        the stage runner and the worker before it come back after. An OpenVINO path that cannot start is a
        RuntimeError naming why."""
        runner, worker, self.worker = self.net.stage_runner, self.worker, None
        try:
            if path.backend == 'openvino':
                why, _ = self._start_openvino(path)
                if why:
                    raise RuntimeError(f'{path.name}: {why}')
                running = self._route_openvino(path)
            else:
                self.weights.load()
                self.net.use_stage_runner(StageRunner(path.dtypes, f'{path.name} (not qualified: measured)'))
                running = path
            yield running
        finally:
            self._close_worker()
            self.worker = worker
            self.net.use_stage_runner(runner)

    def reference(self):
        """The fp32 torch route's stage inputs and outputs on the probe (computed once)."""
        if self._reference is None:
            with self.weights.loaded():
                self._reference = qualification.record_reference(self.net, self.device)
        return self._reference

    # ------------------------------------------------------------------------------------------------ openvino
    def _start_openvino(self, path: BackendPrecision):
        """Start the worker for ``path`` (the IR converted first when needed; each image stage compiled in its
        precision, the text prior's in fp32) -> (why not, or '' when it runs; the verdict to remember when OpenVINO
        itself failed, else None). What is not OpenVINO's fault (a cache folder that cannot be written, a failed
        conversion) holds for this run only."""
        try:
            cache_dir = openvino_stages.compiled_cache_dir()
            if not os.access(cache_dir, os.W_OK):
                raise OSError(f'{cache_dir} is not writable')
        except OSError as err:
            return (f'the cache folder cannot be written ({err}); OpenVINO keeps its converted stages there: set '
                    'XDG_CACHE_HOME to a writable folder'), None
        for attempt in (1, 2):
            stages = openvino_stages.StageCache(self.source.digest)
            try:
                stages.ensure(self.source)
            except (ChildFailure, OSError) as err:
                return f'the conversion to OpenVINO failed: {err}', None
            try:
                self.worker = OpenVINOWorker(stages.paths(), path.dtypes, torch.get_num_threads(), cache_dir)
                return '', None
            except ChildFailure as err:
                if err.killed_from_outside:  # not OpenVINO's failure: passed over for this run, not remembered
                    return f'its worker was killed from outside while loading ({err.how}; not remembered)', None
                if attempt == 2:
                    why = f'OpenVINO could not load the stages: {err.how}'
                    return why, qualification.Verdict(False, why)
                self.say(f'OpenVINO could not load the cached stages ({err.how}); converting them again')
                stages.remove()
        return '', None

    def _run_openvino(self, stage: str, *tensors):
        return self.worker.run(stage, *tensors, keep=KEPT.get(stage))

    def _openvino_probe(self):
        """The worker's stages on the reference's inputs, the probe's text through its text prior, and the route,
        through the worker's runner (installed by ``_start``)."""
        reference = self.reference()
        outputs = {stage: self.worker.run(stage, *reference[stage][0]) for stage in ('text_encoder', ) + IMAGE_STAGES}
        image = reference[qualification.TEXT_PRIOR][0][0]
        outputs[qualification.TEXT_PRIOR] = self.net.decode_text(image)
        outputs[qualification.ROUTE] = qualification.record_route(self.net, self.device)
        return outputs

    # ------------------------------------------------------------------------------------------------ torch
    def _torch_probe(self, path: BackendPrecision):
        """The image stages in ``path``'s precisions on torch, in a child (``torch_probe.py``), on the reference's
        inputs; then, the child having run every kernel of the path without crashing, the route here (its runner
        installed by ``_start``), where the path would serve."""
        cases, outputs = qualification.scratch_file('.npz'), qualification.scratch_file('.npz')
        precisions = {stage: dtype_name(path.dtypes[stage]) for stage in IMAGE_STAGES}
        try:
            qualification.save_cases(self.reference(), cases)
            command = python_command(module='tola_plugin.runtime.torch_probe') + [
                json.dumps(self.source.spec()), cases,
                str(self.device),
                json.dumps(precisions), outputs
            ]
            run_child(command, f'the torch {path.precision} probe', TORCH_PROBE_TIMEOUT,
                      env={'OMP_NUM_THREADS': str(torch.get_num_threads())})
            with np.load(outputs, allow_pickle=False) as arrays:
                result = {stage: torch.from_numpy(arrays[stage]) for stage in IMAGE_STAGES}
        finally:
            for name in (cases, outputs):
                if os.path.exists(name):
                    os.remove(name)
        finite = all(bool(torch.isfinite(out).all()) for out in result.values())
        result[qualification.ROUTE] = qualification.record_route(self.net, self.device) if finite else None
        return result

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
        self._close_worker()
        why, _ = self._start_openvino(self.plan.path)
        if why:
            self.say(f'{self.plan.path.name}: the worker could not start again: {why}')
        return not why

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
        runner = self.net.use_stage_runner(StageRunner(plain.dtypes, plain.name))
        try:
            with self.weights.loaded():
                yield
        finally:
            self.net.use_stage_runner(runner)

    def replan(self, precision: Optional[str] = None) -> RuntimePlan:
        """Decide again (for the request ``precision``; None: the same request)."""
        if precision is not None:
            self.precision = check_precision(precision)
        self.plan, self.no_path = self._decide(), ''
        return self.plan

    def _close_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def close(self) -> None:
        """End the worker, give the network its own torch runner back (it runs as its precision switch asks) and
        remove what was exported for the children."""
        self._close_worker()
        self.weights.load()
        self.net.use_stage_runner(StageRunner())
        self.source.close()
