"""Launchers: a stock BasicSR option file trains, validates, checkpoints, auto-resumes and tests on CPU,
and runs under 2-process gloo DDP with torchrun."""
import glob
import os
import re
import sys

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


def test_two_process_gloo_ddp(rendered_sets, tmp_path):
    opt = tiny_options(rendered_sets, 'tiny_rrdb_ddp', total_iter=4, freq=4)
    opt_file = write_options(tmp_path / 'ddp.yml', opt)
    proc = run_launcher([
        '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}', '-m', 'tola_plugin.train',
        '-opt', opt_file, '--launcher', 'pytorch'
    ], cwd=tmp_path)
    exp = tmp_path / 'experiments' / 'tiny_rrdb_ddp'
    log = read_log(exp)
    assert 'World size (gpu number): 2' in log
    assert 'DistributedDataParallel' in log
    assert (exp / 'models' / 'net_g_latest.pth').is_file()  # rank 0 saved
    assert (exp / 'training_states' / '4.state').is_file()
    assert 'End of training' in log, proc.stdout[-2000:]
