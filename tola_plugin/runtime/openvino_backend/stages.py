"""TOLA's stages as OpenVINO IR, converted once per model and cached on disk.

A cache entry (``<cache>/openvino/<key>/``; ``key`` = the model's digest and the OpenVINO version) holds each stage
as IR (``<stage>.xml`` + ``.bin``, fp32 weights: portable across CPUs) plus a manifest with each file's size and
SHA-256. The IR is converted from the torch modules in a child process (``convert.py``), in a private folder
renamed into place when complete, so two processes converting the same model never see each other's half-written
files. An entry that is incomplete, of another format or version, whose XML fails its hash or whose weights fail
their size (or, when their mtime changed, their hash) is converted again; an entry that fails to load in the worker
is rebuilt once (``backend.py``). Compiling an IR for this CPU and a precision is cached by OpenVINO itself in
``openvino/compiled/`` (its ``CACHE_DIR``, keyed by the model, the settings, the CPU and the version).
"""
import json
import os
import shutil
import tempfile
import time
from typing import Sequence

from tola_plugin.runtime.child_process import python_command, run_child
from tola_plugin.runtime.image_stages import STAGES
from tola_plugin.runtime.machine import package_version
from tola_plugin.runtime.model_digest import sha256_of
from tola_plugin.runtime.openvino_backend.convert import PROGRESS
from tola_plugin.runtime.stage_source import StageSource
from tola_plugin.utils.atomic_files import read_json_dict, write_json
from tola_plugin.utils.progress import Progress
from tola_plugin.utils.user_cache import cache_root
from tola_plugin.utils.user_text import note

FORMAT = 'tola_plugin.openvino_stages/3'
MANIFEST = 'manifest.json'
CONVERT_TIMEOUT = 3600.0  # seconds: about a minute at full size on 2 cores


def openvino_missing() -> str:
    """Why the OpenVINO backend cannot run here ('' when it can), without importing OpenVINO."""
    return '' if package_version('openvino') else 'openvino is not installed; pip install "tola-plugin[openvino]"'


def compiled_cache_dir() -> str:
    """OpenVINO's own cache of compiled models (``CACHE_DIR``), inside ours (created)."""
    path = os.path.join(cache_root(), 'openvino', 'compiled')
    os.makedirs(path, exist_ok=True)
    return path


def _advance(bar: Progress, line: str) -> None:
    """One PROGRESS line of the conversion child (``convert.py``): the bar advances by the stage's share of the
    parameters (what its conversion time follows), so the time left is estimated from the work left."""
    parts = line.split()
    if len(parts) == 4 and parts[0] == PROGRESS:
        stage, weight, total = parts[1], int(parts[2]), int(parts[3])
        bar.update(100 * weight / total, note=f'{stage} done')


class StageCache:
    """The cache entry of one model: ``<cache>/openvino/<key>/`` with ``<stage>.xml`` / ``.bin`` and
    ``manifest.json`` (format, key, OpenVINO version, each file's size, mtime and SHA-256)."""

    def __init__(self, digest: str):
        self.version = package_version('openvino')
        self.key = f'{digest}-openvino{self.version}'
        self.folder = os.path.join(cache_root(), 'openvino', self.key[:32])

    def path(self, stage: str) -> str:
        """The IR of ``stage`` (its weights beside it, same name with .bin)."""
        return os.path.join(self.folder, f'{stage}.xml')

    def paths(self):
        return {stage: self.path(stage) for stage in STAGES}

    @staticmethod
    def files() -> Sequence[str]:
        return [f'{stage}.{ext}' for stage in STAGES for ext in ('xml', 'bin')]

    def valid(self) -> bool:
        """Whether the entry is complete and intact: every XML hashed (small), every weight file's size checked and
        its hash when its mtime changed."""
        manifest = read_json_dict(os.path.join(self.folder, MANIFEST))
        if not manifest or manifest.get('format') != FORMAT or manifest.get('key') != self.key \
                or manifest.get('openvino') != self.version or not isinstance(manifest.get('files'), dict):
            return False
        for name in self.files():
            entry, path = manifest['files'].get(name), os.path.join(self.folder, name)
            if not isinstance(entry, dict) or not os.path.isfile(path):
                return False
            stat = os.stat(path)
            if stat.st_size != entry.get('bytes'):
                return False
            if (name.endswith('.xml') or stat.st_mtime_ns != entry.get('mtime_ns')) \
                    and sha256_of(path) != entry.get('sha256'):
                return False
        return True

    def write_manifest(self, folder: str, seconds: float) -> float:
        """Write the manifest of the stage files in ``folder`` (sizes, mtimes, SHA-256); returns ``seconds``."""
        files = {}
        for name in self.files():
            path = os.path.join(folder, name)
            stat = os.stat(path)
            files[name] = {'bytes': stat.st_size, 'mtime_ns': stat.st_mtime_ns, 'sha256': sha256_of(path)}
        write_json(
            os.path.join(folder, MANIFEST),
            {'format': FORMAT, 'key': self.key, 'openvino': self.version, 'files': files, 'seconds': seconds})
        return seconds

    def remove(self) -> None:
        """Take the entry out of the way (renamed aside, then deleted), e.g. before a rebuild."""
        if os.path.lexists(self.folder):
            parent = os.path.dirname(self.folder)
            aside = tempfile.mkdtemp(prefix=os.path.basename(self.folder) + '.stale-', dir=parent)
            os.replace(self.folder, os.path.join(aside, 'entry'))
            shutil.rmtree(aside, ignore_errors=True)

    def build(self, source: StageSource) -> None:
        """Convert the three stages (in a child process) and write the entry, replacing an invalid one. The later of
        two processes converting the same model at once keeps the entry that is already there."""
        parent = os.path.dirname(self.folder)
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=os.path.basename(self.folder) + '.building-', dir=parent)
        try:
            start = time.perf_counter()
            note(f'converting TransOCR, the IDM and the VAE for OpenVINO once for this model (minutes at full size, '
                 f'under a minute for a model of the demo backbone); cached in {self.folder}')
            command = python_command(
                module='tola_plugin.runtime.openvino_backend.convert') + [json.dumps(source.spec()), staging]
            with Progress('OpenVINO conversion', total=100, unit='%') as bar:
                run_child(command, 'the OpenVINO conversion', CONVERT_TIMEOUT, on_line=lambda line: _advance(bar, line))
            seconds = self.write_manifest(staging, round(time.perf_counter() - start, 1))
            if self.valid():  # another process finished first: keep its entry
                return
            self.remove()
            try:
                os.rename(staging, self.folder)
            except OSError:
                if not self.valid():  # not a faster twin's valid entry: a real failure
                    raise
            note(f'OpenVINO stages converted in {seconds:.0f} s')
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def ensure(self, source: StageSource) -> 'StageCache':
        """The entry, built when missing or invalid."""
        if not self.valid():
            self.build(source)
        return self
