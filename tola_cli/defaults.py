"""Every default and choice the command lines' parsers show, in one place: the package's, repeated here so that
parsing (and ``--help``) imports nothing of the package, and the few that belong to a command line alone (below
``SOURCES``). ``SOURCES`` names where each of the package's lives; tests/test_cli_fast_help.py checks that every
value here equals it."""

TEXT_CATEGORIES = ('chinese', 'english', 'digits', 'mixed')
TEXT_CATEGORY_PROBS = (0.4, 0.2, 0.2, 0.2)
DIFFTSR_COMPONENTS = ('idm', 'vae', 'mom')
RECOGNIZER_PREFIXES = ('transocr', 'ppocrv4')
BOOTSTRAP_RESAMPLES = 5000
GPU_CAPACITIES_GB = (24, 40, 48, 80, 96)
GPU_RESERVE = 0.1
MAX_PIXELS = 64_000_000
WHITE = (255, 255, 255)
ALL_METRICS = ('psnr', 'ssim', 'lpips', 'dists', 'fid', 'transocr', 'ppocrv4')
COLOR_SPACE = 'ycbcr'
LUMA_COLOR_SPACES = ('ycbcr', 'yiq')
RT50_LABEL_LENGTHS = {'chinese': (2, 8), 'english': (3, 12), 'numeric': (2, 6)}
RT50_THRESHOLDS = {
    'min_width': 24, 'min_height': 8, 'aspect': (2.0, 10.0), 'gray_mean': (20.0, 235.0), 'gray_std': (10.0, 80.0),
    'laplacian_var': (2.0, 1200.0), 'edge_density': (0.01, 0.65), 'min_entropy': 3.0, 'dhash_distance': 7
}
RT50_DIFFICULTIES = ('mild', 'medium', 'hard')
COLOR_FIXES = ('none', 'wavelet', 'luma', 'adain')
DEFAULT_COLOR_FIX = 'luma'
PASTE_POLICIES = ('checked', 'all')
IMAGE_KINDS = ('auto', 'line', 'photo')
PRECISIONS = ('fp32', 'bf16', 'fp16', 'auto')
BACKENDS = ('auto', 'openvino', 'torch')
MAX_WINDOWS = 256
MAX_OUTPUT_PIXELS = 100_000_000
OVERLAP = 128
PAD_MODES = ('edge', 'reflect')
SEED = 0
UPLOAD_MAX_MEGAPIXELS = 4.0
UPLOAD_MAX_MB = 20.0
STORED_UPLOADS_MAX_MB = 200.0
WEB_HOST = '127.0.0.1'

#: name here -> (module, attribute) of the package, or (module, callable, parameter): that parameter's default; a
#: dict there is compared by its keys where this is a tuple
SOURCES = {
    'TEXT_CATEGORIES': ('tola_plugin.data.text_render', 'CATEGORIES'),
    'TEXT_CATEGORY_PROBS': ('tola_plugin.data.text_render', 'DEFAULT_CATEGORY_PROBS'),
    'DIFFTSR_COMPONENTS': ('tola_plugin.checkpoints.difftsr', 'COMPONENTS'),
    'RECOGNIZER_PREFIXES': ('tola_plugin.commands.evaluation.records', 'PREFIX'),
    'BOOTSTRAP_RESAMPLES': ('tola_plugin.commands.evaluation.statistics', 'N_RESAMPLES'),
    'GPU_CAPACITIES_GB': ('tola_plugin.commands.estimate_memory', 'CAPACITIES_GB'),
    'GPU_RESERVE': ('tola_plugin.commands.estimate_memory', 'RESERVE'),
    'MAX_PIXELS': ('tola_plugin.data.image_io', 'DEFAULT_MAX_PIXELS'),
    'WHITE': ('tola_plugin.data.image_io', 'WHITE'),
    'ALL_METRICS': ('tola_plugin.commands.evaluation.runner', 'ALL_METRICS'),
    'COLOR_SPACE': ('tola_plugin.metrics.image_metrics', 'DEFAULT_COLOR_SPACE'),
    'LUMA_COLOR_SPACES': ('tola_plugin.metrics.image_metrics', 'LUMA_COLOR_SPACES'),
    'RT50_LABEL_LENGTHS': ('tola_plugin.commands.data_preparation.image_checks', 'RT50_LABEL_LENGTHS'),
    'RT50_THRESHOLDS': ('tola_plugin.commands.data_preparation.image_checks', 'RT50_THRESHOLDS'),
    'RT50_DIFFICULTIES': ('tola_plugin.commands.data_preparation.rt50_screening', 'DIFFICULTIES'),
    'COLOR_FIXES': ('tola_plugin.inference.color_fix', 'COLOR_FIXES'),
    'DEFAULT_COLOR_FIX': ('tola_plugin.inference.pipeline', 'DEFAULT_COLOR_FIX'),
    'PASTE_POLICIES': ('tola_plugin.inference.pipeline', 'PASTE_POLICIES'),
    'IMAGE_KINDS': ('tola_plugin.inference.image_kind', 'KINDS'),
    'PRECISIONS': ('tola_plugin.archs.precision', 'PRECISIONS'),
    'BACKENDS': ('tola_plugin.runtime.plan', 'BACKENDS'),
    'MAX_WINDOWS': ('tola_plugin.inference.work_bounds', 'DEFAULT_MAX_WINDOWS'),
    'MAX_OUTPUT_PIXELS': ('tola_plugin.inference.work_bounds', 'DEFAULT_MAX_OUTPUT_PIXELS'),
    'OVERLAP': ('tola_plugin.inference.pipeline', 'TOLAPipeline', 'overlap'),
    'PAD_MODES': ('tola_plugin.inference.line_geometry', 'PAD_MODES'),
    'SEED': ('tola_plugin.inference.folder_run', 'restore_folder', 'seed'),
    'UPLOAD_MAX_MEGAPIXELS': ('tola_plugin.web.page', 'UPLOAD_MAX_MEGAPIXELS'),
    'UPLOAD_MAX_MB': ('tola_plugin.web.http_bounds', 'UPLOAD_MAX_MB'),
    'STORED_UPLOADS_MAX_MB': ('tola_plugin.web.uploads', 'STORED_UPLOADS_MAX_MB'),
    'WEB_HOST': ('tola_plugin.web.server', 'serve', 'host'),
}

# The command lines' own: tola-infer's output folder, tola-web's port (Gradio's usual one; the library's ``serve``
# takes any free port unless told)
INFER_OUTPUT = 'results/tola_infer'
WEB_PORT = 7860
