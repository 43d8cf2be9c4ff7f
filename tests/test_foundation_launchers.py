"""Launchers: a stock BasicSR option file trains, validates, checkpoints, auto-resumes and tests on CPU, and runs
under 2-process gloo DDP with multi-node torchrun and with BasicSR's slurm launcher."""
import glob
import os
import re
import subprocess
import sys

import pytest
import yaml

from conftest import REPO, free_port, run_launcher, write_options


def tiny_options(sets, name, total_iter=4, freq=2):
    """The demo's stock RRDBNet option file, shrunk: same keys, tiny net, few iterations."""
    with open(os.path.join(REPO, 'options', 'demo', 'train_RRDB_demo.yml'), encoding='utf-8') as f:
        opt = yaml.safe_load(f)
    opt['name'] = name
    opt['num_gpu'] = 0
    train, val = opt['datasets']['train'], opt['datasets']['val']
    train.update(
        dataroot_gt=os.path.join(sets['train'], 'hr'), dataroot_lq=os.path.join(sets['train'], 'lr_x4'), gt_size=64,
        batch_size_per_gpu=2, num_worker_per_gpu=0, dataset_enlarge_ratio=20)
    val.update(dataroot_gt=os.path.join(sets['val'], 'hr'), dataroot_lq=os.path.join(sets['val'], 'lr_x4'))
    opt['network_g'].update(num_feat=8, num_block=1, num_grow_ch=4)
    opt['train'].update(total_iter=total_iter)
    opt['train']['scheduler']['milestones'] = [total_iter * 10]
    opt['val']['val_freq'] = freq
    opt['logger'].update(print_freq=1, save_checkpoint_freq=freq)
    return opt


def read_log(exp_dir):
    return ''.join(open(p, encoding='utf-8').read() for p in sorted(glob.glob(os.path.join(exp_dir, 'train_*.log'))))


@pytest.mark.end_to_end
def test_train_validate_checkpoint_resume_and_test(rendered_sets, tmp_path):
    opt_file = write_options(tmp_path / 'train.yml', tiny_options(rendered_sets, 'tiny_rrdb'))
    run_launcher(['-m', 'tola_plugin.train', '-opt', opt_file], cwd=tmp_path)
    exp = tmp_path / 'experiments' / 'tiny_rrdb'
    assert (exp / 'models' / 'net_g_2.pth').is_file()
    assert (exp / 'models' / 'net_g_4.pth').is_file()
    assert (exp / 'training_states' / '4.state').is_file()
    assert len(glob.glob(str(exp / 'visualization' / '*' / '*_2.png'))) == 2  # validation wrote images
    assert re.search(r'# psnr: [\d.]+', read_log(exp))

    # --auto_resume continues from the newest state (iter 4) to the new total.
    run_launcher(['-m', 'tola_plugin.train', '-opt', opt_file, '--auto_resume', '--force_yml', 'train:total_iter=6'],
                 cwd=tmp_path)
    log = read_log(exp)
    assert 'Resuming training from epoch' in log and 'iter: 4.' in log
    assert (exp / 'models' / 'net_g_6.pth').is_file()
    assert (exp / 'training_states' / '6.state').is_file()

    # The test launcher restores the trained network and writes results/ under the CWD.
    test_opt = tiny_options(rendered_sets, 'tiny_rrdb_test')
    test_opt['datasets'] = {'test_1': dict(test_opt['datasets']['val'], name='rendered_test')}
    test_opt['path'] = {
        'pretrain_network_g': str(exp / 'models' / 'net_g_6.pth'), 'strict_load_g': True, 'param_key_g': 'params'
    }
    del test_opt['train']
    test_opt['val']['suffix'] = None  # stock BasicSR test files carry it
    run_launcher(['-m', 'tola_plugin.test', '-opt', write_options(tmp_path / 'test.yml', test_opt)], cwd=tmp_path)
    assert len(glob.glob(str(tmp_path / 'results' / 'tiny_rrdb_test' / 'visualization' / 'rendered_test' /
                             '*.png'))) == 2


def test_console_scripts_are_installed():
    bindir = os.path.dirname(sys.executable)
    for script in ('tola-train', 'tola-test'):
        assert os.access(os.path.join(bindir, script), os.X_OK), f'{script} missing from {bindir}'


def start_all(commands, cwd, env_per_process):
    """Start ``python <args>`` processes together (the node groups or srun tasks of one job) and wait for all;
    raises with the output of any that failed."""
    procs = [
        subprocess.Popen([sys.executable, *args], cwd=cwd, env=dict(os.environ, OMP_NUM_THREADS='1', **env),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args, env in zip(commands, env_per_process)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        if p.returncode != 0:
            raise AssertionError(f'{p.args} failed ({p.returncode}):\n{out[-3000:]}\n{err[-6000:]}')
    return outputs


def check_ddp_run(exp, outputs):
    log = read_log(exp)
    assert 'World size (gpu number): 2' in log and 'DistributedDataParallel' in log
    assert (exp / 'models' / 'net_g_latest.pth').is_file()  # rank 0 saved
    assert (exp / 'training_states' / '4.state').is_file()
    assert 'End of training' in log, outputs[0][0][-2000:]


@pytest.mark.end_to_end
def test_two_node_torchrun_gloo_ddp(rendered_sets, tmp_path):
    """Multi-node torchrun (c10d rendezvous) as two node groups of one process each on 127.0.0.1."""
    opt_file = write_options(tmp_path / 'ddp.yml', tiny_options(rendered_sets, 'tiny_rrdb_ddp', total_iter=4, freq=4))
    endpoint = f'127.0.0.1:{free_port()}'
    commands = [[
        '-m', 'torch.distributed.run', '--nnodes=2', '--nproc_per_node=1', '--rdzv_backend=c10d',
        f'--rdzv_endpoint={endpoint}', '--rdzv_id=tola_two_nodes', f'--rdzv_conf=is_host={int(node == 0)}', '-m',
        'tola_plugin.train', '-opt', opt_file, '--launcher', 'pytorch'
    ] for node in (0, 1)]
    outputs = start_all(commands, tmp_path, [{}, {}])
    check_ddp_run(tmp_path / 'experiments' / 'tiny_rrdb_ddp', outputs)


@pytest.mark.end_to_end
def test_slurm_launcher_two_tasks(rendered_sets, tmp_path):
    """BasicSR's --launcher slurm: two tasks as srun starts them on two nodes (SLURM_* variables, scontrol naming
    the first host), on one machine, on the CPU."""
    opt = tiny_options(rendered_sets, 'tiny_rrdb_slurm', total_iter=4, freq=4)
    opt['dist_params'] = {'port': free_port()}
    opt_file = write_options(tmp_path / 'slurm.yml', opt)
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    scontrol = bin_dir / 'scontrol'
    scontrol.write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && printf "127.0.0.1\\nlocalhost\\n"\n')
    scontrol.chmod(0o755)
    env = {'PATH': f'{bin_dir}{os.pathsep}{os.environ["PATH"]}', 'SLURM_NTASKS': '2', 'SLURM_NODELIST': 'node[1-2]'}
    for key in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):
        assert key not in os.environ  # srun sets none of these: the launcher derives them
    outputs = start_all([['-m', 'tola_plugin.train', '-opt', opt_file, '--launcher', 'slurm']] * 2, tmp_path,
                        [dict(env, SLURM_PROCID=str(task), SLURM_LOCALID='0') for task in (0, 1)])
    check_ddp_run(tmp_path / 'experiments' / 'tiny_rrdb_slurm', outputs)
