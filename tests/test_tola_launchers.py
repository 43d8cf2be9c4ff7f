"""The demo option files through the real launchers: 2-process gloo DDP with BasicSR's own train.py under torchrun
(the import hook in every rank; validation on rank 0 must not start a collective the other rank never joins), then
our test launcher with the hook switched off."""
import glob
import os

import pytest
import torch

from conftest import free_port, run_launcher, write_options
from launcher_testing import make_checkout
from tola_testing import REPO, load_yaml, tiny_backbone, tiny_demo_options


@pytest.mark.end_to_end
def test_two_process_gloo_ddp_train_validate_and_test(rendered_sets, tmp_path):
    opt = tiny_demo_options(rendered_sets, 'tola_ddp', total_iter=2, freq=2)
    opt_file = write_options(tmp_path / 'ddp.yml', opt)
    env = {'OMP_NUM_THREADS': '1'}
    train_py = make_checkout(tmp_path)['train']  # BasicSR's own script, in a checkout-like folder: outputs there
    run_launcher([
        '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={free_port()}', train_py, '-opt', opt_file,
        '--launcher', 'pytorch'
    ], cwd=tmp_path, env=env)
    exp = tmp_path / 'experiments' / 'tola_ddp'
    log = open(glob.glob(str(exp / 'train_*.log'))[0], encoding='utf-8').read()
    assert 'World size (gpu number): 2' in log and 'DistributedDataParallel' in log
    assert 'TransOCR ACC' in log and 'End of training' in log
    state = torch.load(exp / 'models' / 'net_g_latest.pth', weights_only=True)['params']
    assert {k.split('.')[0] for k in state} == {'idm_lora', 'vae_lora', 'lrc'}

    test = load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))
    test['network_g'].update(tiny_backbone())
    test['datasets']['test_1'].update(dataroot_gt=opt['datasets']['val']['dataroot_gt'],
                                      labels=opt['datasets']['val']['labels'])
    test['path']['pretrain_network_g'] = str(exp / 'models' / 'net_g_latest.pth')
    # our launcher imports the plugin itself: it needs no hook (docs/baselines.md)
    run_launcher(
        ['-m', 'tola_plugin.test', '-opt', write_options(tmp_path / 'test.yml', test)], cwd=tmp_path,
        env=dict(env, TOLA_PLUGIN_HOOK='0'))
    images = glob.glob(str(tmp_path / 'results' / 'demo_TOLA_test' / 'visualization' / 'rendered_val' / '*.png'))
    assert len(images) == 2
