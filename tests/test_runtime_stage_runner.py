"""How a network's stages run is one object installed in one place (docs/architecture.md, "How --precision travels"):
``TOLANet.stage_runner`` (torch's ``archs/stage_runner.StageRunner`` by default), which ``TOLANet.forward`` calls and
a runtime replaces with ``TOLANet.running`` only; the precision request goes to the runtime, never into the
network's config; the pipeline leaves serving to the runtime (``Runtime.serve``)."""
import ast
import os

import numpy as np
import pytest
import torch

import tola_plugin
from tola_lab.benchmarks import peak_memory
from tola_plugin.archs.precision import STAGE_NAMES, StageDtypes
from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.archs.stages import PLANNED, STAGES
from tola_plugin.inference import pipeline
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.runtime import serving
from inference_testing import tiny_adapted_net, write_tiny_merged
from tola_testing import one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')
PACKAGE = os.path.dirname(os.path.abspath(tola_plugin.__file__))
#: the network's modules and the runtime-only fields it no longer has: none may be set from outside the network
NETWORK_PARTS = ('idm', 'vae', 'transocr', 'mom', 'lrc', 'stage_runner', 'plan', 'text_recognizer')


class Recording(StageRunner):
    """Torch's runner, recording each call (verb, first tensor's shape)."""

    def __init__(self):
        super().__init__()
        self.calls = []


def _recorded(verb):

    def call(self, net, first, *args, **kwargs):
        self.calls.append((verb, None if first is None else tuple(first.shape)))
        return getattr(StageRunner, verb)(self, net, first, *args, **kwargs)

    return call


for _stage in STAGES:
    setattr(Recording, _stage.verb, _recorded(_stage.verb))


@pytest.fixture(scope='module')
def net():
    return tiny_adapted_net().prepare_for_inference()


def test_the_forward_runs_its_stages_through_the_one_runner(net):
    """Each stage goes through ``stage_runner``; installing one is one context manager, which puts the runner it
    replaced back, an error included; the network keeps no runtime field of its own."""
    assert not hasattr(net, 'plan') and not hasattr(net, 'text_recognizer')
    assert type(net.stage_runner) is StageRunner and net.stage_runner.dtypes is None
    lq = torch.rand(1, 3, 32, 128, generator=torch.Generator().manual_seed(0))
    expected = net(lq, noise_seeds=[3])
    recording = Recording()
    own = net.stage_runner
    with net.running(recording):
        out = net(lq, noise_seeds=[3])
    assert net.stage_runner is own
    with pytest.raises(RuntimeError, match='inside'), net.running(Recording()):
        raise RuntimeError('inside')
    assert net.stage_runner is own
    assert torch.equal(out, expected)  # the same torch modules: the same bits
    # all six stages of the table, once each, in its order (archs/stages.py), the one way a forward computes them
    assert [name for name, _ in recording.calls] == [s.verb for s in STAGES]
    assert dict(recording.calls)['denoise'] == (1, 6, 8, 32) and dict(recording.calls)['correct'] == (1, 6, 8, 32)


def test_the_stage_table_is_the_one_vocabulary():
    """Every name that means a stage comes from ``archs/stages.STAGES``: the precision's stages are its planned ones,
    each verb is the torch runner's method, the names and labels are unique."""
    assert STAGE_NAMES == PLANNED == tuple(StageDtypes.uniform(torch.float32)) and 'text_prior' not in PLANNED
    assert all(callable(getattr(StageRunner, s.verb, None)) for s in STAGES)
    assert len({s.name for s in STAGES}) == len({s.label for s in STAGES}) == len({s.verb for s in STAGES}) == 6


def test_a_runner_with_fixed_dtypes_sets_each_stage_and_owns_the_precision(net):
    """A runtime's runner fixes each stage's dtype (``StageDtypes``: a mapping, equal to a dict of the same items);
    the network's precision switch is then refused, naming the runner, and applies again once its own is back."""
    mixed = StageDtypes.uniform(torch.float32).replace(vae_decoder=torch.bfloat16)
    assert dict(mixed) == dict(dict.fromkeys(STAGE_NAMES, torch.float32), vae_decoder=torch.bfloat16)
    assert mixed.name == 'fp32 (bf16: vae_decoder)' and hash(mixed) == hash(StageDtypes(dict(mixed)))
    with pytest.raises(ValueError, match='exactly the stages'):
        StageDtypes({'idm': torch.float32})
    with net.running(StageRunner(mixed, 'torch fp32 (bf16: vae_decoder)')):
        assert net.stage_dtypes('cpu') == mixed
        with pytest.raises(ValueError, match=r'runtime.s decision \(torch fp32 \(bf16: vae_decoder\)\)'):
            net.set_switches(precision='bf16')
    assert net.stage_dtypes('cpu') == StageDtypes.uniform(torch.float32)


def test_no_network_part_is_swapped_outside_the_network():
    """No module of the package sets a network's modules or stage runner from outside (``x.idm = ...``,
    ``setattr(x, 'vae', ...)``): the runtime installs its runner with ``running``, the one way."""
    found = []
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith('.py'):
                continue
            path = os.path.join(root, name)
            with open(path, encoding='utf-8') as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                targets = node.targets if isinstance(
                    node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
                for target in targets:
                    for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                        if isinstance(part, ast.Attribute) and part.attr in NETWORK_PARTS and not (isinstance(
                                part.value, ast.Name) and part.value.id == 'self'):
                            found.append(f'{os.path.relpath(path, PACKAGE)}:{node.lineno} {ast.unparse(part)}')
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == 'setattr' \
                        and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                        and node.args[1].value in NETWORK_PARTS:
                    found.append(f'{os.path.relpath(path, PACKAGE)}:{node.lineno} setattr')
    assert found == []


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    return write_tiny_merged(tmp_path_factory.mktemp('runner') / 'tiny_merged.safetensors')


def test_the_precision_request_goes_to_the_runtime_not_into_the_network(tiny):
    """``switches={'precision': ...}`` is the runtime's request, checked before any weight is read; the network's
    config keeps the model's own precision; ``set_switches`` and ``to`` decide again with the request."""
    with pytest.raises(ValueError, match="precision must be one of .* got 'fp8'"):
        TOLAPipeline.from_merged('no such file.safetensors', switches={'precision': 'fp8'})
    pipe = TOLAPipeline.from_merged(tiny, switches={'precision': 'fp32', 'timestep': 949}, backend='torch')
    try:
        assert (pipe.runtime.precision, pipe.plan.asked) == ('fp32', ('torch', 'fp32'))
        assert pipe.net.timestep == 949 and pipe.net.precision == 'fp32'  # the other switches go to the network
        pipe.set_switches(precision='auto')
        assert pipe.runtime.precision == 'auto' and pipe.plan.asked == ('torch', 'auto')
        assert pipe.net.precision == 'fp32'  # the model's own, unwritten
        pipe.to('cpu')
        assert pipe.plan.asked == ('torch', 'auto')  # the request carried over
    finally:
        pipe.close()
    assert type(pipe.net.stage_runner) is StageRunner and pipe.net.stage_runner.dtypes is None


def test_the_pipeline_serves_through_the_runtime(tiny, monkeypatch):
    """The policy for a path that fails while serving is the runtime's (``Runtime.serve``): the pipeline holds no
    failure policy of its own, and each batch goes through that one call."""
    assert not hasattr(pipeline, 'PATH_FAILURES') and pipeline.NonFiniteOutput is serving.NonFiniteOutput
    assert serving.PATH_FAILURES == (serving.NonFiniteOutput, serving.ChildFailure)
    pipe = TOLAPipeline.from_merged(tiny, backend='torch', batch_size=2)
    served = []
    real = serving.Runtime.serve
    monkeypatch.setattr(serving.Runtime, 'serve', lambda self, run: served.append(1) or real(self, run))
    try:
        result = pipe(np.full((32, 300, 3), 200, np.uint8))  # a wide line: several windows
    finally:
        pipe.close()
    windows = len(result.lines[0].window_texts)
    assert windows > 2 and len(served) == -(-windows // 2) and np.isfinite(result.image).all()  # batches of 2


def test_benchmark_only_code_is_the_benchmarks():
    """The OpenVINO worker's peak memory is the benchmark's question (``benchmarks/peak_memory.worker_peak_rss``),
    not the runtime's."""
    assert not hasattr(serving.Runtime, 'worker_peak_rss')
    assert peak_memory.worker_peak_rss(None) == 0
