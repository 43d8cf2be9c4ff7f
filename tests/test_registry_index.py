"""A light plugin (docs/architecture.md, "A light plugin"): ``import basicsr`` with the plugin installed announces
TOLA's names in BasicSR's registries and imports none of their modules; BasicSR imports a module when it first looks
one of its names up (basicsr_glue/registry_lookup.py). The index of names -> modules (registry_index.py) is checked
against what the real modules register, so it cannot go stale."""
import glob
import importlib
import json
import os
import subprocess
import sys

import pytest

from basicsr.utils.registry import Registry

import tola_plugin
from tola_plugin.basicsr_glue import registry_lookup
from tola_plugin.registry_index import REGISTRY_INDEX

PKG = os.path.dirname(tola_plugin.__file__)
REGISTRY_FOLDERS = ('archs', 'data', 'losses', 'metrics', 'models')
#: what a process that only imports basicsr (e.g. to train ESRGAN) must not pay for
HEAVY = ('diffusers', 'peft', 'lpips', 'openvino', 'gradio', 'pyiqa', 'transformers')


def test_the_index_is_what_the_modules_register():
    """Every module of the registry folders imported: the objects of the package in BasicSR's registries are exactly
    the index's names, each registered by the module the index names."""
    for folder in REGISTRY_FOLDERS:
        for path in sorted(glob.glob(os.path.join(PKG, folder, '*.py'))):
            importlib.import_module(f'tola_plugin.{folder}.{os.path.basename(path)[:-3]}')
    assert sorted(REGISTRY_INDEX) == sorted(registry_lookup.REGISTRIES)
    for registry_name, registry in registry_lookup.REGISTRIES.items():
        registered = {
            name: obj.__module__
            for name, obj in registry._obj_map.items() if obj.__module__.startswith('tola_plugin.')
        }
        assert registered == REGISTRY_INDEX[registry_name], f'tola_plugin/registry_index.py: {registry_name!r}'


LIGHT_PROBE = r'''
import json, sys
import basicsr
from basicsr.utils.registry import ARCH_REGISTRY, DATASET_REGISTRY, LOSS_REGISTRY, METRIC_REGISTRY, MODEL_REGISTRY
from tola_plugin.registry_index import REGISTRY_INDEX
HEAVY = {heavy!r}
registries = dict(arch=ARCH_REGISTRY, dataset=DATASET_REGISTRY, loss=LOSS_REGISTRY, metric=METRIC_REGISTRY,
                  model=MODEL_REGISTRY)
owners = {{m for names in REGISTRY_INDEX.values() for m in names.values()}}
seen = {{'after_import': [m for m in HEAVY if m in sys.modules], 'owners_imported': sorted(owners & set(sys.modules)),
        'announced': all(n in registries[r] and n in registries[r].keys() for r, names in REGISTRY_INDEX.items()
                         for n in names)}}
# a user training only ESRGAN: BasicSR's own network and option check of a BasicSR model
from basicsr.archs import build_network
from tola_plugin.options.checks import OptionError, check_typed_block
build_network({{'type': 'RRDBNet', 'num_in_ch': 3, 'num_out_ch': 3, 'num_feat': 8, 'num_block': 1, 'num_grow_ch': 4}})
check_typed_block({{'type': 'RRDBNet', 'num_feat': 8}}, ARCH_REGISTRY, 'network_g')
seen['after_esrgan'] = [m for m in HEAVY if m in sys.modules]
# an option check of one of TOLA's classes reads its signature: its module is imported then
try:
    check_typed_block({{'type': 'LatentResidualCorrection', 'no_such_key': 1}}, ARCH_REGISTRY, 'network_g')
except OptionError as err:
    seen['check'] = str(err)
seen['lrc_imported'] = 'tola_plugin.archs.lrc_arch' in sys.modules
seen['tola_net'] = ARCH_REGISTRY.get('TOLANet').__module__
seen['after_tola'] = [m for m in HEAVY if m in sys.modules]
print(json.dumps(seen))
'''


def test_import_basicsr_with_the_plugin_imports_no_network(tmp_path):
    """A fresh process with the import hook (cwd: not the repository): ``import basicsr`` announces every name and
    imports none of the heavy libraries, nor any module the index names; BasicSR's own networks stay light; an
    option check or a build of TOLA's class imports its module."""
    proc = subprocess.run([sys.executable, '-c', LIGHT_PROBE.format(heavy=HEAVY)], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen['after_import'] == [] and seen['owners_imported'] == [] and seen['announced']
    assert seen['after_esrgan'] == []
    assert 'network_g.no_such_key: unknown option of LatentResidualCorrection' in seen['check']
    assert seen['lrc_imported'] and seen['tola_net'] == 'tola_plugin.archs.tola_arch'
    assert 'diffusers' in seen['after_tola'] and 'peft' in seen['after_tola']  # what the lazy import saved


@pytest.fixture
def probe_registry(tmp_path, monkeypatch):
    """A registry of its own and a module ``tola_probe_owner`` (in tmp_path) that registers ``ProbeNet`` in it."""
    registry = Registry('probe')
    monkeypatch.setattr(registry_lookup, 'ANNOUNCED', {})
    monkeypatch.setitem(sys.modules, 'tola_probe_registry', type(sys)('tola_probe_registry'))
    sys.modules['tola_probe_registry'].REGISTRY = registry
    (tmp_path / 'tola_probe_owner.py').write_text('from tola_probe_registry import REGISTRY\n\n\n'
                                                  '@REGISTRY.register()\nclass ProbeNet:\n    pass\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    yield registry
    sys.modules.pop('tola_probe_owner', None)


def test_announced_name_is_known_and_its_module_imported_at_first_get(probe_registry):
    registry_lookup.announce(probe_registry, {'ProbeNet': 'tola_probe_owner'})
    assert 'ProbeNet' in probe_registry and list(probe_registry.keys()) == ['ProbeNet']
    assert 'tola_probe_owner' not in sys.modules and 'Other' not in probe_registry
    cls = probe_registry.get('ProbeNet')
    assert cls.__module__ == 'tola_probe_owner' and probe_registry.get('ProbeNet') is cls
    assert list(probe_registry.keys()) == ['ProbeNet']  # announced once imported: one name, not two
    with pytest.raises(KeyError, match="No object named 'Other'"):
        probe_registry.get('Other')  # names nobody announced: upstream's error


def test_iteration_imports_the_announced_modules(probe_registry):
    registry_lookup.announce(probe_registry, {'ProbeNet': 'tola_probe_owner'})
    assert [name for name, _ in probe_registry] == ['ProbeNet'] and 'tola_probe_owner' in sys.modules


def test_a_stale_index_and_a_taken_name_are_errors(probe_registry):
    registry_lookup.announce(probe_registry, {'Renamed': 'tola_probe_owner'})
    with pytest.raises(
            KeyError, match="'Renamed' was announced .* by tola_probe_owner, but importing that module "
            'did not register it .*registry_index.py is out of date'):
        probe_registry.get('Renamed')
    with pytest.raises(
            ValueError, match="'ProbeNet' was already registered in 'probe' registry .*by "
            'tola_probe_owner.*elsewhere registers one of the same name'):
        registry_lookup.announce(probe_registry, {'ProbeNet': 'elsewhere'})
    with pytest.raises(
            AssertionError, match="'Renamed' was already registered in 'probe' registry "
            r'\(announced by tola_probe_owner\)'):
        probe_registry.register(type('Renamed', (), {}))  # another object under an announced name: upstream's rule
    with pytest.raises(ValueError, match="no BasicSR registry named 'probe'"):
        registry_lookup.announce_index({'probe': {'ProbeNet': 'tola_probe_owner'}})
