"""Issue 48, item 3: what a run asks of the machine is bounded before any work starts and before any folder is made
(``basicsr_glue/resource_bounds.py``): a batch, a LoRA rank or an epoch whose memory cannot fit is refused with one
line naming the option, its value and what fits; data-loader workers beyond the cores are capped with a warning.

The memory the machine offers is fixed here (``available_memory``: 8 GiB), so no outcome depends on what else runs; the
issue's case runs as a user runs it, with both launchers, under an address-space limit (the old code grew until
the kernel's OOM killer ended it)."""
import os
import re
import resource
import subprocess
import sys

import pytest
import yaml
from reliability_testing import launch

from tola_testing import tiny_demo_options

GIB = 2**30


@pytest.fixture
def eight_gib(monkeypatch):
    """The machine offers 8 GiB (MemAvailable on the CPU), whatever it really has."""
    from tola_plugin.basicsr_glue import resource_bounds
    monkeypatch.setattr(resource_bounds, 'available_memory', lambda: 8 * GIB)


def train_options(rendered, **train_set):
    opt = tiny_demo_options(rendered, 'exp', total_iter=1, freq=1)
    opt['num_gpu'] = 0
    opt['datasets']['train'].update(train_set)
    return opt


def refused(tmp_path, monkeypatch, capsys, opt, *flags):
    """Our launcher on ``opt`` (``launch``) ends in one ``error:`` line, exit status 2, and makes nothing. -> the
    line."""
    code = launch(tmp_path, monkeypatch, opt, *flags)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith('error: '), err
    assert sorted(os.listdir(tmp_path)) == ['options.yml']  # no experiments/, tb_logger/
    return err[0]


def merged(opt):
    """``opt`` as the launchers hand it to the bounds (training, CPU, one process)."""
    return dict(opt, is_train=True, dist=False)


@pytest.mark.end_to_end  # each launcher in a process of its own; the refusal itself: the in-process tests below
@pytest.mark.parametrize('launcher', ['tola_plugin.train', 'basicsr.train'])
def test_a_batch_that_cannot_fit_is_refused_before_anything_is_made(rendered_sets, tmp_path, launcher):
    """``datasets:train:batch_size_per_gpu=1000000000`` grew to 11 GB until the OOM killer ended it."""
    path = tmp_path / 'options.yml'
    path.write_text(yaml.safe_dump(train_options(rendered_sets)), encoding='utf-8')
    work = tmp_path / 'work'
    work.mkdir()

    def limit():  # the old code grew until the OOM killer came; under this limit it ends in a MemoryError
        resource.setrlimit(resource.RLIMIT_AS, (12 * GIB, 12 * GIB))

    command = [sys.executable, '-m', launcher, '-opt', str(path)]
    proc = subprocess.run(command + ['--force_yml', 'datasets:train:batch_size_per_gpu=1000000000'], cwd=work,
                          capture_output=True, text=True, timeout=600, preexec_fn=limit,
                          env=dict(os.environ, OMP_NUM_THREADS='1'))
    last = proc.stderr.splitlines()[-1] if proc.stderr else ''
    assert proc.returncode == 2 and last.startswith('error: '), proc.stderr[-2000:]
    assert 'datasets.train.batch_size_per_gpu: 1,000,000,000 samples per batch need at least' in last, last
    assert re.search(r'; at most [\d,]+ fit$', last), last
    assert os.listdir(work) == []


FITS_WITH_BATCH_2 = r'at most lora_rank [\d,]+ fits with batch_size_per_gpu 2$'


@pytest.mark.parametrize('entry, needle, what_fits', [
    ('datasets:train:batch_size_per_gpu=1000000', 'datasets.train.batch_size_per_gpu: 1,000,000 samples per batch',
     r'at most [\d,]+ fit$'),
    ('network_g:lora_rank=1000000', 'network_g.lora_rank: 1,000,000 makes TOLANet', FITS_WITH_BATCH_2),
    ('network_g:lora_rank=100000', 'network_g.lora_rank: 100,000 makes TOLANet', FITS_WITH_BATCH_2),
    ('datasets:train:dataset_enlarge_ratio=1000000000000', 'datasets.train.dataset_enlarge_ratio: 1e+12 makes 1e+12 '
     'samples an epoch or more', r'no ratio above [\d,]+ fits any dataset$'),
    ('datasets:train:dataset_enlarge_ratio=!!float 1e12', 'datasets.train.dataset_enlarge_ratio: 1e+12',
     r'no ratio above [\d,]+ fits any dataset$'),
])
def test_what_cannot_fit_is_one_line_naming_the_option_the_value_and_what_fits(rendered_sets, tmp_path, monkeypatch,
                                                                               capsys, eight_gib, entry, needle,
                                                                               what_fits):
    opt = train_options(rendered_sets)
    line = refused(tmp_path, monkeypatch, capsys, opt, '--force_yml', entry)
    assert needle in line, line
    assert 'over the 7.20 GiB this run may use (90% of the 8.00 GiB of memory available)' in line, line
    assert re.search(what_fits, line), line


def test_the_same_values_in_the_file_are_refused_too(rendered_sets, tmp_path, monkeypatch, capsys, eight_gib):
    opt = train_options(rendered_sets)
    opt['network_g']['lora_rank'] = 1000000
    line = refused(tmp_path, monkeypatch, capsys, opt)
    assert 'options.yml: network_g.lora_rank: 1,000,000 makes TOLANet' in line, line


def test_what_fits_is_what_fits(rendered_sets, eight_gib):
    """The largest batch and LoRA rank a refusal names pass the bound; one more does not."""
    from tola_plugin.basicsr_glue.resource_bounds import check_memory
    from tola_plugin.options.reader import OptionError
    opt = merged(train_options(rendered_sets, batch_size_per_gpu=10**6))
    with pytest.raises(OptionError) as err:
        check_memory(opt)
    fit = int(re.search(r'at most ([\d,]+) fit$', str(err.value)).group(1).replace(',', ''))
    opt['datasets']['train']['batch_size_per_gpu'] = fit
    check_memory(opt)
    opt['datasets']['train']['batch_size_per_gpu'] = fit + 1
    with pytest.raises(OptionError, match=f'at most {fit:,} fit$'):
        check_memory(opt)
    opt = merged(train_options(rendered_sets, batch_size_per_gpu=1))
    opt['network_g']['lora_rank'] = 10**6
    with pytest.raises(OptionError) as err:
        check_memory(opt)
    found = re.search(r'at most lora_rank ([\d,]+) fits with batch_size_per_gpu 1$', str(err.value))
    rank = int(found.group(1).replace(',', ''))
    opt['network_g']['lora_rank'] = int(rank * 0.99)  # LoRA is linear in the rank; the rest of the network is not
    check_memory(opt)
    opt['network_g']['lora_rank'] = int(rank * 1.01)
    with pytest.raises(OptionError, match='network_g.lora_rank'):
        check_memory(opt)


def test_an_epoch_whose_indices_cannot_fit_is_refused_when_the_dataset_is_known(rendered_sets, tmp_path, monkeypatch,
                                                                                capsys, eight_gib):
    """A ratio that passes at start (one sample's epoch fits) is refused when the sampler knows the dataset (8 lines):
    one line with the largest ratio that fits, and the failed start leaves nothing."""
    opt = train_options(rendered_sets, dataset_enlarge_ratio=100_000_000)  # 1e8 * 48 B fits 7.2 GiB; 8 times not
    line = refused(tmp_path, monkeypatch, capsys, opt)
    assert 'datasets.train.dataset_enlarge_ratio: 1e+08 makes 8e+08 samples an epoch (8 in the dataset)' in line
    assert re.search(r'at most [\d,]+ fits$', line), line


def test_workers_beyond_the_cores_are_capped_with_a_warning(rendered_sets, monkeypatch, capsys):
    """``num_worker_per_gpu=1000000`` spawned hundreds of loader processes; now at most the cores this process may
    use (per GPU of the process), said once."""
    from tola_plugin.basicsr_glue.resource_bounds import cap_workers
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3})
    opt = merged(train_options(rendered_sets, num_worker_per_gpu=1000000))
    cap_workers(opt)
    assert opt['datasets']['train']['num_worker_per_gpu'] == 4
    assert capsys.readouterr().err == ('warning: datasets.train.num_worker_per_gpu: 1,000,000 data-loader workers per '
                                       'GPU, but this run has 4 CPU core(s): using 4 (more add processes and memory, '
                                       'not speed)\n')
    opt = merged(train_options(rendered_sets, num_worker_per_gpu=3))
    opt['num_gpu'] = 2  # BasicSR starts 3 * 2 workers in one process
    cap_workers(opt)
    assert opt['datasets']['train']['num_worker_per_gpu'] == 2 and 'for 2 GPUs or processes' in capsys.readouterr().err
    opt = merged(train_options(rendered_sets, num_worker_per_gpu=4))
    cap_workers(opt)
    assert opt['datasets']['train']['num_worker_per_gpu'] == 4 and capsys.readouterr().err == ''


@pytest.mark.end_to_end  # the launcher in a process of its own
def test_an_epoch_too_small_for_one_batch_is_an_error_not_an_untrained_model(rendered_sets, tmp_path):
    """8 lines, batch 16, ratio 1: BasicSR's loader drops the incomplete batch, its loop ran every epoch empty, logged
    "End of training" and saved the untrained network as the run's result."""
    opt = train_options(rendered_sets, batch_size_per_gpu=16, dataset_enlarge_ratio=1)
    path = tmp_path / 'options.yml'
    path.write_text(yaml.safe_dump(opt), encoding='utf-8')
    proc = subprocess.run([sys.executable, '-m', 'tola_plugin.train', '-opt',
                           str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OMP_NUM_THREADS='1'))
    last = proc.stderr.splitlines()[-1] if proc.stderr else ''
    assert proc.returncode == 2 and last.startswith('error: datasets.train: an epoch has '), proc.stderr[-2000:]
    assert 'batch_size_per_gpu is 16' in last and 'at most ' in last, last
    assert not (tmp_path / 'experiments' / 'exp' / 'models' / 'net_g_latest.pth').exists()


def baseline_options(batch):
    """BasicSR's ESRGAN route (RRDBNet ×4 generator, VGG-style discriminator) on 128-pixel GT crops, training."""
    return dict(model_type='ESRGANModel', scale=4, num_gpu=0, is_train=True, dist=False,
                network_g=dict(type='RRDBNet', num_in_ch=3, num_out_ch=3, num_feat=16, num_block=2,
                               num_grow_ch=8), network_d=dict(type='VGGStyleDiscriminator', num_in_ch=3, num_feat=8,
                                                              input_size=128),
                datasets=dict(train=dict(type='PairedImageDataset', gt_size=128, batch_size_per_gpu=batch)),
                train=dict(pixel_opt=dict(type='L1Loss')))


def test_another_network_counts_what_its_forward_keeps_as_on_a_real_forward(eight_gib):
    """A BasicSR baseline's per-sample demand is its GT crop plus what autograd keeps of the generator on the LQ crop
    and of the discriminator on the GT crop, measured on the meta device: byte for byte what a real CPU forward
    keeps (before, weights and images only: a batch of RRDBNet activations far past the memory passed)."""
    import torch

    from basicsr.archs.discriminator_arch import VGGStyleDiscriminator
    from basicsr.archs.rrdbnet_arch import RRDBNet

    from tola_plugin.basicsr_glue.resource_bounds import check_memory, demand
    from tola_plugin.options.reader import OptionError
    from tola_plugin.utils.tensor_memory import saved_bytes_per_sample
    opt = baseline_options(batch=4)
    torch.manual_seed(0)
    generator = RRDBNet(3, 3, scale=4, num_feat=16, num_block=2, num_grow_ch=8).train()
    real_g = saved_bytes_per_sample(generator, (3, 32, 32))
    real_d = saved_bytes_per_sample(VGGStyleDiscriminator(3, 8, input_size=128).train(), (3, 128, 128))
    assert real_g > 3 * 4 * 128 * 128 and real_d > 0  # more than the GT image itself: what was not counted before
    fixed, per_sample, _ = demand(opt, (128, 128))
    assert per_sample == real_g + real_d + 3 * 4 * 128 * 128 + 8
    check_memory(opt)
    fit = int(0.9 * 8 * GIB - fixed) // per_sample
    opt['datasets']['train']['batch_size_per_gpu'] = fit + 1
    with pytest.raises(OptionError, match=f'MiB per sample.*at most {fit:,} fit$'):
        check_memory(opt)


def test_a_forward_the_meta_device_cannot_run_is_said_and_not_counted(eight_gib, monkeypatch, capsys):
    """A network whose forward needs values (``.item()``, data-dependent shapes) keeps its weights in the bound; its
    activations are left out with a warning naming it, and the run starts."""
    from tola_plugin.basicsr_glue import resource_bounds

    def cannot(net, shape):
        raise RuntimeError('Tensor.item() cannot be called on meta tensors')

    monkeypatch.setattr(resource_bounds, 'saved_bytes_per_sample', cannot)
    monkeypatch.setattr(resource_bounds, '_measured', {})
    fixed, per_sample, nets = resource_bounds.demand(baseline_options(batch=4), (128, 128))
    assert per_sample == 3 * 4 * 128 * 128 + 8 and fixed > 0 and all(n[2] > 0 for n in nets)
    err = capsys.readouterr().err
    assert 'warning: network_g: its forward could not run on the meta device (RuntimeError: Tensor.item()' in err
    assert 'warning: network_d: its forward' in err
    resource_bounds.check_memory(baseline_options(batch=4))


def test_processes_sharing_a_gpu_share_its_memory(monkeypatch):
    """Two torchrun ranks on one GPU (gloo: ``local_cuda_device(shared=True)``) each get half of it in the bound."""
    import types

    import torch

    from tola_plugin.basicsr_glue.resource_bounds import usable_memory
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    monkeypatch.setattr(torch.cuda, 'get_device_properties', lambda i: types.SimpleNamespace(total_memory=80 * GIB))
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '2')
    usable, where = usable_memory({'num_gpu': 1, 'dist': True})
    assert usable == int(0.9 * 80 * GIB / 2) and where == "90% of the GPU's 80.00 GiB of memory shared by 2 processes"
    assert usable_memory({'num_gpu': 1, 'dist': False})[0] == int(0.9 * 80 * GIB)


# torch's message for a CUDA allocation that failed, as torch 2.x writes it
TORCH_OOM = ('CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.25 '
             'GiB is free. Including non-PyTorch memory, this process has 77.80 GiB memory in use. Of the allocated '
             'memory 75.10 GiB is allocated by PyTorch. If reserved but unallocated memory is large try setting '
             'PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.')
SAID = ('error: out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 '
        'GiB of which 1.25 GiB is free.): the run needs more of the GPU than is free (another process may hold some); '
        'a training run fits with a lower datasets:train:batch_size_per_gpu (train:accumulate_grad_batches keeps the '
        'batch), network_g:gradient_checkpointing: [idm, vae_encoder, vae_decoder] or network_g:precision: bf16, a '
        'test run with smaller images; tola-estimate-memory -opt FILE says what fits')


def out_of_memory_at(iteration, monkeypatch):
    """TOLAModel's step ``iteration`` fails to allocate on the GPU (simulated on the CPU: torch's OutOfMemoryError
    with its message, raised after the forward, as CUDA raises it)."""
    import torch

    from tola_plugin.models.tola_model import TOLAModel
    step = TOLAModel.optimize_parameters

    def step_out_of_memory(self, current_iter):
        if current_iter == iteration:
            self.net_g(self.lq)
            raise torch.cuda.OutOfMemoryError(TORCH_OOM)
        return step(self, current_iter)

    monkeypatch.setattr(TOLAModel, 'optimize_parameters', step_out_of_memory)


def test_out_of_gpu_memory_mid_run_ends_in_one_line_saying_what_to_change(rendered_sets, tmp_path, monkeypatch, capsys):
    """Out of GPU memory at the second step (another process took memory after the start's bound): one line with
    torch's figures and the options that make the run fit, exit status 2, no traceback; the run had started, so its
    folder and first iteration's log stay."""
    out_of_memory_at(2, monkeypatch)
    code = launch(tmp_path, monkeypatch, tiny_demo_options(rendered_sets, 'oom', total_iter=3, freq=3))
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and err[-1] == SAID and not any('Traceback' in line for line in err), err
    assert (tmp_path / 'experiments' / 'oom' / 'models').is_dir()


def test_basicsr_s_own_launcher_says_the_same_line(monkeypatch, capsys):
    """``python -m basicsr.train`` (its script's uncaught error goes to the excepthook the plugin installs): the same
    one line and exit status; any other RuntimeError keeps its traceback (a bug)."""
    import torch

    from tola_plugin.basicsr_glue import launchers
    from tola_plugin.utils import cli_errors
    exits = []
    monkeypatch.setattr(sys, 'excepthook', lambda *args: exits.append('traceback'))
    monkeypatch.setattr(cli_errors.os, '_exit', exits.append)
    monkeypatch.setattr(launchers, '_end_after_error', lambda: exits.append('cleaned'))
    cli_errors.install_excepthook(launchers._end_after_error, translate=launchers.out_of_gpu_memory)
    error = torch.cuda.OutOfMemoryError(TORCH_OOM)
    sys.excepthook(type(error), error, None)
    assert capsys.readouterr().err.strip() == SAID and exits == ['cleaned', 2]
    exits.clear()
    error = RuntimeError('CUDA error: an illegal memory access was encountered')
    sys.excepthook(type(error), error, None)
    assert exits == ['traceback']


@pytest.mark.parametrize('message, told', [
    (TORCH_OOM, True),
    ('cuDNN error: CUDNN_STATUS_ALLOC_FAILED', True),
    ('CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`', True),
    ('CUDA error: an illegal memory access was encountered', False),
])
def test_what_counts_as_out_of_gpu_memory(message, told):
    from tola_plugin.basicsr_glue.resource_bounds import out_of_gpu_memory
    said = out_of_gpu_memory(RuntimeError(message))
    assert (said is not None) == told
    if told:
        assert str(said).startswith(f'out of GPU memory ({message[:40]}') and 'batch_size_per_gpu' in str(said)
