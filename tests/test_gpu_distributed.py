"""Processes and devices on GPU machines, tested on a CPU with CUDA simulated (monkeypatched ``torch.cuda``): the
process-group backend, one GPU per process, srun's environment, the timeout and device binding, DDP's options,
DataParallel refused, the loader's batch in the resume bookkeeping, a driver this torch cannot use, and the
process group destroyed at exit (basicsr_glue/distributed.py, process_group.py, ddp_wrapping.py)."""
import datetime
import os
import signal
import stat
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tola_plugin.basicsr_glue import distributed as D
from tola_plugin.basicsr_glue.ddp_wrapping import model_to_device
from tola_plugin.basicsr_glue.option_parsing import check_cuda_usable
from tola_plugin.basicsr_glue.process_group import init_dist, start_distributed
from tola_plugin.options.checks import OptionError, check_run_options
from tola_plugin.options.dist_params import process_group_timeout
from conftest import free_port, write_options
from tola_testing import TESTS, tiny_demo_options


@pytest.mark.parametrize('num_gpu, requested, expected', [(0, None, 'gloo'), (2, None, 'nccl'), (2, 'gloo', 'gloo'),
                                                          (1, 'nccl', 'nccl')])
def test_backend_follows_the_models_device_not_the_machine(num_gpu, requested, expected):
    assert D.process_group_backend(num_gpu, requested) == expected


def test_nccl_for_a_cpu_model_is_refused():
    with pytest.raises(ValueError, match='num_gpu is 0'):
        D.process_group_backend(0, 'nccl')
    with pytest.raises(ValueError, match='backend'):
        D.process_group_backend(1, 'mpi')


def test_one_gpu_per_process():
    assert [D.local_cuda_device(r, 4, 4) for r in range(4)] == [0, 1, 2, 3]
    assert D.local_cuda_device(1, 4, 2) == 1  # fewer processes than GPUs: fine
    with pytest.raises(ValueError, match='2 processes on this node but only 1 CUDA'):
        D.local_cuda_device(1, 1, 2)  # torchrun --nproc_per_node=2 on one GPU
    with pytest.raises(ValueError, match='8 processes on this node but only 4'):
        D.local_cuda_device(5, 4, 8)
    assert D.local_cuda_device(3, 1, None) == 0  # srun --gpus-per-task=1: each task sees its own GPU as 0
    with pytest.raises(ValueError, match='node-local rank 3 but only 2'):
        D.local_cuda_device(3, 2, None)
    with pytest.raises(ValueError, match='no CUDA device'):
        D.local_cuda_device(0, 0, 1)


def fake_scontrol(folder, hosts):
    """An ``scontrol`` on PATH that answers ``show hostnames`` with ``hosts`` (one per line)."""
    path = os.path.join(folder, 'scontrol')
    with open(path, 'w', encoding='utf-8') as f:
        f.write('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] || exit 3\nprintf "%s\\n" ' +
                ' '.join(f'"{h}"' for h in hosts) + '\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return folder


def test_slurm_environment(tmp_path, monkeypatch):
    monkeypatch.setenv('PATH',
                       fake_scontrol(str(tmp_path), ['gpu-node07', 'gpu-node08']) + os.pathsep + os.environ['PATH'])
    env = {'SLURM_PROCID': '5', 'SLURM_NTASKS': '8', 'SLURM_LOCALID': '1', 'SLURM_NODELIST': 'gpu-node[07-08]'}
    assert D.slurm_environment(env) == {
        'RANK': '5', 'WORLD_SIZE': '8', 'LOCAL_RANK': '1', 'MASTER_ADDR': 'gpu-node07', 'MASTER_PORT': '29500'
    }
    assert D.slurm_environment(dict(env, MASTER_PORT='1234'))['MASTER_PORT'] == '1234'
    assert D.slurm_environment(dict(env, MASTER_PORT='1234'), port=4321)['MASTER_PORT'] == '4321'  # dist_params
    with pytest.raises(ValueError, match='SLURM_LOCALID not set'):
        D.slurm_environment({k: v for k, v in env.items() if k != 'SLURM_LOCALID'})
    monkeypatch.setenv('PATH', str(tmp_path / 'nowhere'))
    with pytest.raises(ValueError, match='scontrol is not on PATH'):
        D.slurm_environment(env)


def test_timeout_and_run_options():
    assert process_group_timeout(None) == datetime.timedelta(minutes=60)
    assert process_group_timeout({'timeout_minutes': 90}) == datetime.timedelta(minutes=90)
    check_run_options({'allow_tf32': True, 'deterministic': False, 'dist_params': {'port': 2950, 'timeout_minutes': 5}})
    for bad, message in (({'allow_tf32': 'yes'}, 'allow_tf32: expected true or false'),
                         ({'dist_params': {'timeout': 5}}, "did you mean 'timeout_minutes'"),
                         ({'dist_params': {'timeout_minutes': 0}}, 'positive number of minutes'),
                         ({'dist_params': {'backend': 'mpi'}}, 'dist_params.backend'), ({'dist_params': {'port': 'x'}},
                                                                                        'TCP port')):
        with pytest.raises(OptionError, match=message):
            check_run_options(bad)


class CudaSimulated:
    """torch.cuda as seen on a machine with ``count`` GPUs; records set_device and init_process_group."""

    def __init__(self, monkeypatch, count):
        self.calls = {}
        monkeypatch.setattr(torch.cuda, 'is_available', lambda: count > 0)
        monkeypatch.setattr(torch.cuda, 'device_count', lambda: count)
        monkeypatch.setattr(torch.cuda, 'set_device', lambda i: self.calls.setdefault('set_device', i))
        monkeypatch.setattr(dist, 'init_process_group', lambda **kw: self.calls.setdefault('init', kw))
        # the launcher sets the start method once per process, as upstream: not this test process's
        monkeypatch.setattr(torch.multiprocessing, 'get_start_method', lambda allow_none=False: 'fork')


@pytest.mark.parametrize('num_gpu', [0, 4])
def test_start_distributed_under_torchrun(monkeypatch, num_gpu):
    cuda = CudaSimulated(monkeypatch, count=4)
    for key, value in (('RANK', '6'), ('LOCAL_RANK', '2'), ('LOCAL_WORLD_SIZE', '4'), ('WORLD_SIZE', '8')):
        monkeypatch.setenv(key, value)
    start_distributed({'num_gpu': num_gpu, 'dist_params': {'timeout_minutes': 20}}, 'pytorch')
    init = cuda.calls['init']
    assert init['timeout'] == datetime.timedelta(minutes=20)
    if num_gpu:  # the GPU of the node-local rank, the process bound to it
        assert init['backend'] == 'nccl' and cuda.calls['set_device'] == 2
        assert init['device_id'] == torch.device('cuda', 2)
    else:  # a CPU run on a GPU machine: gloo, no device touched
        assert init['backend'] == 'gloo' and init['device_id'] is None and 'set_device' not in cuda.calls


def test_upstream_parse_options_still_gets_a_process_group(monkeypatch):
    """``python basicsr/train.py`` runs upstream's parse_options, which calls init_dist before reading options: the
    group starts there, for the devices present (here a GPU machine)."""
    cuda = CudaSimulated(monkeypatch, count=2)
    for key, value in (('RANK', '1'), ('LOCAL_RANK', '1'), ('LOCAL_WORLD_SIZE', '2')):
        monkeypatch.setenv(key, value)
    init_dist('pytorch')
    assert cuda.calls['init']['backend'] == 'nccl' and cuda.calls['set_device'] == 1
    with pytest.raises(ValueError, match='Invalid launcher'):
        init_dist('mpi')


def test_start_distributed_refuses_more_ranks_than_gpus(monkeypatch):
    cuda = CudaSimulated(monkeypatch, count=2)
    for key, value in (('RANK', '3'), ('LOCAL_RANK', '3'), ('LOCAL_WORLD_SIZE', '4')):
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match='4 processes on this node but only 2'):
        start_distributed({'num_gpu': 2}, 'pytorch')
    assert cuda.calls == {}  # refused before touching a device or the network


def test_with_gloo_asked_for_processes_share_the_gpus_and_it_is_said(monkeypatch, capsys):
    """Issue 50 item 5: two ranks on one GPU (what one lent GPU can test of multi-GPU training) through gloo, which
    moves CUDA tensors through the host; NCCL refuses a shared GPU, so only an explicit gloo shares."""
    assert [D.local_cuda_device(r, 1, 2, shared=True) for r in range(2)] == [0, 0]
    assert [D.local_cuda_device(r, 2, 4, shared=True) for r in range(4)] == [0, 1, 0, 1]
    with pytest.raises(ValueError, match='dist_params.backend: gloo to share the GPUs'):
        D.local_cuda_device(1, 1, 2)
    for rank in ('0', '1'):
        cuda = CudaSimulated(monkeypatch, count=1)
        for key, value in (('RANK', rank), ('LOCAL_RANK', rank), ('LOCAL_WORLD_SIZE', '2')):
            monkeypatch.setenv(key, value)
        start_distributed({'num_gpu': 1, 'dist_params': {'backend': 'gloo'}}, 'pytorch')
        assert cuda.calls['set_device'] == 0 and cuda.calls['init']['backend'] == 'gloo'
        assert cuda.calls['init']['device_id'] is None
        said = capsys.readouterr().err
        assert ('warning: dist_params.backend gloo: 2 processes share 1 CUDA device(s)' in said) == (rank == '0')
    with pytest.raises(ValueError, match='2 processes on this node but only 1'):
        start_distributed({'num_gpu': 1, 'dist_params': {}}, 'pytorch')  # nccl: refused as before


def test_start_distributed_under_srun_on_cpu(monkeypatch, tmp_path):
    """--launcher slurm on a CPU machine: upstream divides by the device count (0); here srun's variables become
    torch's, and the group is gloo."""
    cuda = CudaSimulated(monkeypatch, count=0)
    monkeypatch.setenv('PATH', fake_scontrol(str(tmp_path), ['127.0.0.1']) + os.pathsep + os.environ['PATH'])
    for key, value in (('SLURM_PROCID', '1'), ('SLURM_NTASKS', '2'), ('SLURM_LOCALID', '0'), ('SLURM_NODELIST',
                                                                                              'node[1-2]')):
        monkeypatch.setenv(key, value)
    for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        monkeypatch.delenv(key, raising=False)  # restored by monkeypatch after start_distributed sets them
    start_distributed({'num_gpu': 0, 'dist_params': {'port': 23456}}, 'slurm')
    assert cuda.calls['init']['backend'] == 'gloo'
    assert [os.environ[k] for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')
            ] == ['1', '2', '0', '127.0.0.1', '23456']


def test_ddp_options_and_buffers():
    cuda, cpu = D.ddp_options('cuda', 3, False, False), D.ddp_options('cpu', None, True, True)
    flag = 'forward_sync_buffers' if 'forward_sync_buffers' in cuda else 'broadcast_buffers'  # renamed in torch 2.14
    assert cuda == {flag: False, 'find_unused_parameters': False, 'device_ids': [3]}
    assert cpu == {flag: True, 'find_unused_parameters': True}
    frozen_bn = nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3))
    frozen_bn[1].eval()
    assert not D.buffers_change(frozen_bn)  # like TOLANet: modules with buffers stay in eval mode
    assert D.buffers_change(nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)))  # a training BatchNorm


def test_ddp_wrapper_of_a_frozen_backbone_broadcasts_nothing(monkeypatch):
    """model_to_device under a (one-process, gloo) group: DDP without buffer broadcasts for a network whose
    buffers are frozen."""
    store = dist.HashStore()
    dist.init_process_group('gloo', store=store, rank=0, world_size=1)
    try:
        model = type('M', (), {})()
        model.device, model.opt = torch.device('cpu'), {'dist': True, 'num_gpu': 0}
        net = nn.Sequential(nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3))
        net[1].eval()
        wrapped = model_to_device(model, net)
        assert isinstance(wrapped, nn.parallel.DistributedDataParallel) and wrapped.broadcast_buffers is False
    finally:
        D.end_process_group()
    assert not dist.is_initialized()
    D.end_process_group()  # nothing to destroy: no error


@pytest.mark.parametrize('launcher', ['train', 'test'])
def test_launchers_destroy_the_process_group_even_after_an_error(launcher):
    module = __import__(f'tola_plugin.{launcher}', fromlist=['run'])

    def pipeline(root):
        dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)
        raise ValueError('a bad option')

    with pytest.raises(ValueError, match='a bad option'):
        module.run(pipeline)
    assert not dist.is_initialized()


@pytest.mark.end_to_end
@pytest.mark.parametrize('kind, error, cause', [
    ('error', 'planted failure of rank 1 at iteration 2', 'planted failure of rank 1 at iteration 2'),
    ('oom', 'out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.11 '
     'GiB of which 1.25 GiB is free.): the run needs more of the GPU than is free',
     'OutOfMemoryError: CUDA out of memory'),
])
def test_a_failing_rank_ends_the_torchrun_job_without_waiting_out_a_timeout(rendered_sets, tmp_path, kind, error,
                                                                            cause):
    """2 ranks on gloo, rank 1 raising mid-step (a bug, or out of GPU memory) while rank 0 waits in the gradient
    all-reduce, with a ``destroy_process_group`` that blocks as NCCL's can: the failing rank ends at once, naming the
    error (out of memory: in one line saying what to change), torchrun stops rank 0, and its summary names the error.
    Whatever else could end the job takes an hour (that blocked call, the process group's timeout rank 0 waits in): a
    job that ends within the test's 10 minutes ended at the failure, and no load on the machine can make it look as if
    it had not."""
    opt = tiny_demo_options(rendered_sets, 'tola_fail', total_iter=4, freq=4)
    opt['dist_params']['timeout_minutes'] = 60  # the wait a launcher that missed the failure would end in
    proc = subprocess.Popen([
        sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}',
        os.path.join(TESTS, 'train_then_raise.py'), '1', '2', kind, '-opt',
        write_options(tmp_path / 'fail.yml', opt), '--launcher', 'pytorch'
    ], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=dict(os.environ, OMP_NUM_THREADS='1'))
    try:
        _, stderr = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both ranks
        _, stderr = proc.communicate()
        pytest.fail(f'the job was still running after 600 s, waiting out a timeout:\n{stderr[-3000:]}')
    assert proc.returncode != 0, f'exit status {proc.returncode}'
    assert f'error: rank 1 of 2 failed: {error}' in stderr
    ranks = stderr[:stderr.index('failed (exitcode')]  # before torchrun's own lines
    assert ('Traceback' in ranks) == (kind == 'error')  # a bug's traceback; out of memory is the options' to fix
    root_cause = stderr[stderr.index('Root Cause'):]
    assert 'rank      : 1' in root_cause and cause in root_cause, root_cause  # torchrun's summary names it


def test_data_parallel_refused_for_frozen_backbones():
    frozen = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    frozen[0].requires_grad_(False)
    with pytest.raises(ValueError, match='20 frozen parameters.*torchrun --nproc_per_node=2'):
        D.check_data_parallel(frozen, 2)
    D.check_data_parallel(frozen, 1)
    D.check_data_parallel(nn.Linear(4, 4), 4)  # a BasicSR baseline keeps upstream's DataParallel


def test_loader_batch_size_of_the_resume_bookkeeping():
    train = {'datasets': {'train': {'batch_size_per_gpu': 16}}}
    assert D.loader_batch_size(dict(train, dist=False, num_gpu=0)) == 16
    assert D.loader_batch_size(dict(train, dist=False, num_gpu=4)) == 64  # one process, four GPUs
    assert D.loader_batch_size(dict(train, dist=True, num_gpu=4)) == 16  # one process per GPU


def test_a_driver_this_torch_cannot_use(tmp_path, monkeypatch):
    version = tmp_path / 'version'
    version.write_text('NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release Build  '
                       '(dvs-builder@U16-I3-B03-4-3)\nGCC version:  gcc version 12.3.0\n')
    assert D.nvidia_driver_version(str(version)) == '535.104.05'
    assert D.nvidia_driver_version(str(tmp_path / 'missing')) is None
    assert D.cuda_unusable_reason(True, '13.0', '580.65') == ''
    assert D.cuda_unusable_reason(False, '13.0', None) == ''  # no GPU at all: the CPU is the machine
    assert 'needs driver R580' in D.cuda_unusable_reason(False, '13.0', '535.104.05')
    assert 'CPU-only build' in D.cuda_unusable_reason(False, None, '535.104.05')

    # through the launcher's check (on the merged options: the file's or --force_yml's num_gpu): num_gpu auto is
    # refused, num_gpu 0 is a choice
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(D, 'nvidia_driver_version', lambda: '535.104.05')
    with pytest.raises(OptionError, match='num_gpu: auto found no usable GPU: an NVIDIA driver \\(535.104.05\\)'):
        check_cuda_usable({'num_gpu': 'auto'})
    check_cuda_usable({'num_gpu': 0})
