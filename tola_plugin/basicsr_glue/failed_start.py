"""A start that fails leaves nothing behind: BasicSR's pipelines make ``experiments/<name>/`` (``results/<name>/`` for
the test launcher) and ``tb_logger/<name>/`` before they build the datasets and the model, so a mistyped dataroot or a
missing checkpoint used to leave those folders (and ``experiments/``, ``tb_logger/`` themselves) in the user's folder.

``begin`` (called by ``option_parsing.read_options`` once the options are known, rank 0) notes which of the run's
folders do not exist yet; ``started`` (called by the launchers once the model is built: ``launchers.build_model``)
marks the start done; ``clean_up`` (the launchers' error paths) removes, when the start was not done, each noted
folder the run made, and each parent it made that is empty again. A folder that existed before the run (a resume, or
one BasicSR archives) is never touched."""
import os
import shutil
from typing import List, Mapping, Optional


class _Start:
    """The folders of the current run that did not exist before it (leaf first, then the parents it would make)."""

    def __init__(self):
        self.made: List[List[str]] = []
        self.done = True  # no run begun: nothing to clean


START = _Start()


def run_folders(opt: Mapping, is_train: bool) -> List[str]:
    """The folders a BasicSR pipeline makes for ``opt``: the experiment (or results) root, and for a training run
    with ``logger.use_tb_logger`` its ``tb_logger/<name>`` (BasicSR's condition: not for names containing 'debug')."""
    path = opt.get('path') or {}
    folders = [path.get('experiments_root' if is_train else 'results_root')]
    logger = opt.get('logger') or {}
    if is_train and logger.get('use_tb_logger') and 'debug' not in str(opt.get('name')) and opt.get('root_path'):
        folders.append(os.path.join(opt['root_path'], 'tb_logger', str(opt['name'])))
    return [os.path.abspath(f) for f in folders if f]


def _missing_chain(folder: str) -> List[str]:
    """``folder`` and its ancestors that do not exist, deepest first (empty when ``folder`` exists)."""
    chain = []
    while folder and not os.path.lexists(folder):
        chain.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return chain


def reset() -> None:
    """No run begun (a launcher calls it before its pipeline: an earlier run's notes never apply to this one)."""
    START.made, START.done = [], True


def begin(opt: Mapping, is_train: bool, root_path: Optional[str] = None) -> None:
    """Note the run's folders that do not exist yet (``root_path``: where BasicSR puts tb_logger/, the launcher's
    root)."""
    opt = dict(opt, root_path=root_path or opt.get('root_path'))
    START.made = [_missing_chain(folder) for folder in run_folders(opt, is_train)]
    START.done = False


def started() -> None:
    """The start is done (the model is built): from now on the run's folders hold its log and outputs."""
    START.done = True


def clean_up() -> List[str]:
    """After an error: when the start was not done, remove the noted folders the run made (the leaf with its
    contents, its new parents only while empty). -> the folders removed."""
    removed = []
    if not START.done:
        for chain in START.made:
            if chain and os.path.isdir(chain[0]):
                shutil.rmtree(chain[0], ignore_errors=True)
                removed.append(chain[0])
            for parent in chain[1:]:
                try:
                    os.rmdir(parent)  # only when empty: another run may have started there meanwhile
                except OSError:
                    break
                removed.append(parent)
    reset()
    return removed
