"""The BasicSR glue's ``load_resume_state`` (BasicSR's train launcher). Upstream calls ``torch.cuda.current_device()``
(fails on the CPU), looks CWD-relative for states, loads with pickles allowed and takes the newest file even when it is
truncated. Here states are read weights-only and, with ``--auto_resume``, an incomplete or corrupt newest state (or one
without its network file) is skipped for the newest complete one, with a warning naming each skipped file; in a
distributed run rank 0 decides and every rank checks it can read that file (``training_resume.agreed_resume_state``).
The launchers get it from ``launchers``."""
from basicsr.utils import check_resume

from tola_plugin.basicsr_glue.training_resume import agreed_resume_state, warn_early
from tola_plugin.utils import cuda_math


def load_resume_state(opt):
    """The training state a run resumes from (None for a fresh run). States are read on the CPU (the optimizers
    move their state to the parameters' device when loading it). Called right after ``train_pipeline`` set
    ``cudnn.benchmark = True``: the ``deterministic`` option is applied again first."""
    cuda_math.apply_options(opt)
    if not opt['auto_resume'] and not opt['path'].get('resume_state'):
        return None
    path, state = agreed_resume_state(opt, warn_early)  # rank 0 decides, every rank checks it has that file
    if path is None:
        return None
    opt['path']['resume_state'] = path
    check_resume(opt, state['iter'])
    return state
