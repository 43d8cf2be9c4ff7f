"""Option files (issue 33 items 1, 5, 9, 10, 13; issue 31 "strict for every model"): one safe, bounded reader for
every launcher, the keys every run needs, and a strict check of every block for every model.

Our launchers run in this process (``reliability_testing.launch``: milliseconds, every check happens while the file
is read); BasicSR's own launcher once as a real process, once in this process.
"""
import ast
import glob
import os
import subprocess
import sys
import tracemalloc

import pytest
import yaml
from reliability_testing import expect_error

import basicsr
from basicsr.models.sr_model import SRModel
from basicsr.utils.registry import MODEL_REGISTRY

import tola_plugin  # noqa: F401
from tola_plugin.options import reader as option_reader
from tola_plugin.options import schema as option_schema
from tola_plugin.options.checks import check_options, check_required
from tola_plugin.options.reader import MAX_VALUES, OptionError, read_option_file
from launcher_testing import run_basicsr_in_process
from tola_testing import REPO, load_yaml, tiny_demo_options

PYTHON_TAG = 'x: !!python/object/apply:os.system ["touch {mark}"]\n'


def demo_options(rendered):
    return tiny_demo_options(rendered, 'strict', total_iter=2, freq=2)


def rrdb_options():
    """BasicSR's SRModel with RRDBNet (the demo baseline's file); every check here fails before any data is read."""
    return dict(load_yaml(os.path.join(REPO, 'options', 'demo', 'train_RRDB_demo.yml')), num_gpu=0)


def billion_laughs(levels: int = 9) -> str:
    """A ~1 KB YAML file whose aliases expand to 9**levels values."""
    text = 'name: lol\nl0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels + 1):
        text += f'l{i}: &l{i} [' + ', '.join([f'*l{i - 1}'] * 9) + ']\n'
    return text


# ------------------------------------------------------------------------------------------- item 1: no code runs
@pytest.mark.parametrize('module', ['train', 'test'])
def test_a_python_tag_runs_nothing_in_our_launchers(rendered_sets, tmp_path, monkeypatch, capsys, module):
    mark = tmp_path / 'PWNED'
    text = PYTHON_TAG.format(mark=mark) + yaml.safe_dump(demo_options(rendered_sets), sort_keys=False)
    expect_error(tmp_path, monkeypatch, capsys, text, 'options.yml: line 1', '!!python/object/apply:os.system',
                 'nothing in the file was run', module=module)
    assert not mark.exists()


def test_a_python_tag_runs_nothing_in_basicsrs_own_launcher(tmp_path):
    """``python -m basicsr.train`` (the import hook registers the plugin, which gives BasicSR the safe loader): one
    ``error:`` line, exit status 2, and the command in the file never ran."""
    mark = tmp_path / 'PWNED'
    path = tmp_path / 'evil.yml'
    path.write_text(PYTHON_TAG.format(mark=mark) + yaml.safe_dump(rrdb_options(), sort_keys=False), encoding='utf-8')
    proc = subprocess.run(
        [sys.executable, '-m', 'basicsr.train', '-opt', str(path)], cwd=tmp_path, capture_output=True, text=True,
        timeout=300)
    errors = [line for line in proc.stderr.splitlines() if line.startswith('error: ')]
    assert proc.returncode == 2 and len(errors) == 1 and 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    assert 'evil.yml: line 1: the tag !!python/object/apply:os.system' in errors[0]
    assert not mark.exists()


def test_a_python_tag_runs_nothing_in_tola_infer_and_the_tools(tmp_path, monkeypatch):
    from tola_cli import infer

    mark = tmp_path / 'PWNED'
    path = tmp_path / 'evil.yml'
    path.write_text(PYTHON_TAG.format(mark=mark) + 'network_g: {type: TOLANet}\n', encoding='utf-8')
    image = tmp_path / 'line.png'
    image.write_bytes(
        open(os.path.join(REPO, 'tola_plugin', 'assets', 'rendered_samples', 'line_1x4.png'), 'rb').read())
    with pytest.raises(OptionError, match='evil.yml: line 1: the tag !!python/object/apply'):
        infer.main(['-i', str(image), '-o', str(tmp_path / 'out'), '-opt', str(path), '--device', 'cpu'])
    from tola_plugin.commands.weight_files import export_merged
    with pytest.raises(OptionError, match='evil.yml: line 1'):
        export_merged(str(path), str(tmp_path / 'merged.safetensors'))
    assert not mark.exists()


def test_the_package_reads_yaml_in_one_place_only():
    """No module but options/reader.py calls a YAML loader: every option file goes through the one reader."""
    offenders = []
    for path in glob.glob(os.path.join(REPO, 'tola_plugin', '**', '*.py'), recursive=True):
        if path.endswith(os.path.join('options', 'reader.py')):
            continue
        for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == 'yaml'
                    and 'load' in node.attr):
                offenders.append(f'{os.path.relpath(path, REPO)}:{node.lineno} yaml.{node.attr}')
    assert not offenders, offenders


# --------------------------------------------------------------------------------------- item 5: bounded reading
def test_a_billion_laughs_file_is_refused_before_anything_is_built(rendered_sets, tmp_path, monkeypatch, capsys):
    """Refused on yaml's node graph, before a value is built (checked by what ran, not by how long it took)."""
    text = billion_laughs()
    assert len(text) < 1200

    def build(self, node):
        raise AssertionError('values built before the expansion was bounded')

    with monkeypatch.context() as patch:
        patch.setattr(option_reader.OptionLoader, 'construct_document', build)
        with pytest.raises(OptionError, match=f'expand to more than {MAX_VALUES:,} values'):
            (tmp_path / 'lol.yml').write_text(text, encoding='utf-8')
            read_option_file(str(tmp_path / 'lol.yml'))
    opt_text = yaml.safe_dump(demo_options(rendered_sets), sort_keys=False) + text.replace('name: lol\n', '')
    expect_error(tmp_path, monkeypatch, capsys, opt_text, 'options.yml: line', 'anchors and aliases expand')


@pytest.mark.parametrize('text,needle', [
    ('a: &a [*a]\n', 'refers to the block that holds it'),
    ('a: ' + '[' * 80 + ']' * 80 + '\n', 'nested more than 64 levels'),
    ('a: ' + '[' * 5000 + ']' * 5000 + '\n', 'nested deeper than Python can read'),
    ('name: a\nname: b\n', "key 'name' given twice"),
    ('name: [1\n', 'not valid YAML'),
    ('- 1\n', 'expected a mapping of options'),
])
def test_bad_structures_are_one_error_naming_the_file(tmp_path, text, needle):
    path = tmp_path / 'bad.yml'
    path.write_text(text, encoding='utf-8')
    with pytest.raises(OptionError, match='bad.yml') as err:
        read_option_file(str(path))
    assert needle in str(err.value)


def test_an_oversized_file_is_refused_before_parsing(tmp_path):
    path = tmp_path / 'big.yml'
    path.write_text('# ' + 'x' * (2 << 20) + '\n', encoding='utf-8')
    with pytest.raises(OptionError, match='big.yml: more than 1024 KB'):
        read_option_file(str(path))


def test_aliases_become_copies():
    """BasicSR edits blocks in place (``datasets.<phase>.phase``): an aliased dataset must not change its origin."""
    from tola_plugin.options.reader import read_option_value
    value = read_option_value('{train: &d {type: X}, val: *d}', 'test')
    value['val']['phase'] = 'val'
    assert value['train'] == {'type': 'X'}


# ------------------------------------------------------------------------------------ item 9: YAML syntax errors
def test_tola_infer_opt_with_a_syntax_error_is_one_line(tmp_path, monkeypatch, capsys):
    from tola_cli import infer
    path = tmp_path / 'broken.yml'
    path.write_text('network_g:\n  type: TOLANet\n  lora_rank: [4\n', encoding='utf-8')
    image = tmp_path / 'line.png'
    image.write_bytes(
        open(os.path.join(REPO, 'tola_plugin', 'assets', 'rendered_samples', 'line_1x4.png'), 'rb').read())
    monkeypatch.setattr(sys, 'argv', ['tola-infer'])
    with pytest.raises(SystemExit) as exit_info:
        infer.cli(['-i', str(image), '-o', str(tmp_path / 'out'), '-opt', str(path), '--device', 'cpu'])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_info.value.code == 2 and len(err) == 1, err
    assert err[0].startswith('error: ') and 'broken.yml: line 4: not valid YAML' in err[0], err


# ---------------------------------------------------------------------------------- item 10: keys a run needs
@pytest.mark.parametrize('path,needle', [
    (('name', ), "name: missing; an option file needs name: the experiment's name"),
    (('datasets', ), 'datasets: missing; an option file needs datasets: a mapping of phases'),
    (('path', ), 'path: missing'),
    (('train', 'optim_g'), "train.optim_g: missing; a training option file needs the generator's optimizer"),
    (('logger', 'print_freq'), 'logger.print_freq: missing'),
])
def test_a_missing_key_says_what_it_holds(rendered_sets, tmp_path, monkeypatch, capsys, path, needle):
    opt = demo_options(rendered_sets)
    target = opt
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    expect_error(tmp_path, monkeypatch, capsys, opt, 'options.yml: ' + needle)


def test_a_test_file_says_whether_to_write_images(tmp_path, monkeypatch, capsys):
    opt = load_yaml(os.path.join(REPO, 'options', 'demo', 'test_TOLA_demo.yml'))
    del opt['val']['save_img']
    expect_error(tmp_path, monkeypatch, capsys, opt, 'options.yml: val.save_img: missing; a test option file says',
                 module='test')


def test_a_misspelled_required_block_is_named(rendered_sets, tmp_path, monkeypatch, capsys):
    opt = demo_options(rendered_sets)
    opt['trian'] = opt.pop('train')
    expect_error(tmp_path, monkeypatch, capsys, opt, 'train: missing', "the file has 'trian'")


@pytest.mark.parametrize('value,needle', [
    ('abc', "train.optim_g.lr: expected a number, got 'abc'"),
    ('1e-4', 'YAML reads 1e-4 as text (no decimal point): write !!float 1e-4'),
    (-1.0, 'train.optim_g: AdamW refuses these settings: Invalid learning rate: -1.0'),
])
def test_optimizer_values_are_checked_at_start(rendered_sets, tmp_path, monkeypatch, capsys, value, needle):
    opt = demo_options(rendered_sets)
    opt['train']['optim_g']['lr'] = value
    expect_error(tmp_path, monkeypatch, capsys, opt, 'options.yml: ', needle)


def test_optimizer_keys_and_types_are_checked(rendered_sets, tmp_path, monkeypatch, capsys):
    opt = demo_options(rendered_sets)
    opt['train']['optim_g']['weight_decy'] = 0.01
    expect_error(tmp_path, monkeypatch, capsys, opt, "train.optim_g.weight_decy", "did you mean 'weight_decay'")
    opt = rrdb_options()
    opt['train']['optim_g']['type'] = 'AdamW'  # BasicSR's SRModel builds Adam only
    expect_error(tmp_path, monkeypatch, capsys, opt, 'train.optim_g.type: SRModel does not build AdamW')


# --------------------------------------------------------------------------- item 13 and issue 31: strict blocks
@pytest.mark.parametrize('block,key,suggestion', [
    ((), 'manaul_seed', 'manual_seed'),
    (('logger', ), 'print_frq', 'print_freq'),
    (('path', ), 'pretrain_network', 'pretrain_network_g'),
    (('val', ), 'val_frq', 'val_freq'),
    (('val', 'metrics', 'psnr'), 'crop_boder', 'crop_border'),
])
def test_typos_in_every_block_are_errors(rendered_sets, tmp_path, monkeypatch, capsys, block, key, suggestion):
    opt = demo_options(rendered_sets)
    target = opt
    for part in block:
        target = target[part]
    target[key] = 'experiments/x.pth' if block == ('path', ) else 1
    where = '.'.join(block + (key, ))
    expect_error(tmp_path, monkeypatch, capsys, opt, f'options.yml: {where}: unknown option',
                 f"did you mean '{suggestion}'")


@pytest.mark.parametrize(
    'block,key,needle',
    [
        (('train', ), 'percepual_opt',
         "train.percepual_opt: unknown option of SRModel (did you mean 'perceptual_opt'?)"),
        ((), 'ocr_opt', 'ocr_opt: unknown option of SRModel'),
        ((), 'pixel_opt', 'pixel_opt: unknown option of SRModel; pixel_opt belongs under train:'),
        (('val', ), 'noise_seed', 'val.noise_seed: unknown option of SRModel'),  # TOLAModel's, not SRModel's
    ])
def test_basicsr_models_are_strict_with_our_launcher(tmp_path, monkeypatch, capsys, block, key, needle):
    opt = rrdb_options()
    target = opt
    for part in block:
        target = target[part]
    target[key] = {'type': 'L1Loss'} if key.endswith('_opt') else 1
    expect_error(tmp_path, monkeypatch, capsys, opt, needle)


def test_basicsr_models_are_strict_with_basicsrs_own_launcher(tmp_path, monkeypatch):
    opt = rrdb_options()
    opt['train']['percepual_opt'] = {'type': 'L1Loss'}
    path = tmp_path / 'typo.yml'
    path.write_text(yaml.safe_dump(opt, sort_keys=False), encoding='utf-8')
    monkeypatch.setattr(sys, 'excepthook', sys.excepthook)  # BasicSR's script installs the one-line hook
    with pytest.raises(OptionError, match="typo.yml: train.percepual_opt: unknown option of SRModel"):
        run_basicsr_in_process('basicsr.train', ['-opt', str(path)], tmp_path, monkeypatch)


@pytest.mark.parametrize('model', ['SRModel', 'ESRGANModel', 'SwinIRModel'])
def test_each_basicsr_model_names_its_closest_key(model):
    opt = dict(rrdb_options(), model_type=model, is_train=True)
    opt['train'] = dict(opt['train'], ema_decy=0.999)
    with pytest.raises(OptionError, match="train.ema_decy: unknown option of .*did you mean 'ema_decay'"):
        check_options(opt)


@pytest.mark.parametrize('model', ['SRModel', 'ESRGANModel', 'SwinIRModel'])
def test_ocr_opt_under_a_stock_model_names_its_text_aware_version(model):
    """train.ocr_opt under a stock BasicSR model: the error names the model that is it plus TOLA's OCR loss, and the
    other models that take the key."""
    opt = dict(rrdb_options(), model_type=model, is_train=True)
    opt['train'] = dict(opt['train'], ocr_opt={'type': 'OCRCELoss', 'loss_weight': 0.02})
    with pytest.raises(OptionError) as err:
        check_options(opt)
    message = str(err.value)
    assert f'train.ocr_opt: unknown option of {model}' in message
    assert f'Text{model} is {model} with ocr_opt: set model_type: Text{model}' in message
    others = message.split('also taking it: ')[1]
    assert all(name in others
               for name in {'TOLAModel', 'TextSRModel', 'TextSwinIRModel', 'TextESRGANModel'} - {f'Text{model}'})


def test_the_ocr_loss_route_says_every_change_in_the_first_error(tmp_path, monkeypatch):
    """Adding train.ocr_opt to a stock file took three failed starts (the text-aware model, then no gt_size, then the
    recognizer's file), each after the imports; a dataset without labels failed a fourth time at the first step. The
    first error now names every change; with them made the options pass."""
    monkeypatch.chdir(tmp_path)  # no checkpoints/transocr.pth here
    opt = dict(rrdb_options(), is_train=True)
    opt['train'] = dict(opt['train'], ocr_opt={'type': 'OCRCELoss', 'loss_weight': 0.02})
    with pytest.raises(OptionError) as err:
        check_options(opt)
    message = str(err.value)
    assert 'set model_type: TextSRModel; with it this run also needs no datasets.train.gt_size' in message
    assert ("a datasets.train.type that gives the labels the loss reads ('ocr_target': TextDegradationDataset or "
            'PairedTextDataset; PairedImageDataset gives none)') in message
    assert 'train.ocr_recognizer, the frozen TransOCR: checkpoints/transocr.pth is not a file' in message
    assert 'train:ocr_recognizer=demo' in message
    opt['model_type'] = 'TextSRModel'  # the first change only: the rest, again in one error
    with pytest.raises(
            OptionError, match=r'model_type: TextSRModel \(as set\) needs no datasets.train.gt_size .*; a '
            r'datasets.train.type .*; train.ocr_recognizer'):
        check_options(opt)
    kept = ('name', 'dataroot_gt', 'dataroot_lq', 'io_backend', 'batch_size_per_gpu', 'num_worker_per_gpu')
    train_set = {key: value for key, value in opt['datasets']['train'].items() if key in kept}  # no gt_size
    train_set.update(type='PairedTextDataset', labels='labels.tsv')
    opt['datasets'] = dict(opt['datasets'], train=train_set)
    opt['train']['ocr_recognizer'] = 'demo'
    check_options(opt)


# A registered model declares what it reads beyond its base classes (options/schema.py).
@MODEL_REGISTRY.register()
class SchemaProbeTextSRModel(SRModel):
    train_option_keys = {'ocr_opt'}
    top_option_keys = {'recognizer'}


@MODEL_REGISTRY.register()
class SchemaProbeUndeclaredModel(SRModel):
    pass


def test_a_registered_model_declares_its_extra_keys():
    opt = dict(rrdb_options(), model_type='SchemaProbeTextSRModel', is_train=True, recognizer='TransOCR')
    opt['train'] = dict(opt['train'], ocr_opt={'type': 'L1Loss'})
    check_options(opt)  # its own keys and SRModel's
    opt['train']['ocr_otp'] = opt['train'].pop('ocr_opt')
    with pytest.raises(OptionError, match="train.ocr_otp: .*SchemaProbeTextSRModel.*did you mean 'ocr_opt'"):
        check_options(opt)
    undeclared = dict(opt, model_type='SchemaProbeUndeclaredModel')
    with pytest.raises(
            OptionError, match='SchemaProbeUndeclaredModel declares no option keys: a model that reads '
            'more declares them as class attributes'):
        check_options(undeclared)


def _keys_read(tree: ast.AST):
    """(class name or None, block, key) of every ``opt[...]`` / ``opt.get(...)`` read in a BasicSR source file:
    ``self.opt`` / ``opt`` (top), ``...['train']`` / ``train_opt`` (train), ``...['val']`` (val), ``...['path']``,
    ``...['logger']``."""

    def block_of(node):
        if (isinstance(node, ast.Attribute) and node.attr == 'opt' and isinstance(node.value, ast.Name)
                and node.value.id == 'self') or (isinstance(node, ast.Name) and node.id == 'opt'):
            return 'top'
        if isinstance(node, ast.Name) and node.id == 'train_opt':
            return 'train'
        if isinstance(node, ast.Subscript) and block_of(node.value) == 'top' and isinstance(node.slice, ast.Constant):
            return node.slice.value if node.slice.value in ('train', 'val', 'path', 'logger') else None
        return None

    found = []
    for cls in [n for n in tree.body if isinstance(n, ast.ClassDef)] or [tree]:
        for node in ast.walk(cls):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                base, key = node.value, node.slice.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == 'get'
                  and node.args and isinstance(node.args[0], ast.Constant)):
                base, key = node.func.value, node.args[0].value
            else:
                continue
            block = block_of(base)
            if block and isinstance(key, str):
                found.append((getattr(cls, 'name', None), block, key))
    return found


def test_the_schema_covers_every_key_basicsr_reads():
    """Reads BasicSR's model and pipeline sources: every key they read is known to the strict check (so a key
    BasicSR uses is never refused), for every registered BasicSR model."""
    root = os.path.dirname(basicsr.__file__)
    models = {MODEL_REGISTRY.get(n).__name__: MODEL_REGISTRY.get(n) for n in MODEL_REGISTRY.keys()}
    any_network = {'network_g': {}, 'network_d': {}}
    missing = []
    for path in glob.glob(os.path.join(root, 'models', '*_model.py')):
        for cls_name, block, key in _keys_read(ast.parse(open(path, encoding='utf-8').read())):
            cls = models.get(cls_name)
            if cls is None:
                continue
            known = {
                'top': option_schema.model_keys(cls, 'top') | option_schema.COMPUTED_TOP_KEYS | set(any_network),
                'train': option_schema.model_keys(cls, 'train'), 'val': option_schema.model_keys(cls, 'val'),
                'path': option_schema.path_keys(any_network), 'logger': option_schema.LOGGER_KEYS
            }[block]
            if key not in known:
                missing.append(f'{os.path.basename(path)} {cls_name}: {block}.{key}')
    for name in ('train.py', 'test.py', os.path.join('utils', 'options.py'), os.path.join('utils', 'misc.py'),
                 os.path.join('utils', 'logger.py')):
        for _, block, key in _keys_read(ast.parse(open(os.path.join(root, name), encoding='utf-8').read())):
            known = {
                'top': option_schema.PIPELINE_KEYS['top'] | option_schema.COMPUTED_TOP_KEYS,
                'train': option_schema.PIPELINE_KEYS['train'], 'val': option_schema.PIPELINE_KEYS['val'],
                'path': option_schema.path_keys(any_network), 'logger': option_schema.LOGGER_KEYS
            }[block]
            if key not in known and not key.startswith('network_'):
                missing.append(f'{name}: {block}.{key}')
    assert not missing, missing


@pytest.mark.parametrize('path', sorted(glob.glob(os.path.join(REPO, 'options', '*', '*.yml'))))
def test_every_shipped_option_file_passes_the_strict_check(path):
    opt = read_option_file(path)
    if 'model_type' not in opt:  # tools/train_demo_backbone.py's own format, held to that tool's strict check
        from tola_lab.demo.training import read_options
        assert os.path.basename(path).startswith('train_demo_backbone') and read_options(path)['vae']
        return
    is_train = os.path.basename(path).startswith('train')
    check_required(opt, is_train)
    check_options(dict(opt, num_gpu=0, is_train=is_train, dist=False, rank=0, world_size=1))


# ----------------------------------------------------------------------------- one error style, --debug for more
def test_tracebacks_only_under_debug(tmp_path, monkeypatch, capsys):
    """A tool's bad input is one line; with --debug (which every command takes) the exception itself."""
    from tola_plugin.utils.cli_errors import run_tool
    sys.path.insert(0, os.path.join(REPO, 'tools'))
    try:
        import make_lmdb
    finally:
        sys.path.pop(0)
    command = ['make_lmdb.py', '--images', str(tmp_path / 'absent'), '--labels', 'x.tsv', '--out', str(tmp_path / 'o')]
    monkeypatch.setattr(sys, 'argv', command)
    with pytest.raises(SystemExit) as exit_info:
        run_tool(make_lmdb.main)
    assert exit_info.value.code == 2 and capsys.readouterr().err == f'error: --images {tmp_path / "absent"} is not ' \
        'a folder\n'
    monkeypatch.setattr(sys, 'argv', command + ['--debug'])
    with pytest.raises(ValueError, match='is not a folder'):  # the traceback's exception, not SystemExit
        run_tool(make_lmdb.main)


def test_labels_files_are_utf8_with_an_optional_bom(tmp_path):
    from tola_plugin.data.text_labels import read_labels_tsv
    path = tmp_path / 'labels.tsv'
    path.write_bytes('\ufeffa.png\t文字\n'.encode('utf-8'))
    assert read_labels_tsv(str(path)) == [('a.png', '文字')]
    path.write_bytes('a.png\tcafé\n'.encode('latin-1'))
    with pytest.raises(ValueError, match=r'labels.tsv:1: not UTF-8 text'):
        read_labels_tsv(str(path))


def test_text_inputs_are_bounded_before_they_are_read(tmp_path):
    """Labels, CSV and JSON inputs over 256 MB are refused from their size (sparse files: nothing is written)."""
    from tola_plugin.commands.evaluation.plots import read_benchmark_json
    from tola_plugin.data.text_labels import read_labels_tsv
    from tola_plugin.inference.prior_csv import read_prior_csv
    for name, read, what in (('labels.tsv', read_labels_tsv, 'labels file'), ('prior.csv', read_prior_csv, 'CSV file'),
                             ('bench.json', lambda p: read_benchmark_json(p, 'TOLA'), 'benchmark_inference.py JSON')):
        path = tmp_path / name
        with open(path, 'wb') as f:
            f.truncate(300 << 20)
        tracemalloc.start()
        try:
            with pytest.raises(ValueError, match=f'{name}: 314,572,800 bytes, more than a {what} may have'):
                read(str(path))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20, peak  # unread: no buffer for its 300 MB (measured by memory, not by time)
