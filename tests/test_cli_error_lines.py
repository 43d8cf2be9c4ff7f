"""Issue 48, item 6: a mistake on the command line is one line naming the option and what was expected, never a
library's error (``[Errno 2] No such file or directory: ''``), a traceback, a run that fails every image, a message
about ranks in a one-process run or a 301-digit echo. (``train.total_iter: -5`` and ``--force_yml a=b=c``:
tests/test_options_overrides.py.)"""
import os

import pytest
import torch


def usage_error(parse, argv, capsys) -> str:
    """``parse(argv)`` ends with argparse's usage error (exit status 2). -> its ``error:`` line."""
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_an_empty_output_folder_is_a_usage_error(capsys):
    from tola_cli.infer import parse_args
    line = usage_error(parse_args, ['-i', 'in', '-o', ''], capsys)
    assert line.endswith("-o/--output '': expected the output folder (made when missing)"), line


@pytest.mark.parametrize('device', ['meta', 'mps', 'xpu'])
def test_a_device_the_package_does_not_run_on_is_refused_before_loading(device):
    """``--device meta`` was accepted, then every image failed on ``Tensor.item()``."""
    from tola_plugin.inference.loaders import PipelineLoading
    from tola_plugin.utils.devices import resolve_device
    with pytest.raises(ValueError, match=f"device '{device}': expected cpu, cuda or cuda:N"):
        PipelineLoading.check_placement(device)  # every loader's first step (TOLAPipeline.load, tola-infer)
    assert resolve_device('cpu') == torch.device('cpu')


def test_a_request_no_path_can_serve_is_one_error_line(capsys):
    """An explicit ``--precision bf16`` that qualification refuses was a 20-frame traceback of ``NoPathLeft``."""
    from tola_plugin.runtime.serving import NoPathLeft
    from tola_plugin.utils.cli_errors import run_tool
    why = 'backend torch, precision bf16 on cpu: no path can run (torch bf16: wrong results (route: moves ẑ0 by 18%))'

    def main():
        raise NoPathLeft(why)

    with pytest.raises(SystemExit) as exit_info:
        run_tool(main, debug=False)
    assert exit_info.value.code == 2 and capsys.readouterr().err == f'error: {why}\n'


def test_an_unreadable_resume_state_of_a_one_process_run_says_nothing_of_ranks(tmp_path):
    import basicsr.train
    states = tmp_path / 'exp' / 'training_states'
    states.mkdir(parents=True)
    (states / '5.state').write_bytes(b'not a torch file, not a pickle')
    opt = {
        'name': 'exp', 'num_gpu': 0, 'auto_resume': False, 'network_g': {'type': 'RRDBNet'}, 'path': {
            'training_states': str(states), 'models': str(tmp_path / 'exp' / 'models'),
            'experiments_root': str(tmp_path / 'exp'), 'resume_state': str(states / '5.state')
        }
    }
    with pytest.raises(ValueError) as err:
        basicsr.train.load_resume_state(opt)
    assert '5.state' in str(err.value) and 'rank' not in str(err.value), err.value


@pytest.mark.parametrize('value, shown', [(1e306, 'got 1e+306'), (10**400, 'got an integer of 401 digits'),
                                          (2 * 10**8, 'got 200,000,000'), (-1, 'got -1')])
def test_a_huge_image_budget_is_shown_short(value, shown):
    """``--max-megapixels 1e300`` echoed a 301-digit number."""
    from tola_plugin.data.image_io import check_max_pixels
    with pytest.raises(ValueError) as err:
        check_max_pixels(value)
    assert str(err.value).endswith(shown) and len(str(err.value)) < 300, err.value


@pytest.mark.parametrize('tool, flag', [('infer', '--overlap'), ('infer', '--batch-size'), ('web', '--port'),
                                        ('infer', '--max-windows'), ('evaluate', '--max-megapixels')])
def test_a_huge_number_on_any_command_line_is_shown_short(tool, flag, capsys):
    """A 300-digit integer after a range-checked flag was echoed in full in its usage error."""
    import importlib
    parse = importlib.import_module(f'tola_cli.{tool}').parse_args
    required = {'infer': ['-i', 'in', '-o', 'out'], 'web': [], 'evaluate': ['--method', 'A=a', '--out', 'o']}[tool]
    line = usage_error(parse, required + [flag, '-' + '9' * 300], capsys)
    assert flag in line and len(line) < 200 and ('got -1e+300' in line or 'an integer of 300 digits' in line), line


@pytest.mark.parametrize('host, why', [('bogus.invalid', "'bogus.invalid' does not resolve"),
                                       ('192.0.2.1', "'192.0.2.1' (192.0.2.1) cannot be listened on here")])
def test_a_web_host_that_cannot_be_listened_on_is_said_at_once(capsys, host, why):
    """``tola-web --host bogus.invalid`` loaded the model, then ended in ``[Errno -2] Name or service not known``."""
    from tola_cli.web import parse_args
    line = usage_error(parse_args, ['--host', host], capsys)
    assert f'argument --host: {why}' in line and 'expected a name or address of this machine' in line, line
    assert parse_args(['--host', '127.0.0.1']).host == '127.0.0.1'


def test_export_to_a_folder_is_refused_before_the_network_is_built(tmp_path, monkeypatch):
    """``tola-export-merged --out`` naming a folder built the network, then ended in ``[Errno 21] Is a directory``."""
    from tola_plugin.commands import weight_files

    def never(*args, **kwargs):
        raise AssertionError('the network was built')

    monkeypatch.setattr(weight_files.TOLANet, 'from_options', never)
    folder = tmp_path / 'm.safetensors'
    folder.mkdir()
    with pytest.raises(ValueError, match=f'--out {folder} is a folder; expected the .safetensors file to write'):
        weight_files.export_merged('options.yml', str(folder))
    assert os.listdir(folder) == []
