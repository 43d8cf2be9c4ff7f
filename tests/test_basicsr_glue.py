"""The BasicSR glue as one package (tola_plugin/basicsr_glue/, docs/architecture.md): one module per patch, each
applied once at import and listed in the package's table, and BasicSR's names pointing at the glue afterwards."""
import importlib
import pkgutil

import basicsr.test
import basicsr.train
import basicsr.utils.options
from basicsr.data.data_sampler import EnlargedSampler
from basicsr.data.prefetch_dataloader import CPUPrefetcher
from basicsr.models.base_model import BaseModel
from basicsr.utils.file_client import LmdbBackend
from basicsr.utils.logger import MessageLogger
from basicsr.utils.registry import Registry

from tola_plugin import basicsr_glue
from tola_plugin.basicsr_glue import (atomic_saves, ddp_wrapping, enlarged_sampler, exact_resume, launchers,
                                      lmdb_reader, message_logger, network_loading, option_parsing, process_group,
                                      registry_lookup)
from tola_plugin.options import reader as option_files

#: modules of the glue that patch nothing themselves: the helpers only the patches use, and ``resume_state``, whose
#: ``load_resume_state`` the ``launchers`` patch hands to BasicSR's launchers
NOT_APPLIED = {'distributed', 'training_resume', 'resume_state', 'failed_start', 'resource_bounds'}


def glue_modules():
    return sorted(m.name for m in pkgutil.iter_modules(basicsr_glue.__path__))


def test_one_module_per_patch_each_applied_and_listed():
    applied = [m.__name__.rsplit('.', 1)[1] for m in basicsr_glue.PATCHES]
    assert len(set(applied)) == len(applied)
    for name in glue_modules():
        module = importlib.import_module(f'tola_plugin.basicsr_glue.{name}')
        assert (name in applied) == hasattr(module, 'apply') == (name not in NOT_APPLIED), name
        assert f'``{name}``' in basicsr_glue.__doc__ or f'``{name}.py``' in basicsr_glue.__doc__, \
            f'{name} is missing from the table of basicsr_glue/__init__.py'


def test_a_validation_is_numbered_with_the_last_iteration_trained(monkeypatch):
    """BasicSR validates once more after its training loop with the counter it stopped at: "Best: ... @ 6 iter" was
    logged after a 4-iteration run. A model built by the launchers numbers a validation at most with the last
    iteration it trained (as given when it trained none: a test run)."""

    class Model:

        def __init__(self):
            self.validated = []

        def optimize_parameters(self, current_iter):
            pass

        def validation(self, dataloader, current_iter, tb_logger, save_img):
            self.validated.append(current_iter)

    monkeypatch.setattr(basicsr.models, 'build_model', lambda opt: Model())
    model = launchers.build_model({})
    model.validation(None, 3, None, False)
    for current_iter in range(1, 5):
        model.optimize_parameters(current_iter)
    model.validation(None, 4, None, False)  # in the loop, at val_freq
    model.validation(None, 6, None, False)  # after it
    assert model.validated == [3, 4, 4]


def test_basicsr_points_at_the_glue():
    """After ``import tola_plugin`` every patched name of BasicSR is the glue's function (an ``apply()`` dropped from
    the package's list, or one that patches the wrong object, fails here)."""
    options = basicsr.utils.options
    assert options.init_dist is process_group.init_dist
    assert options.ordered_yaml is option_parsing.ordered_yaml
    assert options._postprocess_yml_value is option_files.force_yml_value  # one reading, the launchers' and tools'
    assert options.parse_options is launchers.parse_options
    for launcher in (basicsr.train, basicsr.test):
        assert launcher.parse_options is launchers.parse_options
    assert basicsr.train.load_resume_state is launchers.load_resume_state
    for launcher in (basicsr.train, basicsr.test):
        assert launcher.build_model is launchers.build_model  # the end of a start (failed_start.py)
    assert BaseModel.model_to_device is ddp_wrapping.model_to_device
    assert BaseModel.save_network is atomic_saves.save_network
    assert BaseModel.save_training_state is exact_resume.save_training_state
    assert BaseModel.resume_training is exact_resume.resume_training
    assert BaseModel.validation is exact_resume.validation
    assert BaseModel.load_network is network_loading.load_network
    assert EnlargedSampler.set_epoch is enlarged_sampler.sampler_set_epoch
    assert EnlargedSampler.__iter__ is enlarged_sampler.sampler_iter
    assert CPUPrefetcher.next.__doc__.startswith('CPUPrefetcher.next, counting')
    assert LmdbBackend.__init__ is lmdb_reader.lmdb_backend_init
    assert MessageLogger.reset_start_time is message_logger.message_logger_reset_start_time
    assert MessageLogger.__call__.__wrapped__ is message_logger.message_logger_call
    assert (Registry.get, Registry._do_register, Registry.__contains__, Registry.keys,
            Registry.__iter__) == (registry_lookup.get, registry_lookup.do_register, registry_lookup.contains,
                                   registry_lookup.keys, registry_lookup.iterate)
