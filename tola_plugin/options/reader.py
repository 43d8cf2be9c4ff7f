"""The one reader of option files (YAML): every launcher (ours, and BasicSR's own through ``basicsr_glue``, which
hands this loader to ``basicsr.utils.options``), tool and library function that reads an option file calls
``read_option_file`` (or ``yaml.load`` with ``OptionLoader``).

- **Plain data only.** yaml's SafeLoader: mappings, lists, strings, numbers, booleans, null. A tag that would build a
  Python object (``!!python/object/apply:os.system [...]``) is an error naming the file and line; nothing runs.
- **Bounded.** At most ``MAX_FILE_BYTES`` are read; anchors and aliases may not expand the document beyond
  ``MAX_VALUES`` values (a 1 KB "billion laughs" file declares 10^9) nor nest deeper than ``MAX_DEPTH``; a recursive
  alias is an error. Checked on yaml's node graph, before anything is built; then every alias becomes its own copy,
  so that BasicSR's in-place edits of one block (``datasets.val.phase``) never reach another.
- **Strict YAML.** A key given twice in one mapping is an error (yaml would keep the last one silently).
- **``--force_yml`` entries** (``apply_force_yml``, the launchers' and the tools'): ``KEY:SUBKEY=VALUE``, the value
  everything after the first '=', read by BasicSR's rules (``force_yml_value``); a malformed entry is an error naming
  it and the form. The entries are applied before any check (options/checks.py), so an override is checked as the
  file's own value is.

Every error is an ``OptionError`` (a ValueError) naming the file, the line and what was expected.
"""
import io
import os
import re
from typing import Dict, List

import yaml

from tola_plugin.utils.user_paths import NotARegularFile, check_regular_file

MAX_FILE_BYTES = 1 << 20  # option files are a few KB; BasicSR's largest are under 10 KB
MAX_VALUES = 100_000  # values after alias expansion (scalars, lists and mappings)
MAX_DEPTH = 64  # nesting of lists and mappings


class OptionError(ValueError):
    """A bad option file or option-file entry; the message starts with the file or the option's path
    (``datasets.train.chain_prob``)."""


def _where(mark) -> str:
    return f'line {mark.line + 1}' if mark is not None else 'somewhere'


class OptionLoader(yaml.SafeLoader):
    """yaml's SafeLoader with the bounds above. ``yaml.load(stream, Loader=OptionLoader)`` returns plain data or
    raises OptionError (the stream's ``name`` in its message)."""

    def __init__(self, stream):
        self.source = getattr(stream, 'name', '<string>')
        if hasattr(stream, 'read'):
            stream = stream.read(MAX_FILE_BYTES + 1)
        if len(stream) > MAX_FILE_BYTES:
            raise OptionError(f'{self.source}: more than {MAX_FILE_BYTES // 1024} KB; an option file is a few KB of '
                              f'YAML (is it the right file?)')
        super().__init__(stream)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen = {}
            for key_node, _ in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                if key is not None and key in seen:
                    raise OptionError(f'{self.source}: {_where(key_node.start_mark)}: key {key!r} given twice in one '
                                      f'mapping (first on {_where(seen[key])}); keep one')
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)

    def get_single_data(self):
        try:
            node = self.get_single_node()
            if node is None:
                return None
            check_expansion(node, self.source)
            return plain_copy(self.construct_document(node))
        except RecursionError:
            raise OptionError(f'{self.source}: nested deeper than Python can read; option files nest a few '
                              f'levels') from None
        except yaml.constructor.ConstructorError as err:
            tag = re.search(r"'tag:yaml.org,2002:([^']*)'|'(![^']*)'", err.problem or '')
            if tag is None:
                raise OptionError(f'{self.source}: {_where(err.problem_mark)}: {err.problem}') from None
            raise OptionError(f'{self.source}: {_where(err.problem_mark)}: the tag '
                              f'{"!!" + tag[1] if tag[1] else tag[2]} would build a Python object; option files hold '
                              f'plain data only (mappings, lists, text, numbers, true/false, null); nothing in the '
                              f'file was run') from None
        except yaml.MarkedYAMLError as err:
            what = ' '.join(part for part in (err.context, err.problem) if part)
            raise OptionError(f'{self.source}: {_where(err.problem_mark)}: not valid YAML: {what}') from None
        except yaml.YAMLError as err:
            raise OptionError(f'{self.source}: not valid YAML: {err}') from None


def check_expansion(root, source: str) -> None:
    """Refuse a node graph whose aliases expand to more than MAX_VALUES values, nest deeper than MAX_DEPTH, or refer
    to themselves. Each node is counted once (memoised), so the check costs the size of the file, not of the
    expansion."""
    sizes, open_nodes = {}, set()

    def size(node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH:
            raise OptionError(f'{source}: {_where(node.start_mark)}: nested more than {MAX_DEPTH} levels deep')
        if key in open_nodes:
            raise OptionError(f'{source}: {_where(node.start_mark)}: an alias refers to the block that holds it '
                              f'(a recursive structure)')
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        open_nodes.discard(key)
        if total > MAX_VALUES:
            raise OptionError(f'{source}: {_where(node.start_mark)}: anchors and aliases expand to more than '
                              f'{MAX_VALUES:,} values; an option file holds a few hundred')
        sizes[key] = total
        return total

    size(root, 0)


def plain_copy(value):
    """``value`` with every mapping and list copied (no sharing: each alias its own copy)."""
    if isinstance(value, dict):
        return {k: plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_copy(v) for v in value]
    return value


def read_option_file(path: str) -> Dict:
    """The options of the YAML file ``path`` (a dict), read as the module docstring says. A missing file is a
    FileNotFoundError, anything else wrong an OptionError, each naming the file; a path that is not a regular file (a
    folder, a FIFO, a device) says what it is before anything is opened (a FIFO would wait for a writer for ever)."""
    try:
        check_regular_file(path, 'option file', 'a YAML option file')
    except FileNotFoundError:
        raise FileNotFoundError(f'option file not found: {path}') from None
    except NotARegularFile as err:
        raise OptionError(str(err)) from None
    try:
        with open(path, encoding='utf-8') as f:
            opt = yaml.load(f, Loader=OptionLoader)
    except FileNotFoundError:
        raise FileNotFoundError(f'option file not found: {path}') from None
    except UnicodeDecodeError as err:
        raise OptionError(f'{path}: not UTF-8 text ({err.reason} at byte {err.start}); option files are UTF-8 '
                          f'YAML') from None
    except IsADirectoryError:
        raise OptionError(f'{path}: a folder, not an option file') from None
    if not isinstance(opt, dict):
        raise OptionError(f'{path}: expected a mapping of options (key: value lines), got '
                          f'{type(opt).__name__ if opt is not None else "an empty file"}')
    return opt


def read_option_value(text: str, source: str):
    """One YAML value given as text (e.g. on a command line), read as an option file's values are; ``source`` names
    it in errors."""
    stream = io.StringIO(f'value: {text}\n')
    stream.name = source
    return yaml.load(stream, Loader=OptionLoader)['value']


def force_yml_value(text: str):
    """A ``--force_yml KEY=VALUE`` value as BasicSR's launchers read it (``basicsr.utils.options``'s rules: ``~`` or
    ``none`` -> None, ``true``/``false``, ``!!float x``, digits -> int, a decimal -> float, else the text), except that
    a number may have a sign (upstream reads ``-5`` as the text '-5') and a list (``[...]``) is read as YAML
    (upstream ``eval``-s it)."""
    if text == '~' or text.lower() == 'none':
        return None
    if text.lower() in ('true', 'false'):
        return text.lower() == 'true'
    if text.startswith('!!float'):
        try:
            return float(text.replace('!!float', ''))
        except ValueError:
            raise OptionError(f'--force_yml value {text!r}: !!float takes a number, e.g. !!float 1e-4') from None
    digits = text[1:] if text.startswith(('+', '-')) else text
    if digits.isdecimal():
        return int(text)
    if digits.replace('.', '', 1).isdecimal() and digits.count('.') < 2:
        return float(text)
    if text.startswith('['):
        return read_option_value(text, f'--force_yml value {text!r}')
    return text


#: the form of a --force_yml entry, as its errors say it
FORCE_YML_FORM = 'KEY:SUBKEY=VALUE (the option\'s path, keys joined by ":", then "=" and its value), e.g. ' \
    'train:total_iter=1000'


def force_yml_entry(entry: str, where: str = '--force_yml'):
    """(keys, value) of one ``--force_yml`` entry ``a:b:c=value``: the keys before the first '=', the value after it
    (``force_yml_value``; it may hold '=': ``name=a=b`` sets name to 'a=b'). An entry without '=' or with an empty key
    is an OptionError naming it and the form."""
    keys, sep, value = entry.partition('=')
    path = [key.strip() for key in keys.split(':')]
    if not sep or not all(path):
        what = 'has no "="' if not sep else 'has an empty key'
        raise OptionError(f'{where} {entry!r}: {what}; expected {FORCE_YML_FORM}')
    return path, force_yml_value(value.strip())


def name_datasets_after_their_data(opt: Dict, entries) -> List[str]:
    """A dataset whose data the ``--force_yml`` ``entries`` replaced (``dataroot_gt`` or ``dataroot_lq``) but not its
    ``name`` is named after its new data, ``<folder or LMDB without extension>_<phase>`` (``lines_train``), not after
    the option file's (``CTR_TSR_train`` on the user's own lines, in the log and the visualization folders). ->
    notes saying each change (``datasets:<phase>:name=...`` chooses another)."""
    changed: Dict[str, Dict[str, str]] = {}
    for entry in entries or ():
        path, value = force_yml_entry(entry)
        if len(path) == 3 and path[0] == 'datasets' and path[2] in ('name', 'dataroot_gt', 'dataroot_lq'):
            changed.setdefault(path[1], {})[path[2]] = value
    notes = []
    for phase, keys in changed.items():
        root = keys.get('dataroot_gt', keys.get('dataroot_lq'))
        dataset = (opt.get('datasets') or {}).get(phase)
        if 'name' in keys or not isinstance(root, str) or not isinstance(dataset, dict):
            continue
        name = f'{os.path.splitext(os.path.basename(os.path.normpath(root)))[0]}_{phase}'
        if name != dataset.get('name'):
            notes.append(f'datasets.{phase}.name: {name} (after its data, {root}; the option file\'s was '
                         f'{dataset.get("name")}; --force_yml datasets:{phase}:name=... chooses another)')
            dataset['name'] = name
    return notes


def apply_force_yml(opt: Dict, entries, where: str = '--force_yml') -> Dict:
    """``opt`` with each ``a:b:c=value`` of ``entries`` set (``force_yml_entry``; the parents ``a:b`` must be blocks
    of ``opt``, the last key may be new), as every launcher and tool applies them, before any check of the options.
    A malformed entry or a missing parent is an OptionError naming the entry."""
    for entry in entries or ():
        path, value = force_yml_entry(entry, where)
        target = opt
        for depth, key in enumerate(path[:-1]):
            if not isinstance(target.get(key), dict):
                raise OptionError(f'{where} {entry!r}: the option file has no block {":".join(path[:depth + 1])}')
            target = target[key]
        target[path[-1]] = value
    return opt
