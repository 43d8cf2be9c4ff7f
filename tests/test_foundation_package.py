"""The package registers everything it defines, ships the vocabularies unchanged, and renders
reproducible text lines into folders and FudanVI LMDBs."""
import ast
import glob
import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
from lint_testing import lint_flags

from basicsr.archs import build_network
from basicsr.data import build_dataset
from basicsr.models import build_model
from basicsr.utils.registry import ARCH_REGISTRY, DATASET_REGISTRY, LOSS_REGISTRY, METRIC_REGISTRY, MODEL_REGISTRY

import tola_plugin
from tola_plugin.data.fudanvi_lmdb import FudanVILmdbReader, write_fudanvi_lmdb
from tola_plugin.data.text_render import TextLineRenderer, common_chinese, system_cjk_fonts
from tola_plugin.registry_index import REGISTRY_INDEX
from tola_plugin.text.alphabets import idm_alphabet, transocr_classes
from conftest import REPO

# sha256 of the official alphabets (DiffTSR's model/IDM/utils/alphabets.py string and FudanVI's benchmark.txt,
# byte-identical copies; docs/transocr.md) and of the official key manifests (docs/backbone.md).
VOCAB_SHA256 = {
    'difftsr_idm_alphabet.txt': '0ab32c4bcaf8429550c5706a51174c6ca805ac0bccd4ace1aeab09d6946a89ae',
    'transocr_benchmark_alphabet.txt': 'a1d520fc2d2e5b91778753a2226134e93523b53b5cbcdc93f1a3c4a1fdf20d07',
}
MANIFEST_SHA256 = {
    'tests/data/backbone/manifests/idm.tsv': '35bb172b1e6d604267486ec024d2d6e29bcb3cf1bc317bed55ba9c2d13e9eb40',
    'tests/data/backbone/manifests/mom.tsv': '8aafb61eb20570cbad19d800ef02fad860304f88d3ddf43a25acf54e279c8213',
    'tests/data/backbone/manifests/tdm.tsv': 'ba792691a3533176a0d0c83a7265eebdee3fb275e8b0a57ccf94798054b687cf',
    'tests/data/backbone/manifests/vae.tsv': '40eb6a8e257ec1bbb24cd2c8c16dbd5379985e9f25f256168947f889832967d5',
    'tests/data/transocr/transocr_manifest.tsv': '24b4f9aeb6c7d4d01ad1f5ed7cfa2c9fcbd3eecb811fe4e823d0976f40fef1e1',
}

PKG = os.path.dirname(tola_plugin.__file__)
REGISTRIES = {
    'ARCH_REGISTRY': ARCH_REGISTRY, 'DATASET_REGISTRY': DATASET_REGISTRY, 'LOSS_REGISTRY': LOSS_REGISTRY,
    'METRIC_REGISTRY': METRIC_REGISTRY, 'MODEL_REGISTRY': MODEL_REGISTRY
}


def declared_registrations():
    """(registry name, object name, file) for every ``@X_REGISTRY.register()`` decorator in the package."""
    found = []
    for path in glob.glob(os.path.join(PKG, '**', '*.py'), recursive=True):
        tree = ast.parse(open(path, encoding='utf-8').read())
        for node in ast.walk(tree):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                for dec in node.decorator_list:
                    call = dec.func if isinstance(dec, ast.Call) else dec
                    if (isinstance(call, ast.Attribute) and call.attr == 'register'
                            and isinstance(call.value, ast.Name) and call.value.id in REGISTRIES):
                        found.append((call.value.id, node.name, os.path.relpath(path, REPO)))
    return found


def test_every_declared_name_is_registered_after_import():
    """Every ``@X_REGISTRY.register()`` of the package is known to its registry after ``import tola_plugin`` (announced
    by the index, tola_plugin/registry_index.py), with the module that declares it, in its registry's folder."""
    declared = declared_registrations()
    for registry, name, path in declared:
        assert name in REGISTRIES[registry], f'{name} ({path}) is not in {registry} after import tola_plugin'
    folders = {
        'ARCH_REGISTRY': 'archs', 'DATASET_REGISTRY': 'data', 'LOSS_REGISTRY': 'losses', 'METRIC_REGISTRY': 'metrics',
        'MODEL_REGISTRY': 'models'
    }
    indexed = {(REGISTRIES[r]._name, n, m) for r in REGISTRIES for n, m in REGISTRY_INDEX[REGISTRIES[r]._name].items()}
    assert indexed == {(REGISTRIES[r]._name, n, p[:-3].replace(os.sep, '.')) for r, n, p in declared}
    for registry, name, path in declared:
        assert path.startswith(os.path.join('tola_plugin', folders[registry]) + os.sep), \
            f'{name} registered outside {folders[registry]}/'


@pytest.mark.parametrize('build,opt', [
    (build_network, {'type': 'NoSuchArchXYZ'}),
    (build_dataset, {'type': 'NoSuchDatasetXYZ', 'phase': 'train', 'name': 'x'}),
    (build_model, {'model_type': 'NoSuchModelXYZ'}),
])
def test_unknown_type_names_itself(build, opt):
    with pytest.raises(KeyError, match='NoSuch[A-Za-z]+XYZ'):
        build(opt)


def test_vocab_files_are_byte_identical_package_data():
    assert len(idm_alphabet()) == 6735 and len(set(idm_alphabet())) == 6735
    assert len(transocr_classes()) == 7937
    for name, digest in VOCAB_SHA256.items():
        with open(os.path.join(PKG, 'assets', 'vocab', name), 'rb') as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, f'{name} is no longer the official alphabet'
    setup_py = open(os.path.join(REPO, 'setup.py'), encoding='utf-8').read()
    assert "'tola_plugin.assets.vocab': ['*.txt']" in setup_py


def digest(folder):
    h = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(folder, '**', '*'), recursive=True)):
        if os.path.isfile(path):
            h.update(os.path.relpath(path, folder).encode())
            h.update(open(path, 'rb').read())
    return h.hexdigest()


def render_cli(tmp_path, tag, seed, num=6, subprocess_run=False):
    """tools/render_text.py into tmp_path/tag; as a separate process (the real command line) or in-process."""
    out, lmdb = tmp_path / tag / 'png', tmp_path / tag / 'lines.lmdb'
    args = ['--num', str(num), '--seed', str(seed), '--out', str(out), '--lmdb', str(lmdb)]
    if subprocess_run:
        subprocess.run([sys.executable, os.path.join(REPO, 'tools', 'render_text.py'), *args], check=True,
                       capture_output=True)
    else:
        sys.path.insert(0, os.path.join(REPO, 'tools'))
        try:
            import render_text
        finally:
            sys.path.pop(0)
        render_text.main(args)
    return out, lmdb


def test_renderer_same_seed_same_bytes(tmp_path):
    a_png, a_lmdb = render_cli(tmp_path, 'a', seed=3, subprocess_run=True)
    b_png, b_lmdb = render_cli(tmp_path, 'b', seed=3)  # another process, same bytes
    c_png, _ = render_cli(tmp_path, 'c', seed=4)
    assert digest(a_png) == digest(b_png)
    assert digest(a_png) != digest(c_png)
    ra, rb = FudanVILmdbReader(str(a_lmdb)), FudanVILmdbReader(str(b_lmdb))
    assert len(ra) == len(rb) == 6
    assert all(ra.read_raw(i) == rb.read_raw(i) for i in range(1, 7))
    # The folder and the LMDB hold the same lines.
    labels = [line.rstrip('\n').split('\t') for line in open(a_png / 'labels.tsv', encoding='utf-8')]
    assert [t for _, t in labels] == [ra.read_raw(i)[1] for i in range(1, 7)]


def test_rendered_lines_have_canvas_size_and_covered_text():
    renderer = TextLineRenderer(seed=0)
    for i in range(20):
        img, text, category = renderer.render(i)
        assert img.shape == (128, 512, 3) and img.dtype == np.uint8
        assert img.std() > 10, 'no visible text'
        assert renderer.faces_covering(text), text
        lengths = {'chinese': (2, 8), 'english': (3, 12), 'digits': (2, 6)}
        if category in lengths:
            assert lengths[category][0] <= len(text) <= lengths[category][1]
    # Sample i does not depend on which other samples were rendered.
    assert np.array_equal(TextLineRenderer(seed=0).render(7)[0], renderer.render(7)[0])


def test_common_chinese_pool_is_in_both_alphabets():
    pool = common_chinese()
    assert 3000 < len(pool) <= 3755
    assert set(pool) <= set(idm_alphabet()) and set(pool) <= set(transocr_classes())


def test_font_lacking_a_character_is_refused():
    latin = '/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf'
    if not os.path.isfile(latin):
        pytest.skip('DejaVuSans not installed')
    renderer = TextLineRenderer([latin], seed=0)
    img, text, _ = renderer.render(0, 'Hello 2024')
    assert img.shape == (128, 512, 3)
    with pytest.raises(ValueError, match='no font covers .*文字'):
        renderer.render(1, '文字ab')


def test_system_has_a_chinese_font():
    assert system_cjk_fonts(), 'set-up should have installed a CJK font (fonts-wqy-microhei)'


def test_lmdb_round_trip_and_errors(tmp_path):
    import cv2
    img = np.full((8, 16, 3), 200, np.uint8)
    ok, buf = cv2.imencode('.png', img)
    path = str(tmp_path / 'rt.lmdb')
    assert write_fudanvi_lmdb(path, [(buf.tobytes(), '你好'), (buf.tobytes(), 'ab12')]) == 2
    reader = FudanVILmdbReader(path)
    assert len(reader) == 2
    got, label = reader.read(1)
    assert label == '你好' and np.array_equal(got, img)
    assert reader.read(2)[1] == 'ab12'
    with pytest.raises(KeyError, match='image-000000003'):
        reader.read(3)
    with pytest.raises(FileExistsError):
        write_fudanvi_lmdb(path, [(buf.tobytes(), 'x')])
    with pytest.raises(ValueError, match='empty label'):
        write_fudanvi_lmdb(str(tmp_path / 'empty.lmdb'), [(buf.tobytes(), '')])
    bad = str(tmp_path / 'bad.lmdb')
    write_fudanvi_lmdb(bad, [(b'not an image', 'x')])
    with pytest.raises(ValueError, match='not a decodable image'):
        FudanVILmdbReader(bad).read(1)


@pytest.mark.parametrize('path,digest', sorted(MANIFEST_SHA256.items()))
def test_official_manifests_are_unchanged(path, digest):
    """The manifests (every key and shape of the official checkpoints) are facts read from the official code; a
    change to one would silently move what "strict" means."""
    with open(os.path.join(REPO, path), 'rb') as f:
        assert hashlib.sha256(f.read()).hexdigest() == digest


def test_the_tool_convention_is_a_lint_rule(tmp_path):
    """argparse + main(argv) + run_tool (docs/reliability.md, "Errors") is checked by `make lint` (the flake8 plugin
    in lint/, declared in setup.cfg): it passes every command of the repository and flags a tool that breaks it. A
    tool is argument parsing plus one call into the package: a helper function or a class in it is flagged (TOL004),
    argparse type functions named parse_* are not."""
    bad = tmp_path / 'tools' / 'bad_tool.py'
    bad.parent.mkdir()
    bad.write_text('import sys\n\n\ndef run():\n    sys.exit(1)\n', encoding='utf-8')
    helper = tmp_path / 'tools' / 'helper_tool.py'
    helper.write_text(
        'import argparse\n\nfrom tola_plugin.utils.cli_errors import run_tool\n\n\n'
        'def count_lines(path):\n    with open(path) as f:\n        return sum(1 for _ in f)\n\n\n'
        'class Report:\n    pass\n\n\n'
        'def main(argv=None):\n    args = argparse.ArgumentParser().parse_args(argv)\n'
        '    print(count_lines(args))\n    return 0\n\n\n'
        "if __name__ == '__main__':\n    run_tool(main)\n", encoding='utf-8')
    thin = tmp_path / 'tools' / 'thin_tool.py'
    thin.write_text(
        '"""Count lines.\n\n    python tools/thin_tool.py FILE\n"""\nimport argparse\n\n'
        'from tola_plugin.data.text_labels import read_labels_tsv\nfrom tola_plugin.utils.cli_errors import run_tool\n'
        '\n\ndef parse_path(text):\n    return text.strip()\n\n\n'
        'def build_parser():\n    p = argparse.ArgumentParser(description=__doc__)\n'
        "    p.add_argument('path', type=parse_path)\n    return p\n\n\n"
        'def parse_args(argv=None):\n    return build_parser().parse_args(argv)\n\n\n'
        'def main(argv=None):\n    args = parse_args(argv)\n    print(len(read_labels_tsv(args.path)))\n'
        '    return 0\n\n\n'
        "if __name__ == '__main__':\n    run_tool(main)\n", encoding='utf-8')
    alias = tmp_path / 'tools' / 'alias_tool.py'
    alias.write_text('from tola_cli.infer import cli, main  # noqa: F401\n', encoding='utf-8')
    not_a_command = tmp_path / 'helpers.py'
    not_a_command.write_text('import sys\n\n\ndef helper():\n    sys.exit(0)\n', encoding='utf-8')
    cli_helper = tmp_path / 'tola_cli' / 'helper_cli.py'  # a tola_cli command (console script) with a helper
    cli_helper.parent.mkdir()
    cli_helper.write_text(
        'import argparse\n\nfrom tola_cli.command import run_command\n\n\ndef parse_args(argv=None):\n'
        '    return argparse.ArgumentParser().parse_args(argv)\n\n\ndef count(args):\n    return 0\n\n\n'
        'def main(argv=None):\n    return count(parse_args(argv))\n\n\ndef cli(argv=None):\n'
        '    run_command(main, parse_args, argv)\n', encoding='utf-8')
    commands = [os.path.join('tools', n) for n in sorted(os.listdir(os.path.join(REPO, 'tools'))) if n.endswith('.py')]
    commands += [
        os.path.join('tola_cli', n) for n in sorted(os.listdir(os.path.join(REPO, 'tola_cli'))) if n.endswith('.py')
    ] + ['tola_plugin/train.py', 'tola_plugin/test.py']
    out = subprocess.run([
        sys.executable, '-m', 'flake8', '--select', 'TOL', *commands,
        str(bad),
        str(helper),
        str(thin),
        str(alias),
        str(not_a_command),
        str(cli_helper)
    ], cwd=REPO, capture_output=True, text=True)
    flagged = sorted((line.split(':', 1)[0], line.split(': ', 1)[1].split(' ')[0]) for line in out.stdout.splitlines())
    assert out.returncode == 1 and flagged == sorted([(str(bad), 'TOL001'), (str(bad), 'TOL002'), (str(bad), 'TOL003'),
                                                      (str(bad), 'TOL004'), (str(helper), 'TOL004'),
                                                      (str(helper), 'TOL004'), (str(cli_helper), 'TOL004')]), \
        out.stdout + out.stderr
    assert "TOL004 tool defines function 'count_lines'" in out.stdout
    assert "TOL004 tool defines class 'Report'" in out.stdout


def test_imports_point_down_the_layers_as_a_lint_rule(tmp_path):
    """Every import inside tola_plugin points down the layers of docs/architecture.md, imports inside functions too
    (e.g. checkpoints/ reads and writes files and imports no arch): checked by `make lint` (lint/flake8_layers.py,
    declared in setup.cfg). The package passes; an arrow up, one sideways and a folder without a layer are flagged."""
    fake = tmp_path / 'tola_plugin'
    for folder in ('checkpoints', 'archs', 'metrics', 'newfolder'):
        (fake / folder).mkdir(parents=True)
    (fake / 'checkpoints' / 'up.py').write_text(
        'def build():\n    from tola_plugin.archs.tola_arch import TOLANet\n    return TOLANet\n', encoding='utf-8')
    (fake / 'metrics' / 'sideways.py').write_text('from tola_plugin.losses import lpips_loss  # noqa: F401\n',
                                                  encoding='utf-8')
    (fake / 'archs' / 'down.py').write_text(
        'from tola_plugin import utils  # noqa: F401\nfrom tola_plugin.checkpoints import tola  # noqa: F401\n'
        'import tola_plugin.archs.lora  # noqa: F401\n', encoding='utf-8')
    (fake / 'newfolder' / 'x.py').write_text('import os  # noqa: F401\n', encoding='utf-8')
    out = lint_flags('LAY', fake, 'tola_plugin')
    assert out.returncode == 1 and out.places == [('checkpoints/up.py', 'LAY001'), ('metrics/sideways.py', 'LAY001'),
                                                  ('newfolder/x.py', 'LAY002')], out.output
    assert 'tola_plugin.checkpoints (layer 1) imports tola_plugin.archs (layer 2)' in out.stdout


def test_the_layer_rule_covers_the_command_lines_the_tools_the_hook_and_the_shim(tmp_path):
    """Outside the package too (lint/flake8_layers.py): tools/ and the hook may import tola_cli/ (the hook: the
    launchers' command line, checked before their package is imported) and the package, tola_cli/ the package and the
    shim; the package imports no command line, the shim nothing, tola_cli/ not the hook. The repository's own files
    pass; each arrow up or sideways is flagged."""
    files = {
        'tools/fine.py': 'from tola_cli.command import run_command  # noqa: F401\nimport tola_plugin  # noqa: F401\n',
        'tola_cli/fine.py': 'import tola_plugin_shim  # noqa: F401\nfrom tola_plugin.inference import pipeline  '
        '# noqa: F401\n',
        'tola_cli/up.py': 'import tola_plugin_hook  # noqa: F401\n',
        'tola_lab/gpu_check/up.py': 'def f():\n    from tola_cli import command\n    return command\n',
        'tola_plugin_shim.py': 'from tola_plugin.utils import devices  # noqa: F401\n',
        'tola_plugin_hook.py': 'import tola_cli.infer  # noqa: F401\nimport tola_plugin  # noqa: F401\n',
        'tools/up.py': 'import tola_plugin_hook  # noqa: F401\n',
    }
    out = lint_flags('LAY', tmp_path, 'tola_cli', 'tools', 'tola_plugin_hook.py', 'tola_plugin_shim.py', files=files)
    assert out.returncode == 1 and out.places == [('tola_cli/up.py', 'LAY001'), ('tola_lab/gpu_check/up.py', 'LAY001'),
                                                  ('tola_plugin_shim.py', 'LAY001'),
                                                  ('tools/up.py', 'LAY001')], out.output
    assert 'tola_lab.gpu_check (layer 8) imports tola_cli/ (layer 9)' in out.stdout
    assert 'tola_plugin_shim.py (layer 0) imports tola_plugin.utils (layer 0)' in out.stdout
    assert 'tola_cli/ (layer 9) imports tola_plugin_hook.py (layer 10)' in out.stdout
    assert 'tools/ (layer 10) imports tola_plugin_hook.py (layer 10)' in out.stdout


def test_the_lab_is_imported_by_the_lab_and_the_tools_only(tmp_path):
    """The lab (tola_lab/, a top-level package beside tola_plugin: benchmarks, the GPU check, the demo model's
    training, the ablations' files) is apart from what a user imports (docs/architecture.md, "The package plan"): the
    lab and tools/ may import it, in the lab's own order (the GPU check uses the benchmarks, not the reverse), and it
    may import the package; the package and the command lines may not import it (LAY003), be it the whole lab, a
    folder of it or one module; a folder of the lab without a layer is flagged (LAY002)."""
    files = {
        'tools/fine.py': 'from tola_lab.benchmarks import complexity  # noqa: F401\n',
        'tola_lab/gpu_check/fine.py': 'from tola_lab.benchmarks import complexity  # noqa: F401\n'
        'from tola_plugin.inference import pipeline  # noqa: F401\nimport tola_plugin  # noqa: F401\n',
        'tola_lab/benchmarks/up.py': 'from tola_lab.gpu_check import run  # noqa: F401\n',
        'tola_lab/newfolder/x.py': 'import os  # noqa: F401\n',
        'tola_plugin/inference/into_lab.py': 'from tola_lab import ablations  # noqa: F401\n',
        'tola_plugin/models/into_lab.py': 'def f():\n    import tola_lab.demo.report\n    return f\n',
        'tola_plugin/train.py': 'import tola_lab  # noqa: F401\n',
        'tola_cli/into_lab.py': 'from tola_lab.benchmarks.complexity import route_macs  # noqa: F401\n',
    }
    out = lint_flags('LAY', tmp_path, 'tola_plugin', 'tola_lab', 'tola_cli', 'tools', files=files)
    assert out.returncode == 1 and out.places == [('tola_cli/into_lab.py', 'LAY003'),
                                                  ('tola_lab/benchmarks/up.py', 'LAY001'),
                                                  ('tola_lab/newfolder/x.py', 'LAY002'),
                                                  ('tola_plugin/inference/into_lab.py', 'LAY003'),
                                                  ('tola_plugin/models/into_lab.py', 'LAY003'),
                                                  ('tola_plugin/train.py', 'LAY003')], out.output
    assert 'tola_plugin.inference imports tola_lab.ablations: the lab is imported by the lab and tools/ only' \
        in out.stdout
    assert 'tola_plugin.train imports tola_lab.__init__: the lab is imported by' in out.stdout
    assert 'tola_lab.benchmarks (layer 7) imports tola_lab.gpu_check (layer 8)' in out.stdout
    assert 'tola_lab.newfolder has no layer in lint/flake8_layers.py LAYERS' in out.stdout


def test_a_wing_over_its_line_budget_fails_the_lint(tmp_path):
    """Issue 51: growth is a decision. `make lint` runs lint/line_budget.py: a wing of docs/architecture.md over the
    budget of its row fails naming the numbers; a folder or module in no wing fails; within budget, nothing is said."""
    package = tmp_path / 'tola_plugin'
    (package / 'core').mkdir(parents=True)
    (package / 'core' / 'a.py').write_text('x = 1\ny = 2\n')
    (package / 'top.py').write_text('z = 3\n')
    (tmp_path / 'docs').mkdir()
    doc = ('| wing | folders and modules | files | lines | budget |\n|---|---|---:|---:|---:|\n'
           '| model | `core/` (the networks) | 1 | 2 | {model} |\n| glue | `top.py` | 1 | 1 | 1 |\n')

    def lint(model_budget):
        (tmp_path / 'docs' / 'architecture.md').write_text(doc.format(model=model_budget))
        return subprocess.run(
            [sys.executable, os.path.join(REPO, 'lint', 'line_budget.py'),
             str(tmp_path)], capture_output=True, text=True, timeout=60)

    assert lint(2).returncode == 0 and lint(2).stderr == ''
    over = lint(1)
    assert over.returncode == 1 and "wing 'model': 2 lines, over its budget of 1 by 1" in over.stderr
    (package / 'web').mkdir()
    assert 'tola_plugin/web is in no wing of docs/architecture.md' in lint(2).stderr


def test_a_wing_may_name_a_top_level_folder_outside_the_package(tmp_path):
    """The lab's wing names `tola_lab/`, a top-level package beside tola_plugin (docs/architecture.md, "The package
    plan"): lint/line_budget.py counts that folder's .py lines for its wing (names with a '/' inside only describe the
    row), an entry of the package of the same name comes first, and every entry of tola_plugin still belongs to one
    wing; a folder outside the package in two wings fails."""
    package, lab = tmp_path / 'tola_plugin', tmp_path / 'tola_lab'
    (package / 'core').mkdir(parents=True)
    (package / 'core' / 'a.py').write_text('x = 1\ny = 2\n')
    (lab / 'bench').mkdir(parents=True)
    (lab / '__init__.py').write_text('"""The lab."""\n')
    (lab / 'bench' / 'b.py').write_text('a = 1\nb = 2\nc = 3\n')
    (lab / 'bench' / 'notes.txt').write_text('not\ncounted\n')
    (tmp_path / 'core').mkdir()  # a top-level folder named like an entry of the package: the package's is counted
    (tmp_path / 'core' / 'c.py').write_text('\n' * 50)
    (tmp_path / 'docs').mkdir()
    doc = ('| wing | folders and modules | files | lines | budget |\n|---|---|---:|---:|---:|\n'
           '| model | `core/` | 1 | 2 | 2 |\n| lab | {lab} | 2 | 4 | {budget} |\n')

    def lint(lab_names='`tola_lab/` (outside the package): `tola_lab/bench/`', budget=4):
        (tmp_path / 'docs' / 'architecture.md').write_text(doc.format(lab=lab_names, budget=budget))
        return subprocess.run(
            [sys.executable, os.path.join(REPO, 'lint', 'line_budget.py'),
             str(tmp_path)], capture_output=True, text=True, timeout=60)

    assert lint().returncode == 0 and lint().stderr == ''
    over = lint(budget=3)
    assert over.returncode == 1 and "wing 'lab': 4 lines, over its budget of 3 by 1" in over.stderr, over.stderr
    assert "wing 'model'" not in over.stderr
    twice = lint('`tola_lab/`, `tola_lab`')
    assert twice.returncode == 0, twice.stderr  # one folder named twice in one row counts once
    doc = doc.replace('| model | `core/` |', '| model | `core/`, `tola_lab/` |').replace('| 2 | 2 |', '| 2 | 10 |')
    assert 'tola_lab is in two wings (model, lab) in docs/architecture.md' in lint().stderr
    (package / 'extra.py').write_text('e = 1\n')
    assert 'tola_plugin/extra.py is in no wing of docs/architecture.md' in lint().stderr


def test_a_reference_to_a_section_that_is_not_there_fails_the_lint(tmp_path):
    """lint/doc_references.py: `docs/X.md, "Section"` must name a heading of X or a paragraph's bold title (their first
    words will do), else `make lint` fails naming the line; a reference to a missing page fails too."""
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'a.md').write_text('# A\n\n## Option files: strict in every block\n\n'
                                            '**Where it runs.** Here.\n')
    (tmp_path / 'README.md').write_text('See docs/a.md, "Option files" and docs/a.md ("Where it\nruns").\n')

    def lint():
        return subprocess.run(
            [sys.executable, os.path.join(REPO, 'lint', 'doc_references.py'),
             str(tmp_path)], capture_output=True, text=True, timeout=60)

    assert lint().returncode == 0 and lint().stderr == ''
    (tmp_path / 'docs' / 'b.md').write_text('Read docs/a.md, "Strict options" and docs/c.md ("Anything").\n')
    dead = lint()
    assert dead.returncode == 1
    assert 'docs/b.md:1: docs/a.md "Strict options": no heading or bold paragraph title' in dead.stderr
    assert 'docs/b.md:1: docs/c.md "Anything": no such page' in dead.stderr
    (tmp_path / 'docs' / 'b.md').write_text('Read docs/a.md, "Option file".\n')  # a word cut short is no match
    assert lint().returncode == 1
