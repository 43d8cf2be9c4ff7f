"""The BasicSR glue's launchers: BasicSR's own launchers, and the one run of its pipelines by ours (``run_pipeline``).

``basicsr.train`` and ``basicsr.test`` get the plugin's ``parse_options`` (reading with
``option_parsing.read_options``), ``load_resume_state`` (``resume_state``) and ``make_exp_dirs`` (upstream's, which
renames an existing ``experiments/<name>`` to ``<name>_archived_<time>``, after the paths the run reads are checked:
a mistyped dataroot moves nothing). Run as scripts (a checkout's
``basicsr/train.py``, ``python -m basicsr.train``, torchrun), they execute in their own ``__main__`` namespace
instead, so ``parse_options`` is also patched where they import it from (``basicsr.utils.options``), and gives the
calling script the same functions; run from an installed basicsr (``python -m``), whose root would be site-packages,
experiments/, tb_logger/ and results/ go under the current directory instead. Their bad input ends in one ``error:``
line (exit status 2) as with our launchers (``cli_errors.install_excepthook``; ``--debug`` shows the traceback).
"""
import os
import sys

import basicsr.models
import basicsr.test
import basicsr.train
import basicsr.utils.options
from basicsr.utils import make_exp_dirs as _original_make_exp_dirs

from tola_plugin.basicsr_glue import distributed, failed_start
from tola_plugin.basicsr_glue.option_parsing import read_options
from tola_plugin.basicsr_glue.resource_bounds import out_of_gpu_memory
from tola_plugin.basicsr_glue.resume_state import load_resume_state
from tola_plugin.options.start_checks import check_data_paths
from tola_plugin.utils import run_lock
from tola_plugin.utils.checkpoint_io import weights_only_loads
from tola_plugin.utils.cli_errors import install_excepthook
from tola_plugin.utils.user_text import say


def parse_options(root_path, is_train=True):
    """BasicSR's ``parse_options`` as every launcher calls it: the plugin's ``read_options``; called first by
    BasicSR's pipelines, it also fits the calling launcher script to the plugin."""
    namespace = sys._getframe(1).f_globals
    root_path = _adopt_launcher_script(namespace, root_path)
    return read_options(root_path, is_train, bound=_is_launcher(namespace))


def _is_launcher(namespace: dict) -> bool:
    """Whether ``namespace`` is a BasicSR launcher's (module or script), not a test calling ``parse_options``."""
    return 'train_pipeline' in namespace or 'test_pipeline' in namespace


def make_exp_dirs(opt):
    """BasicSR's ``make_exp_dirs`` (a fresh start: an existing experiment or results folder is renamed to
    ``*_archived_<time>``), once every path the run reads is there (``options.start_checks.check_data_paths``): a
    start that would fail on a mistyped dataroot fails before anything is moved, and the next ``--auto_resume`` finds
    the experiment where it was."""
    check_data_paths(opt)
    _original_make_exp_dirs(opt)


def run_pipeline(pipeline) -> int:
    """Run BasicSR's ``train_pipeline`` or ``test_pipeline`` from the current directory, as ``python -m
    tola_plugin.train`` / ``.test`` do: every ``torch.load`` weights-only; afterwards the run's locks are released and
    a distributed run's process group destroyed (torchrun / srun: NCCL warns, and may leak, when a group is never
    destroyed). A rank of several that raises ends its process at once instead, naming the error
    (``distributed.end_failed_rank``: destroying the group could wait on the other ranks for the whole timeout); out
    of GPU memory is one line saying what to change (``resource_bounds.out_of_gpu_memory``). -> 0."""
    failed_start.reset()
    try:
        with weights_only_loads():
            pipeline(os.getcwd())
    except Exception as err:
        run_lock.release_all()
        failed_start.clean_up()  # a start that failed leaves no experiments/<name>/, tb_logger/<name>/
        told = out_of_gpu_memory(err)  # one line saying what to change, not a traceback
        if distributed.distributed_world() > 1:
            distributed.end_failed_rank(told or err)
        if told:
            raise told from err
        raise
    finally:
        run_lock.release_all()
        distributed.end_process_group()
    return 0


def _installed_package_root(root_path: str) -> bool:
    """Whether ``root_path`` (the parent of the launcher script's folder) is where packages are installed, i.e.
    the script is the installed basicsr's own (``python -m basicsr.train``), not a checkout's."""
    return os.path.basename(os.path.normpath(root_path)) in ('site-packages', 'dist-packages')


def build_model(opt):
    """BasicSR's ``build_model``, as the launchers call it: once it returns, the run has started
    (``failed_start``: an error before this removes the folders the run made). A validation is numbered with the
    last iteration trained (``_validate_at_last_iteration``)."""
    model = basicsr.models.build_model(opt)
    failed_start.started()
    _validate_at_last_iteration(model)
    return model


def _validate_at_last_iteration(model) -> None:
    """BasicSR's training pipeline validates once more after its loop with the counter it stopped at, past the last
    iteration ("Best: ... @ 6 iter" after a 4-iteration run, also in TensorBoard and the saved images' names): each
    validation is numbered at most with the last iteration ``optimize_parameters`` ran (as given when none ran)."""
    optimize, validation, last = model.optimize_parameters, model.validation, []

    def optimize_parameters(current_iter, *args, **kwargs):
        last[:] = [current_iter]
        return optimize(current_iter, *args, **kwargs)

    def validated(dataloader, current_iter, *args, **kwargs):
        return validation(dataloader, min([current_iter] + last), *args, **kwargs)

    model.optimize_parameters, model.validation = optimize_parameters, validated


def _end_after_error() -> None:
    """What a launcher script's one-line error does first: release the locks, remove a failed start's folders."""
    run_lock.release_all()
    failed_start.clean_up()


def _give_launcher_our_functions(namespace: dict) -> None:
    """The plugin's ``parse_options``, ``load_resume_state``, ``make_exp_dirs`` and ``build_model`` in a launcher's
    namespace (module or script)."""
    ours = {
        'parse_options': parse_options, 'load_resume_state': load_resume_state, 'make_exp_dirs': make_exp_dirs,
        'build_model': build_model
    }
    for name, function in ours.items():
        if name in namespace:
            namespace[name] = function


def _adopt_launcher_script(namespace: dict, root_path: str) -> str:
    """Give a BasicSR launcher run as a script (``namespace``: its globals) the plugin's ``load_resume_state``
    and, when it runs from an installed package, the current directory as root; returns the root to use."""
    if not _is_launcher(namespace):
        return root_path  # not a launcher (e.g. a test calling parse_options)
    _give_launcher_our_functions(namespace)
    if namespace.get('__name__') == '__main__':  # BasicSR's own script: no run_tool around it
        install_excepthook(_end_after_error, translate=out_of_gpu_memory)
    if not _installed_package_root(root_path):
        return root_path
    cwd = os.getcwd()
    if 'init_tb_loggers' in namespace:  # train.py puts tb_logger/ under opt['root_path'] = its own root
        script_init_tb_loggers, script_mkdir_and_rename = namespace['init_tb_loggers'], namespace['mkdir_and_rename']

        def init_tb_loggers(opt):
            return script_init_tb_loggers(dict(opt, root_path=cwd))

        def mkdir_and_rename(path):
            if os.path.commonpath([path, root_path]) == os.path.normpath(root_path):
                path = os.path.join(cwd, os.path.relpath(path, root_path))
            return script_mkdir_and_rename(path)

        namespace['init_tb_loggers'], namespace['mkdir_and_rename'] = init_tb_loggers, mkdir_and_rename
    say(f'note: BasicSR\'s launcher runs from the installed package ({root_path}); its outputs go under the current '
        f'directory {cwd}')
    return cwd


def apply():
    basicsr.utils.options.parse_options = parse_options  # where launcher scripts import it from
    _give_launcher_our_functions(vars(basicsr.train))  # basicsr/__init__ imported both modules before this
    _give_launcher_our_functions(vars(basicsr.test))
