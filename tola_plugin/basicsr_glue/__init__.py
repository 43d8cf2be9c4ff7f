"""The BasicSR glue: every change this plugin makes to BasicSR 1.4.2 and its environment, one module per patch,
applied in the order below when the package is imported (``tola_plugin/__init__`` imports it before anything else,
so no other module of the package needs to care).

=====================  ==============================================================================================
module                 what changes in BasicSR
=====================  ==============================================================================================
(here)                 the torchvision shim, run before any ``import basicsr`` (``tola_plugin_shim``; the import
                       hook applies it before basicsr's own imports, here it covers a process without the hook):
                       basicsr 1.4.2 imports ``torchvision.transforms.functional_tensor``, removed in 0.17
``process_group``      ``init_dist``: the process group starts once the options are known (backend by device, one
                       GPU per process, timeout, device binding; torchrun and srun)
``ddp_wrapping``       ``BaseModel.model_to_device``: DDP on the CPU, no broadcast of frozen buffers; DataParallel
                       refused for frozen backbones
``enlarged_sampler``   ``EnlargedSampler`` forwards the epoch and each visit's index to datasets that ask for them
``option_parsing``     the launchers' options (``read_options``): the start-up checks and what the command line may
                       change; BasicSR's YAML loader and ``--force_yml`` values made safe
``atomic_saves``       ``BaseModel.save_network``: atomic writes; a save that keeps failing is an error
``resume_state``       ``load_resume_state``: weights-only, the newest complete state (installed by ``launchers``)
``exact_resume``       training states with the loop position and every RNG stream; validation leaves the streams
``network_loading``    ``BaseModel.load_network`` weights-only
``message_logger``     ``MessageLogger``'s ETA, never negative
``launchers``          ``basicsr.train`` / ``basicsr.test`` and their scripts get ``parse_options`` (reading with
                       ``option_parsing``), ``load_resume_state`` and ``build_model`` (the end of a start: before it,
                       an error removes the run's new folders); ``run_pipeline`` runs their pipelines for ours
``lmdb_reader``        ``LmdbBackend`` checks each LMDB before mapping it
``registry_lookup``    ``Registry.get`` imports the module of an announced name at its first lookup (``announce``:
                       ``tola_plugin/__init__`` announces TOLA's names, ``registry_index.py``), so that importing
                       basicsr with the plugin imports none of TOLA's networks
=====================  ==============================================================================================

Helpers of these patches only: ``distributed.py`` (the launch decisions of GPU/DDP runs, as functions of their
inputs), ``training_resume.py`` (the exact-resume bookkeeping, the choice of the state to resume from) and
``failed_start.py`` (the folders a start that fails made, removed by the launchers) and ``resource_bounds.py`` (what a
run's options ask of the machine, checked by ``option_parsing`` before anything is made).
"""
from tola_plugin_shim import install_torchvision_shim

install_torchvision_shim()

# isort: split
# The patch modules import basicsr, so they come after the shim (setup.cfg lets flake8 accept E402 here).
from tola_plugin.basicsr_glue import (atomic_saves, ddp_wrapping, enlarged_sampler, exact_resume, launchers,
                                      lmdb_reader, message_logger, network_loading, option_parsing, process_group,
                                      registry_lookup)

#: the patch modules in the order their ``apply()`` runs (once, at this package's import)
PATCHES = (process_group, ddp_wrapping, enlarged_sampler, option_parsing, atomic_saves, exact_resume, network_loading,
           message_logger, launchers, lmdb_reader, registry_lookup)

for _patch in PATCHES:
    _patch.apply()
