"""What only a GPU can show (marked ``cuda``: skipped with the reason on machines without CUDA; ``make test-cuda``
runs them, docs/testing.md): one training iteration in each training precision, checkpointed and accumulated
gradients, 2-rank NCCL DDP (with two GPUs), TOLAPipeline and tola-infer in every precision, exact resume with
deterministic algorithms, and the 200-step route drawing from a CPU generator.

The CPU suite tests every CUDA-dependent decision with CUDA simulated; these run the real kernels. They compare
structure and exact facts (shapes, ranges, dtypes, bit-identical resumed weights, float64 equivalences); float32 on
the GPU against the CPU is the GPU check's precision step (tola_lab/gpu_check/precision_step.py). The GPU check's
dry run runs their bodies on the CPU (``TOLA_CUDA_TESTS_ON_CPU=1``: ``DEVICE`` is the CPU), so a test that cannot run
without a GPU image's missing font or a broken fixture fails here first."""
import glob
import os
import warnings

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from basicsr.data import build_dataset
from basicsr.models import build_model

from tola_cli import infer
from tola_plugin.archs.difftsr_arch import DiffTSRNet
from tola_plugin.archs.precision import cuda_has_native_bf16
from tola_plugin.archs.tola_adaptation import CHECKPOINTABLE
from tola_plugin.archs.transocr_arch import TransOCR
from tola_plugin.inference.pipeline import TOLAPipeline
from tola_plugin.utils.cuda_math import set_deterministic, tf32_allowed
from backbone_testing import DATA, official_fixture, write_tiny_official_ckpt
from conftest import cuda_test_device, free_port, run_launcher, write_options
from inference_testing import write_tiny_merged
from numerics import equivalent
from tola_testing import one_thread  # noqa: F401
from tola_testing import REPO, kill_then_resume, load_yaml, resume_options, tiny_demo_options, tiny_options

pytestmark = pytest.mark.cuda
# deterministic cuBLAS needs its workspace fixed before the first cuBLAS call of this process (the resume test
# resumes in-process after other tests used the GPU); cuda_math sets it too, but only when a run starts
os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
SIZE = (32, 128)
PRECISIONS = ['fp32', 'bf16', 'fp16', 'auto']
DEVICE = cuda_test_device()  # 'cuda'; 'cpu' in the GPU check's dry run
NUM_GPU = 1 if DEVICE == 'cuda' else 0


def no_native_bf16() -> bool:
    """A GPU without native bf16 (the CPU stand-in computes bf16 either way)."""
    return DEVICE == 'cuda' and not cuda_has_native_bf16('cuda')


def gpu_train_opt(tmp_path, rendered, **train_changes):
    opt = tiny_options(load_yaml(os.path.join(REPO, 'options/train/train_TOLA.yml')), rendered, tmp_path)
    opt['num_gpu'] = NUM_GPU
    opt['train'].pop('warmup_iter', None)
    opt['train']['perceptual_opt'].update(pretrained_backbone=False)
    opt['train'].update(train_changes)
    return opt


def gpu_batch(opt, n=2):
    dataset = build_dataset(opt['datasets']['train'])
    items = [dataset[i] for i in range(n)]
    batch = {k: torch.stack([it[k] for it in items]) for k in items[0] if torch.is_tensor(items[0][k])}
    for key in ('lq', 'gt'):
        batch[key] = F.interpolate(batch[key], size=SIZE, mode='area')
    return batch


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_one_training_iteration(tmp_path, rendered_sets, precision):
    if precision == 'bf16' and no_native_bf16():
        pytest.skip('this GPU has no native bf16')
    opt = gpu_train_opt(tmp_path, rendered_sets)
    opt['network_g']['precision'] = precision
    model = build_model(opt)
    assert model.device.type == DEVICE and next(model.bare_net.parameters()).device.type == DEVICE
    before = {k: v.detach().clone() for k, v in model.bare_net.adaptation_state_dict().items()}
    model.feed_data(gpu_batch(opt))
    model.optimize_parameters(1)
    assert set(model.log_dict) == {'l_pix', 'l_lpips', 'l_ocr'}
    assert all(np.isfinite(v) for v in model.log_dict.values())
    after = model.bare_net.adaptation_state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.numerics
def test_checkpointing_and_accumulation_on_cuda(tmp_path, rendered_sets):
    """float64 on the GPU: checkpointed and accumulated gradients equal the plain ones of one batch."""
    opt = gpu_train_opt(tmp_path, rendered_sets)
    opt['datasets']['train']['batch_size_per_gpu'] = 4
    model = build_model(opt)
    model.net_g.double()
    model.cri_perceptual.double()
    model.grad_clip_norm = None
    model.optimizer_g.step = lambda: None
    batch = {k: v.double() if v.is_floating_point() else v for k, v in gpu_batch(opt, 4).items()}
    net = model.bare_net
    net.draw_noise = lambda z_lr, seeds=None: torch.sin(37.0 * z_lr + 1.0)  # the same ε for any split

    def grads(parts, k):
        net.set_gradient_checkpointing(parts)
        model.accumulate_grad_batches = k
        model.feed_data(batch)
        model.optimize_parameters(1)
        return torch.cat([p.grad.flatten() for p in net.parameters() if p.requires_grad])

    plain = grads((), 1)
    equivalent(grads(CHECKPOINTABLE, 1), plain, 'checkpointed vs plain gradients on CUDA')
    equivalent(grads(CHECKPOINTABLE, 2), plain, 'checkpointed, accumulated vs plain gradients on CUDA')


def test_two_rank_nccl_ddp(rendered_sets, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip(f'needs two GPUs, this machine has {torch.cuda.device_count()}')
    opt = tiny_demo_options(rendered_sets, 'tola_nccl', total_iter=2, freq=2)
    opt['num_gpu'] = 'auto'
    proc = run_launcher([
        '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}', '-m', 'tola_plugin.train',
        '-opt',
        write_options(tmp_path / 'nccl.yml', opt), '--launcher', 'pytorch'
    ], cwd=tmp_path)
    log = open(glob.glob(str(tmp_path / 'experiments' / 'tola_nccl' / 'train_*.log'))[0], encoding='utf-8').read()
    assert 'World size (gpu number): 2' in log and 'DistributedDataParallel' in log and 'End of training' in log
    assert 'destroy_process_group() was not called' not in proc.stderr  # NCCL's warning at exit


@pytest.fixture(scope='module')
def tiny_model(tmp_path_factory):
    return write_tiny_merged(tmp_path_factory.mktemp('cuda_infer') / 'tiny_merged.safetensors')


def line_image(folder):
    rng = np.random.default_rng(0)
    path = os.path.join(folder, 'line.png')
    cv2.imwrite(path, rng.integers(0, 256, (32, 128, 3), dtype=np.uint8))
    return path


@pytest.mark.parametrize('precision', PRECISIONS)
def test_pipeline_and_tola_infer_in_each_precision(tiny_model, tmp_path, precision):
    if precision == 'bf16' and no_native_bf16():
        pytest.skip('this GPU has no native bf16')
    if DEVICE == 'cpu' and precision in ('bf16', 'fp16'):
        pytest.skip('the CPU standing in for the GPU: bf16 and fp16 are emulated there, many times slower')
    path = line_image(str(tmp_path))
    pipe = TOLAPipeline.from_merged(tiny_model).to(DEVICE).set_switches(precision=precision)
    result = pipe(path)
    assert result.image.shape == (128, 512, 3) and result.image.dtype == np.uint8
    out = tmp_path / 'out'
    assert infer.main(['-i', path, '-o',
                       str(out), '--model', tiny_model, '--device', DEVICE, '--precision', precision]) == 0
    assert cv2.imread(str(out / 'line.png')).shape == (128, 512, 3)
    if DEVICE == 'cuda':
        assert tf32_allowed() == {'matmul': False, 'conv': False}  # tola-infer computes fp32 as IEEE fp32


def test_exact_resume_on_cuda_with_deterministic_algorithms(rendered_sets, tmp_path, monkeypatch, caplog,
                                                            one_thread):  # noqa: F811  (threads as the children's)
    opt = resume_options(rendered_sets, tmp_path)
    opt.update(num_gpu=NUM_GPU, deterministic=True)
    deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        log, expected, got = kill_then_resume(opt, tmp_path, monkeypatch, caplog)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert 'Resuming training from epoch: 0, iter: 2.' in log
    differ = [k for k in expected if not torch.equal(got[k], expected[k])]
    assert got.keys() == expected.keys() and not differ, f'{len(differ)} tensors differ after resuming on CUDA'


def run_200_step_route(tmp_path, device):
    """The tiny 200-step DiffTSR route twice on ``device``, each drawing from a CPU generator of the same seed, with
    deterministic algorithms (restored afterwards). -> (lq, out, again)."""
    with open(os.path.join(DATA, 'test_DiffTSR_tiny.yml'), encoding='utf-8') as f:
        net_opt = yaml.safe_load(f)['network_g']
    meta, _ = official_fixture()
    write_tiny_official_ckpt(tmp_path / 'DiffTSR.ckpt', meta)
    torch.manual_seed(0)
    torch.save({'state_dict': TransOCR(**net_opt['transocr_config']).state_dict()}, tmp_path / 'transocr.pth')
    net_opt.update(
        difftsr_checkpoint=str(tmp_path / 'DiffTSR.ckpt'), transocr_checkpoint=str(tmp_path / 'transocr.pth'))
    net_opt.pop('type')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        net = DiffTSRNet(**net_opt).to(device)
    lq = torch.rand(1, 3, *SIZE, device=device)
    deterministic, benchmark = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    set_deterministic(True)
    try:
        out = net(lq, generator=torch.Generator().manual_seed(3))  # a CPU generator for CUDA tensors
        again = net(lq, generator=torch.Generator().manual_seed(3))
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.backends.cudnn.benchmark = benchmark
    return lq, out, again


def test_200_step_route_on_cuda(tmp_path):
    lq, out, again = run_200_step_route(tmp_path, DEVICE)
    assert out.shape == lq.shape and out.device == lq.device
    assert torch.isfinite(out).all(), f'{int((~torch.isfinite(out)).sum())} non-finite values'
    assert 0 <= float(out.min()) <= float(out.max()) <= 1
    assert torch.equal(out, again), f'not repeatable: max difference {float((out - again).abs().max())}'


def test_a_late_end_check_reads_the_text_the_immediate_one_reads(monkeypatch):
    """The text prior's END read one step late through pinned memory and an event (``transocr_arch.cuda_copy``): on
    the GPU the same steps and one more, as on the CPU (tests/test_transocr_arch.py)."""
    model = TransOCR(embed_dim=16, pe_max_len=64, stem_channels=(4, 8), stage_channels=(8, 8, 16, 16),
                     stage_blocks=(1, 1, 1, 1), num_heads=2, ff_dim=32).to(DEVICE).eval()
    images = torch.rand(2, 3, 64, 256, device=DEVICE)
    end = model.end_index
    steps = [[5, 6], [end, 7], [8, 9], [9, end], [1, 1], [2, 2]]

    def scripted(tokens, position, cache):
        logits = torch.zeros(2, model.num_classes, device=DEVICE)
        logits[torch.arange(2), torch.tensor(steps[position], device=DEVICE)] = 10.0 + position
        return logits

    monkeypatch.setattr(model, 'decode_step', scripted)
    with torch.no_grad():
        now_ids, now_probs = model.greedy_decode(images, max_steps=6, stop_at_end=True)
        late_ids, late_probs = model.greedy_decode(images, max_steps=6, stop_at_end=True, late_stop=True)
    assert now_ids.device.type == DEVICE and now_ids.shape == (2, 4) and late_ids.T.tolist() == steps[:5]
    assert torch.equal(late_ids[:, :4], now_ids) and torch.equal(late_probs[:, :4], now_probs)
