"""The body of ``tola-infer`` (``tola_cli/infer.py`` parses the arguments): list the inputs, decide what each is
(one text line or a photo: ``--kind``, by default by its shape, ``image_kind``), lock the output folder, plan the
outputs, restore with ``TOLAPipeline``, write images, ``prior.csv`` (lines) and one JSON per photo, say what each image
was restored as, and end with a summary that counts what was really restored (docs/reliability.md, "Folder runs").

- A file that cannot be read or restored (not decodable, over a bound, out of memory) is reported with its path
  and skipped; the others go on, each as if restored alone, and the run returns 1.
- Every file is written atomically (temporary file, then rename): a crash, Ctrl-C or a full disk never leaves a
  half-written file under its final name. The record of an image (its ``prior.csv`` row or its JSON) is written
  before the image, so an output image always has its record, and a rerun skips the images that exist (unless
  --overwrite) and restores the rest: an interrupted run resumes. A write error names the file and the summary is
  still printed.
- ``prior.csv`` gains the run's rows and keeps the others' (merged under the lock), rewritten after every batch.
- The output folder is locked while a run writes to it (``.tola-infer.lock`` inside it): a second run is refused
  with the owner's PID. An output may never be an input: files are compared by device and inode, so a hard link
  or a symlink to an input is caught.
- Problems with the run as a whole (no input, a missing model, clashing outputs) raise before anything is written.
"""
import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple, Union

from tola_plugin.data.image_io import IMAGE_EXTENSIONS, FolderScan, scan_image_folder, upright_size, write_image
from tola_plugin.inference.image_kind import check_kind, describe_kind, is_photo
from tola_plugin.inference.prior_csv import read_prior_rows, write_prior_csv
from tola_plugin.utils import run_lock
from tola_plugin.utils.atomic_files import read_json_dict, write_json
from tola_plugin.utils.progress import Progress, step_notes
from tola_plugin.utils.user_paths import (NOTHING_THERE, check_affix, check_folder_target, path_inside, path_kind,
                                          temporary_stem, temporary_stem_of)
from tola_plugin.utils.user_text import say

if TYPE_CHECKING:
    from tola_plugin.inference.pipeline import TOLAPipeline

PRIOR_CSV = 'prior.csv'
LOCK_FILE = '.tola-infer.lock'
MAX_LISTED = 5
INTERRUPTED_STATUS = 130  # the shell's status for a run ended by Ctrl-C (128 + SIGINT)


@dataclass
class Job:
    """One input file and where its outputs go (``name``: the output image path relative to the output folder;
    ``json``: the path of its record when it is restored as a ``photo``; a line's record is its ``prior.csv`` row)."""
    input: str
    output: str
    name: str
    json: str
    photo: bool = False


@dataclass
class Summary:
    """What a run did, for the summary lines: ``done`` images restored; photos written as they were, with no line
    found (``no_lines``) or none of their restored lines pasted (``none_pasted``)."""
    total: int
    done: int = 0
    no_lines: List[str] = field(default_factory=list)
    none_pasted: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)
    failures: List[str] = field(default_factory=list)
    interrupted: bool = False
    own_outputs: List[str] = field(default_factory=list)


def list_inputs(source: str, recursive: bool, skip_dir: str = '') -> Tuple[List[str], FolderScan]:
    """The image files of ``source`` (itself if it is a file, else the images in the folder, sorted; subfolders
    with ``recursive``, except ``skip_dir``, the output folder), and the scan of the folder (what it left out)."""
    kind = path_kind(source)
    if kind == 'a file':
        return [source], FolderScan(images=[os.path.basename(source)])
    if kind in NOTHING_THERE:
        raise FileNotFoundError(f'input not found: {source} (expected an image file or a folder)')
    if kind != 'a folder':
        raise ValueError(f'input {source} is {kind}; expected an image file or a folder')
    scan = scan_image_folder(source, recursive, skip_dir)
    found = [os.path.join(source, n) for n in scan.images]
    if not found:
        where = 'or its subfolders ' if recursive else ''
        also = (f'; {len(scan.unsupported)} other file(s): {_listing(scan.unsupported)}' if scan.unsupported else '')
        unread = f'; subfolder(s) that could not be read: {_listing(scan.unreadable)}' if scan.unreadable else ''
        raise ValueError(f'no images ({", ".join(IMAGE_EXTENSIONS)}) in {source} {where}'
                         f'{"" if recursive else "(use --recursive for subfolders)"}'.rstrip() + also + unread)
    return found, scan


def _listing(items: List[str]) -> str:
    shown = ', '.join(items[:MAX_LISTED])
    return shown + (f', ... ({len(items)} in all)' if len(items) > MAX_LISTED else '')


def file_identity(path: str) -> Optional[Tuple[int, int]]:
    """(device, inode) of the file ``path`` resolves to; None when there is none. Two paths with one identity are
    one file (hard links, symlinks, bind mounts), whatever their names."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


@dataclass
class OutputPlan:
    """The jobs of a run, and the listed files left out because they are outputs of the run's other inputs (a rerun
    of ``-i D -o D --suffix _sr``: ``a_sr.png`` is ``a.png``'s output, not an input)."""
    jobs: List[Job]
    own_outputs: List[str] = field(default_factory=list)


def restored_as_photo(path: str, kind: str) -> bool:
    """Whether the image file ``path`` is restored as a photo under ``kind`` (``image_kind.KINDS``); 'auto' decides by
    the upright size its header declares (``image_io.upright_size``: what the pipeline will read, not decoded here)."""
    if kind != 'auto':
        return check_kind(kind) == 'photo'
    try:
        height, width = upright_size(path)
    except (ValueError, OSError):
        return False  # unreadable: restored as a line, it fails with the reader's own message
    return is_photo(kind, height, width)


def plan_outputs(inputs: List[str], source: str, out_dir: str, suffix: str, ext: str, kind: str,
                 overwrite: bool = False) -> OutputPlan:
    """Output paths of ``inputs`` under one rule for every file the run writes (images, ``prior.csv``, photo JSONs),
    each input restored as a line or a photo as ``kind`` decides (``restored_as_photo``): a ValueError, before
    anything is written, when two inputs would write one file, an output would replace an input (the same file:
    compared by device and inode, not by name), or a photo's JSON exists that is not this input's record from an
    earlier run (without ``overwrite``). Inputs that are the planned outputs of other inputs are left
    out (``OutputPlan.own_outputs``). Every output path is built by ``user_paths.path_inside``: ``suffix`` may not
    hold a path separator, and a name that does not fit the file system is refused before anything is written; paths
    are compared normalised."""
    check_affix(suffix, '--suffix', 'it is appended to each output name')
    root = source if os.path.isdir(source) else os.path.dirname(source)
    jobs, seen = [], {}
    for path in inputs:
        rel = os.path.relpath(path, root) if os.path.isdir(source) else os.path.basename(path)
        stem, in_ext = os.path.splitext(rel)
        out_ext = ext if ext != 'auto' else ('jpg' if in_ext.lower() in ('.jpg', '.jpeg') else 'png')
        name = f'{stem}{suffix}.{out_ext}'
        what, record = f'the output of {path}', f'{stem}{suffix}.json'  # the record is written for photos only
        photo = restored_as_photo(path, kind)
        record = path_inside(out_dir, record, what) if photo else os.path.join(out_dir, record)
        jobs.append(Job(path, path_inside(out_dir, name, what), name.replace(os.sep, '/'), record, photo))
    planned = {os.path.abspath(job.output): job for job in jobs}  # by name: a link to an input is refused below
    own = [job for job in jobs if planned.get(os.path.abspath(job.input), job) is not job]
    jobs = [job for job in jobs if job not in own]
    for job in jobs:
        for written, what in ((job.output, 'image'), (job.json, 'record')) if job.photo else ((job.output, 'image'), ):
            if written in seen:
                advice = ('choose --ext/--suffix, or rename one' if what == 'image' else
                          "a photo's JSON is named after the input without its extension: rename one")
                raise ValueError(f'{seen[written]} and {job.input} would both be written to {written}; {advice}')
            seen[written] = job.input
    written = list(seen)
    if not all(job.photo for job in jobs):
        written.append(os.path.join(out_dir, PRIOR_CSV))
    sources = {file_identity(job.input) for job in jobs} - {None}
    on_inputs = [p for p in written if file_identity(p) in sources]
    if on_inputs:
        raise ValueError(f'outputs would replace inputs ({_listing(on_inputs)}: the same files, by device and inode); '
                         f'choose another -o or a --suffix')
    if not overwrite:
        foreign = [
            job.json for job in jobs
            if job.photo and not os.path.exists(job.output) and os.path.exists(job.json) and not is_record_of(job)
        ]
        if foreign:
            raise ValueError(f'{_listing(foreign)} exist(s) and would be replaced: not the record tola-infer wrote for '
                             f'the same input; move them away, or pass --overwrite')
    return OutputPlan(jobs, [job.input for job in own])


def is_record_of(job: Job) -> bool:
    """Whether the JSON at ``job.json`` is the record an earlier run wrote for this input and output (a run killed
    between the record and the image leaves it; the rerun writes both again)."""
    record = read_json_dict(job.json)
    return bool(record) and os.path.basename(str(record.get('input'))) == os.path.basename(job.input) and \
        os.path.basename(str(record.get('output'))) == os.path.basename(job.output)


def remove_stale_temporaries(jobs: List[Job], out_dir: str) -> List[str]:
    """Delete the temporary files that atomic writes of a killed run left (``.<name>.<random>.tmp`` beside each
    planned output, ``user_paths.temporary_name``); returns their paths. Only names this run would write are
    touched. Each output folder is listed once (a rerun of 20,000 inputs lists one folder, not 40,000 globs)."""
    stems: Dict[str, set] = {}
    for target in {os.path.join(out_dir, PRIOR_CSV)} | {p for job in jobs for p in (job.output, job.json)}:
        stems.setdefault(os.path.dirname(target), set()).add(temporary_stem_of(target))
    removed = []
    for folder in sorted(stems):
        try:
            names = os.listdir(folder or '.')
        except OSError:  # not there yet (a subfolder of a first run), or unreadable: no temporary file of ours
            continue
        for name in sorted(names):
            if temporary_stem(name) in stems[folder]:
                tmp = os.path.join(folder, name)
                try:
                    os.remove(tmp)
                    removed.append(tmp)
                except FileNotFoundError:
                    pass
    return removed


def _write_error(path: str, err: OSError) -> OSError:
    """An OSError (same errno) whose message names the file that could not be written and why."""
    named = OSError(f'could not write {path}: {err.strerror or err}')
    named.errno = err.errno
    return named


class PriorFile:
    """``prior.csv`` of an output folder: the rows already there (other runs', kept) and this run's, written
    atomically (``save``) after every batch."""

    def __init__(self, path: str, overwrite: bool, warn):
        self.path = path
        self.rows: Dict[str, Dict] = {}
        if os.path.exists(path):
            try:
                self.rows = {r['filename']: r for r in read_prior_rows(path)}
            except (ValueError, OSError, UnicodeDecodeError) as err:
                if not overwrite:
                    raise ValueError(f'{path} exists but is not a prior CSV ({err}); move it away, or pass --overwrite '
                                     f'to replace it') from None
                warn(f'{path} is not a prior CSV ({err}); --overwrite: it is replaced')

    def save(self) -> None:
        try:
            write_prior_csv(self.path, list(self.rows.values()))
        except OSError as err:
            raise _write_error(self.path, err) from None


def describe(err: BaseException) -> str:
    """An error's message, or its type when it has none (MemoryError())."""
    text = ' '.join(part.strip() for part in str(err).splitlines() if part.strip())  # one line per failure
    if isinstance(err, MemoryError):
        return f'out of memory{": " + text if text else ""}'
    return text or type(err).__name__


@dataclass
class RunSettings:
    """What a folder run does, as ``restore_folder`` takes it (the names of tola-infer's options)."""
    input: str
    output: str
    suffix: str = ''
    ext: str = 'auto'
    kind: str = 'auto'
    outscale: Optional[float] = None
    seed: int = 0
    recursive: bool = False
    overwrite: bool = False


PipelineSource = Union['TOLAPipeline', Callable[[], 'TOLAPipeline']]


def _builds(pipeline: PipelineSource) -> bool:
    """Whether ``pipeline`` is a function that builds one (a TOLAPipeline is callable too). Asked only when there is
    work: the pipeline's module (torch, the networks) is imported then, so a run with nothing to do (a rerun whose
    outputs all exist) answers in a moment."""
    from tola_plugin.inference.pipeline import TOLAPipeline
    return callable(pipeline) and not isinstance(pipeline, TOLAPipeline)


def restore_folder(input: str, output: str, pipeline: PipelineSource, suffix: str = '', ext: str = 'auto',
                   kind: str = 'auto', outscale: Optional[float] = None, seed: int = 0, recursive: bool = False,
                   overwrite: bool = False) -> int:
    """Restore the image file or folder ``input`` into the folder ``output`` (the body of tola-infer; the module
    docstring says what it guarantees).

    pipeline: a ``TOLAPipeline``, or a function returning one (e.g. ``lambda: TOLAPipeline.load(model=path)``),
        called only when there is something to restore, once the output folder is locked: a missing model is then
        the run's error, before anything is written; a pipeline built here is closed at the end.
    suffix, ext ('auto': jpg for .jpg/.jpeg inputs, else png; 'png', 'jpg'): the output names
        (``<name><suffix>.<ext>``). kind: what each image is (``image_kind.KINDS``): 'photo' (PP-OCRv4 finds its
        lines, each restored in place; one JSON per photo), 'line' (one text line; ``prior.csv``), or 'auto' (default:
        each by its shape, as the web page decides). outscale, seed: as ``TOLAPipeline.__call__``. recursive: also
        subfolders. overwrite: restore again images whose output exists (else they are skipped: a rerun continues).
    Returns 0 when every image was written (a photo with no line found too: the summary says so), 1 when some
    failed (or a subfolder could not be read), 130 when interrupted (what was done is kept)."""
    settings = RunSettings(input, output, suffix, ext, check_kind(kind), outscale, seed, recursive, overwrite)
    check_folder_target(output, 'output folder')  # -o naming a file: said now, not as makedirs' "File exists"
    inputs, scan = list_inputs(input, recursive, skip_dir=output)
    plan = plan_outputs(inputs, input, output, suffix, ext, kind, overwrite)
    _leave_out_own_files(scan, plan, settings)
    created = not os.path.isdir(output)
    os.makedirs(output, exist_ok=True)
    lock = run_lock.acquire(output, lambda m: say(f'warning: {m}'), os.path.join(output, LOCK_FILE),
                            advice='Wait for it to finish, or choose another -o.')
    try:
        return _run_locked(settings, pipeline, plan, scan)
    finally:
        run_lock.release(lock)
        if created:  # a run that wrote nothing (e.g. no model) leaves no empty folder behind
            with contextlib.suppress(OSError):
                os.rmdir(output)


def show_runtime(pipeline: PipelineSource) -> int:
    """Print where and how the pipeline runs (``--show-runtime``: the runtime decision, qualifying what needs it)."""
    pipe = pipeline() if _builds(pipeline) else pipeline
    say(pipe.describe_runtime(), sys.stdout)
    if pipe is not pipeline:
        pipe.close()
    return 0


def _leave_out_own_files(scan: FolderScan, plan: OutputPlan, settings: RunSettings) -> None:
    """A run into its input folder finds its own records there (prior.csv, photo JSONs): not "files that are not
    images"."""
    if not os.path.isdir(settings.input):
        return
    records = {os.path.join(settings.output, PRIOR_CSV)} | {job.json for job in plan.jobs}
    mine = {file_identity(p) for p in records} - {None}
    scan.unsupported = [n for n in scan.unsupported if file_identity(os.path.join(settings.input, n)) not in mine]


def _run_locked(settings: RunSettings, pipeline: PipelineSource, plan: OutputPlan, scan: FolderScan) -> int:
    jobs = plan.jobs
    for tmp in remove_stale_temporaries(jobs, settings.output):
        say(f'note: removed {tmp}, the temporary file of an interrupted write')
    lines = not all(job.photo for job in jobs)
    prior = PriorFile(os.path.join(settings.output, PRIOR_CSV), settings.overwrite, say) if lines else None
    summary = Summary(total=len(jobs), own_outputs=plan.own_outputs)
    todo = []
    for job in jobs:
        if os.path.exists(job.output) and not settings.overwrite:
            summary.skipped.append(job.output)
        else:
            todo.append(job)
    start = time.perf_counter()
    built = bool(todo) and _builds(pipeline)
    pipe = (pipeline() if built else pipeline) if todo else None  # a missing model is the run's error: no summary
    loaded = time.perf_counter()
    try:
        if todo:
            say(f'tola-infer: {pipe.describe_runtime()}')
            _restore_jobs(settings, pipe, todo, prior, summary)
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        if pipe is not None and built:
            pipe.close()
        elapsed = time.perf_counter() - loaded
        _print_summary(settings, summary, scan, loaded - start, elapsed)
    if summary.interrupted:
        return INTERRUPTED_STATUS
    return 1 if summary.failures or scan.unreadable else 0


def _restore_jobs(settings: RunSettings, pipe, todo: List[Job], prior: Optional[PriorFile], summary: Summary) -> None:
    # every image counted with the time left: a bar on a terminal, a line every few seconds in a log
    bar = Progress('tola-infer', total=len(todo), unit='photos' if settings.kind == 'photo' else 'images')

    def fail(job: Optional[Job], err: BaseException) -> None:
        message = describe(err)
        message = message if job is None or job.input in message else f'{job.input}: {message}'
        summary.failures.append(message)
        bar.write(f'failed: {message}')

    with bar:
        for batch in _batches(todo, pipe.batch_size):
            photo = batch[0].photo
            outcomes = pipe.restore_each([job.input for job in batch], detect=photo, outscale=settings.outscale,
                                         seed=settings.seed, progress=_photo_notes(bar, batch[0]) if photo else None)
            restored = []
            for job, outcome in zip(batch, outcomes):
                if isinstance(outcome, BaseException):
                    fail(job, outcome)
                else:
                    restored.append((job, outcome))
            for job, result in _write_outputs(restored, prior, fail):
                bar.write(_count(settings.kind, job, result, summary))
            bar.update(len(batch), note=os.path.basename(batch[-1].input))


def _photo_notes(bar: Progress, job: Job):
    """What a photo's restoration is doing, as lines above the bar (``step_notes``): '<input>: 3 of 12 line(s)
    restored, 9 s, about 27 s left'."""
    return step_notes(lambda text, _: bar.write(f'{job.input}: {text}'))


def _batches(todo: List[Job], size: int):
    """The jobs in order, in the steps they are restored in: consecutive lines up to ``size`` together (their windows
    batched across images), each photo alone (it batches its own lines)."""
    lines: List[Job] = []
    for job in todo:
        if not job.photo:
            lines.append(job)
            if len(lines) < size:
                continue
        if lines:
            yield lines
            lines = []
        if job.photo:
            yield [job]
    if lines:
        yield lines


def _count(kind: str, job: Job, result, summary: Summary) -> str:
    """Count a written image in the summary (restored, or a photo written as it was) and say what it was restored as:
    its progress line."""
    (height, width), (out_h, out_w) = result.input_size, result.image.shape[:2]
    sizes = f'{width}x{height} -> {out_w}x{out_h}'
    what = f'{job.input}: {describe_kind(kind, job.photo)}'
    if not job.photo:
        summary.done += 1
        return f'{what}; {sizes}'
    if not result.lines:
        summary.no_lines.append(job.input)
        return f'{what}: no text line found{f" ({result.note})" if result.note else ""}, written as it was; {sizes}'
    pasted = sum(bool(line.pasted) for line in result.lines)
    if pasted:
        summary.done += 1
    else:
        summary.none_pasted.append(job.input)
    left = '' if pasted else ' (read less well restored or changed colour; the JSON says why), written as it was'
    return f'{what}: {len(result.lines)} line(s) found, {pasted} restored in place{left}; {sizes}'


def _write_outputs(restored, prior: Optional[PriorFile], fail) -> List[tuple]:
    """Write each restored image after its record (its JSON for a photo, else its prior.csv row); returns the
    (job, result) written, reporting the others through ``fail``."""
    if not restored:
        return []
    lines = [(job, result) for job, result in restored if not job.photo]
    if lines:
        for job, result in lines:
            line = result.lines[0]
            prior.rows[job.name] = dict(filename=job.name, prior_text=line.prior_text,
                                        prior_confidence=line.prior_confidence,
                                        prior_token_confidences=line.token_confidences)
        try:
            prior.save()
        except OSError as err:
            for job, _ in lines:
                prior.rows.pop(job.name, None)
                fail(job, err)
            restored = [(job, result) for job, result in restored if job.photo]
    written, unwritten = [], []
    for job, result in restored:
        try:
            if job.photo:
                _write_or_name(
                    job.json,
                    lambda: write_json(job.json, dict(input=job.input, output=job.output, **result.to_dict())))
            try:
                _write_or_name(job.output, lambda: write_image(job.output, result.image, order='RGB'))
            except (ValueError, OSError):
                if job.photo:
                    _remove(job.json)
                raise
        except (ValueError, OSError) as err:
            unwritten.append(job)
            fail(job, err)
            continue
        written.append((job, result))
    unwritten = [job for job in unwritten if not job.photo]
    if unwritten:  # their rows were written first: take them out again
        for job in unwritten:
            prior.rows.pop(job.name, None)
        try:
            prior.save()
        except OSError as err:
            fail(None, err)
    return written


def _write_or_name(path: str, write) -> None:
    try:
        write()
    except OSError as err:
        raise _write_error(path, err) from None


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _print_summary(settings: RunSettings, summary: Summary, scan: FolderScan, load_seconds: float,
                   seconds: float) -> None:
    written = summary.done + len(summary.no_lines) + len(summary.none_pasted)
    per_image = f', {seconds / written:.2f} s per image' if written else ''
    timing = f' (model loaded in {load_seconds:.1f} s, restored in {seconds:.1f} s{per_image})' if summary.total > len(
        summary.skipped) else ''
    say(f'restored {summary.done} of {summary.total} image(s) into {settings.output}{timing}', sys.stdout)
    if summary.no_lines:
        say(
            f'not restored: {len(summary.no_lines)} photo(s) with no text line found, written as they were: '
            f'{_listing(summary.no_lines)}', sys.stdout)
    if summary.none_pasted:
        say(
            f'not restored: {len(summary.none_pasted)} photo(s) whose restored lines read less well (PP-OCRv4) or '
            f'changed colour, written as they were (--paste all puts them in): {_listing(summary.none_pasted)}',
            sys.stdout)
    if summary.skipped:
        say(
            f'skipped {len(summary.skipped)} image(s) whose output already exists ({_listing(summary.skipped)}); '
            f'--overwrite restores them again', sys.stdout)
    if summary.own_outputs:
        say(
            f'left out {len(summary.own_outputs)} file(s) of the input folder that are outputs of its other images '
            f'(written by an earlier run into it): {_listing(summary.own_outputs)}', sys.stdout)
    if scan.unsupported:
        say(f'left out {len(scan.unsupported)} file(s) that are not images ({", ".join(IMAGE_EXTENSIONS)}): '
            f'{_listing(scan.unsupported)}')
    if scan.folders:
        say(f'left out {len(scan.folders)} subfolder(s) named like images (a folder is not read without '
            f'--recursive): {_listing(scan.folders)}')
    if scan.unreadable:
        say(f'could not read {len(scan.unreadable)} subfolder(s); their images were not restored: '
            f'{_listing(scan.unreadable)}')
    if summary.failures:
        say(f'{len(summary.failures)} image(s) failed:')
        for failure in summary.failures:
            say(f'  {failure}')
    if summary.interrupted:
        left = summary.total - written - len(summary.skipped) - len(summary.failures)
        say(f'interrupted: {left} image(s) not restored; run the same command again to continue (the images '
            f'restored so far are kept and skipped)')
