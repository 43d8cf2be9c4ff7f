"""Which keys an option file may hold, block by block, for every BasicSR model (BasicSR 1.4.2's own, ours, and any a
user registers): the known keys of the strict option check (``options/checks.py``).

BasicSR's models read their options where they use them; the keys each of BasicSR 1.4.2's models reads are listed
here (``BASICSR_MODEL_KEYS``; ``tests/test_options_reader.py::test_the_schema_covers_every_key_basicsr_reads``
reads BasicSR's sources and checks that nothing is missing). A registered model declares the keys it reads **in
addition to its base classes'** as class attributes, next to the code that reads them::

    @MODEL_REGISTRY.register()
    class TextSRModel(SRModel):
        train_option_keys = {'ocr_opt'}        # train.ocr_opt, besides SRModel's pixel_opt, perceptual_opt, ...
        val_option_keys = {'ocr_metrics'}      # val.*
        top_option_keys = {'recognizer'}       # top-level keys of the option file

The keys of a model are the union over its classes (``__mro__``), so a subclass of SRModel declares only what it
adds. A model that declares nothing gets exactly its base classes' keys; a key it reads without declaring it is an
error at start, whose message says how to declare it.
"""
from typing import Dict, FrozenSet, Iterable, Mapping

BLOCKS = ('top', 'train', 'val')

# Read by BasicSR's pipelines (basicsr/train.py, test.py, utils/options.py, utils/misc.py) for every model, and by
# this plugin (basicsr_glue/: allow_tf32, deterministic, dist_params).
PIPELINE_KEYS = {
    'top': frozenset({
        'name', 'model_type', 'scale', 'num_gpu', 'manual_seed', 'datasets', 'path', 'train', 'val', 'logger',
        'dist_params', 'find_unused_parameters', 'allow_tf32', 'deterministic'
    }),
    'train': frozenset({'total_iter', 'warmup_iter'}),
    'val': frozenset({'val_freq', 'save_img'}),
}
# Set by BasicSR's parse_options / train_pipeline: accepted at the top level (never needed in a file).
COMPUTED_TOP_KEYS = frozenset({'dist', 'rank', 'world_size', 'auto_resume', 'is_train', 'root_path'})
LOGGER_KEYS = frozenset({'print_freq', 'save_checkpoint_freq', 'use_tb_logger', 'wandb'})
WANDB_KEYS = frozenset({'project', 'resume_id'})
# ``path``: these, plus pretrain_network_<x>, param_key_<x> and strict_load_<x> for each network_<x> of the file.
PATH_KEYS = frozenset({'resume_state', 'ignore_resume_networks'})
COMPUTED_PATH_KEYS = frozenset(
    {'experiments_root', 'models', 'training_states', 'log', 'visualization', 'results_root'})
PER_NETWORK_PATH_KEYS = ('pretrain_network_{}', 'param_key_{}', 'strict_load_{}')
METRIC_KEYS = frozenset({'type', 'better'})  # plus the metric function's own arguments (not img, img2)

_GAN = {'gan_opt', 'optim_d', 'net_d_iters', 'net_d_init_iters'}
_REAL_ESRGAN_DEGRADATION = {
    'queue_size', 'high_order_degradation', 'gt_usm', 'gt_size', 'resize_prob', 'resize_range', 'gaussian_noise_prob',
    'noise_range', 'poisson_scale_range', 'gray_noise_prob', 'jpeg_range', 'second_blur_prob', 'resize_prob2',
    'resize_range2', 'gaussian_noise_prob2', 'noise_range2', 'poisson_scale_range2', 'gray_noise_prob2', 'jpeg_range2'
}

#: BasicSR 1.4.2's models (by module and class name): the keys each class reads beyond its base classes'.
BASICSR_MODEL_KEYS: Dict[str, Dict[str, FrozenSet[str]]] = {
    'basicsr.models.base_model.BaseModel': {
        'train': frozenset({'scheduler'}),
        'val': frozenset({'metrics'}),
    },
    'basicsr.models.sr_model.SRModel': {
        'train': frozenset({'ema_decay', 'pixel_opt', 'perceptual_opt', 'optim_g'}),
        'val': frozenset({'pbar', 'suffix'}),
    },
    'basicsr.models.srgan_model.SRGANModel': {'train': frozenset(_GAN | {'ldl_opt'})},
    'basicsr.models.esrgan_model.ESRGANModel': {},
    'basicsr.models.swinir_model.SwinIRModel': {},
    'basicsr.models.hifacegan_model.HiFaceGANModel': {'train': frozenset(_GAN | {'feature_matching_opt'})},
    'basicsr.models.video_base_model.VideoBaseModel': {},
    'basicsr.models.edvr_model.EDVRModel': {'train': frozenset({'tsa_iter', 'dcn_lr_mul'})},
    'basicsr.models.video_gan_model.VideoGANModel': {},
    'basicsr.models.video_recurrent_model.VideoRecurrentModel': {
        'train': frozenset({'fix_flow', 'flow_lr_mul'}),
        'val': frozenset({'flip_seq', 'center_frame_only'}),
    },
    'basicsr.models.video_recurrent_gan_model.VideoRecurrentGANModel': {'train': frozenset(_GAN | {'lr_flow'})},
    'basicsr.models.stylegan2_model.StyleGAN2Model': {
        'train': frozenset({
            'gan_opt', 'optim_g', 'optim_d', 'r1_reg_weight', 'path_reg_weight', 'net_g_reg_every', 'net_d_reg_every',
            'mixing_prob', 'path_batch_shrink'
        }),
        'val': frozenset({'num_val_samples'}),
    },
    'basicsr.models.realesrnet_model.RealESRNetModel': {'top': frozenset(_REAL_ESRGAN_DEGRADATION)},
    'basicsr.models.realesrgan_model.RealESRGANModel': {
        'top': frozenset(_REAL_ESRGAN_DEGRADATION | {'l1_gt_usm', 'percep_gt_usm', 'gan_gt_usm'})
    },
}


def _class_name(cls) -> str:
    return f'{cls.__module__}.{cls.__qualname__}'


def declared_keys(cls, block: str):
    """The keys class ``cls`` itself (not its bases) declares for ``block``, or None when it declares none at all
    (neither in BASICSR_MODEL_KEYS nor as ``<block>_option_keys`` attributes)."""
    listed = BASICSR_MODEL_KEYS.get(_class_name(cls))
    if listed is not None:
        return set(listed.get(block, ()))
    own = [name for name in (f'{b}_option_keys' for b in BLOCKS) if name in vars(cls)]
    if not own:
        return None
    return set(vars(cls).get(f'{block}_option_keys', ()))


def model_keys(model_cls, block: str) -> FrozenSet[str]:
    """Every key ``block`` ('top', 'train' or 'val') of an option file may hold for the model ``model_cls``: the
    pipeline's and each of its classes' (declared keys, union over the MRO)."""
    keys = set(PIPELINE_KEYS[block])
    for cls in model_cls.__mro__:
        keys |= declared_keys(cls, block) or set()
    return frozenset(keys)


def undeclared_classes(model_cls) -> Iterable[str]:
    """Names of the classes of ``model_cls`` (its MRO, ``object`` aside) that declare no option keys at all."""
    return [cls.__name__ for cls in model_cls.__mro__ if cls is not object and declared_keys(cls, 'train') is None]


def path_keys(opt: Mapping) -> FrozenSet[str]:
    """Keys ``path`` may hold in ``opt``: the general ones, and per network ``network_<x>`` of the file its
    pretrained file, parameter key and strictness."""
    keys = set(PATH_KEYS | COMPUTED_PATH_KEYS)
    for key in opt:
        if key.startswith('network_'):
            keys.update(pattern.format(key[len('network_'):]) for pattern in PER_NETWORK_PATH_KEYS)
    return frozenset(keys)
