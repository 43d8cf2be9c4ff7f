"""The BasicSR glue's registry lookup: names announced at import, their modules imported at first use.

BasicSR's ``Registry`` knows an object once the module defining it has run its ``@X_REGISTRY.register()``, so a
plugin that wants its names known must import every module at start: for TOLA that is diffusers, peft, lpips, ...
in every process that imports basicsr (seconds, also for a user training only ESRGAN). Here a name can be announced
with the module that registers it (``announce``); ``Registry.get`` imports that module the first time the name is
looked up (when BasicSR builds the network, dataset, loss, metric or model, or an option check reads a class's
signature), and ``in``, ``keys()`` and iteration see announced names as registered; registering another object
under an announced name fails as it would once the module is imported (BasicSR's rule: one object per name). Names
BasicSR registered itself, and announced names once imported, are looked up exactly as upstream does.
"""
import importlib
from typing import Dict, Mapping

from basicsr.utils.registry import (ARCH_REGISTRY, DATASET_REGISTRY, LOSS_REGISTRY, METRIC_REGISTRY, MODEL_REGISTRY,
                                    Registry)

#: BasicSR's registries by name
REGISTRIES = {r._name: r for r in (ARCH_REGISTRY, DATASET_REGISTRY, LOSS_REGISTRY, METRIC_REGISTRY, MODEL_REGISTRY)}

#: registry name ('arch', 'dataset', 'loss', 'metric', 'model') -> {announced name: module that registers it}
ANNOUNCED: Dict[str, Dict[str, str]] = {}

_original_get = Registry.get
_original_do_register = Registry._do_register
_original_contains = Registry.__contains__
_original_iter = Registry.__iter__


def announce(registry: Registry, names: Mapping[str, str]) -> None:
    """Make each name of ``names`` (name -> module path) known to ``registry`` now, its module imported when the name
    is first looked up. A name the registry already holds from another module is an error (BasicSR's own rule:
    one object per name)."""
    announced = ANNOUNCED.setdefault(registry._name, {})
    for name, module in names.items():
        owner = registry._obj_map.get(name)
        if owner is not None and getattr(owner, '__module__', None) != module:
            raise ValueError(f"An object named '{name}' was already registered in '{registry._name}' registry "
                             f'(by {owner.__module__}); {module} registers one of the same name')
        announced[name] = module


def announce_index(index: Mapping[str, Mapping[str, str]]) -> None:
    """``announce`` each block of ``index`` (registry name -> {name: module}) in BasicSR's registry of that name."""
    for registry_name, names in index.items():
        if registry_name not in REGISTRIES:
            raise ValueError(f'no BasicSR registry named {registry_name!r}; expected one of {sorted(REGISTRIES)}')
        announce(REGISTRIES[registry_name], names)


def import_owner(registry: Registry, name: str) -> None:
    """Import the module announced for ``name`` if the registry does not hold it yet (nothing for other names)."""
    module = ANNOUNCED.get(registry._name, {}).get(name)
    if module is None or name in registry._obj_map:
        return
    importlib.import_module(module)
    if name not in registry._obj_map:
        raise KeyError(f"'{name}' was announced in the '{registry._name}' registry as registered by {module}, but "
                       'importing that module did not register it (tola_plugin/registry_index.py is out of date)')


def get(self, name, suffix='basicsr'):
    """Upstream's ``Registry.get``, after importing the module of an announced name at its first lookup."""
    import_owner(self, name)
    return _original_get(self, name, suffix)


def do_register(self, name, obj, suffix=None):
    """Upstream's registration; an announced name is refused to an object of another module, as upstream refuses a
    name registered twice."""
    full = f'{name}_{suffix}' if isinstance(suffix, str) else name
    module = ANNOUNCED.get(self._name, {}).get(full)
    if module is not None and getattr(obj, '__module__', None) != module:
        raise AssertionError(f"An object named '{full}' was already registered in '{self._name}' registry (announced "
                             f'by {module})!')
    _original_do_register(self, name, obj, suffix)


def contains(self, name):
    """Registered, or announced (its module not imported yet)."""
    return _original_contains(self, name) or name in ANNOUNCED.get(self._name, {})


def keys(self):
    """The registered names and the announced ones not imported yet."""
    return list(self._obj_map) + [n for n in ANNOUNCED.get(self._name, {}) if n not in self._obj_map]


def iterate(self):
    """(name, object) of every registered name, announced ones included: their modules are imported first."""
    for name in list(ANNOUNCED.get(self._name, {})):
        import_owner(self, name)
    return _original_iter(self)


def apply():
    Registry.get = get
    Registry._do_register = do_register
    Registry.__contains__ = contains
    Registry.keys = keys
    Registry.__iter__ = iterate
