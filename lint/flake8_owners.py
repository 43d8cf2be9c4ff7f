"""flake8 plugin (setup.cfg ``[flake8:local-plugins]``): one owner per concept (docs/architecture.md, "Conventions"),
in the package (``tola_plugin/``), the lab (``tola_lab/``), the command lines (``tola_cli/``) and the repository's
tools (``tools/``). A copy of an owned concept anywhere else is flagged, so that a new one cannot appear unnoticed.
Written by hand: no published flake8 plugin knows this package's owners.

OWN001 float -> uint8 outside ``data/image_io.py`` (``to_uint8``, ``tensor_to_uint8``): an ``astype``/``to``/
       ``type`` to uint8 of a rounded or scaled value (``round``, ``rint``, ``* 255``, ``+ 0.5``), or BasicSR's
       ``tensor2img``.
OWN002 BGR <-> RGB by hand outside ``data/image_io.py`` (``convert_order``): ``x[..., ::-1]``, ``x[:, :, ::-1]``,
       ``cv2.COLOR_BGR2RGB`` / ``COLOR_RGB2BGR``.
OWN003 an image or figure file written or encoded outside ``data/image_io.py`` (``write_image``,
       ``write_pil_image``, ``write_figure``, ``jpeg_round_trip``): ``cv2.imwrite``, ``cv2.imencode``, BasicSR's
       ``imwrite``, ``savefig``, ``Image....save``.
OWN004 PSNR outside ``metrics/`` (``psnr_y8``, ``mean_psnr_y8``, ``float_psnr``, the pyiqa metric): ``log10``,
       BasicSR's ``calculate_psnr``.
OWN005 reading text with TransOCR outside ``ocr/`` (``read_text``, ``TransOCRRecognizer``): ``decode_transocr``
       called, a ``.recognize(...)`` call.
OWN006 speaking to the user outside ``utils/user_text.py`` (``say``): a ``print`` or traceback printed to
       ``sys.stderr``, ``sys.stderr.write``, ``traceback.print_exc`` / ``print_exception``, a function of its own
       named ``say`` or ``_say``, a module logger (``logging.getLogger(__name__)``).
OWN007 the precision choices written out outside ``archs/precision.py`` (``PRECISIONS``, ``precision_dtype``) and
       ``tola_cli/defaults.py`` (its mirror, checked by a test): a tuple, list or set literal holding both ``'bf16'``
       and ``'fp16'``, or a dict literal mapping them to torch dtypes.
OWN008 ``/proc`` read, or a PID's liveness tested, outside ``utils/procfs.py``: a string beginning with ``/proc``,
       ``os.kill(pid, 0)``.
OWN009 Algorithm 1's stages written out outside ``archs/stages.py`` (``STAGES``: names, labels, verbs): a tuple,
       list or set literal holding both VAE stages by name ('vae_encoder', 'vae_decoder') or by label ('VAE
       encode', 'VAE decode'), or a dict literal with both as values (per-stage data, keyed by stage, is not a copy).

``PENDING`` lists the files a code does not yet hold to, each with why; the list shrinks to nothing.
"""
import ast
import os

#: code -> (owner: a file or folder of tola_plugin, message)
OWNERS = {
    'OWN001': ('data/image_io.py', 'float -> uint8 by hand; use tola_plugin.data.image_io.to_uint8 / tensor_to_uint8'),
    'OWN002': ('data/image_io.py', 'BGR <-> RGB by hand; use tola_plugin.data.image_io.convert_order'),
    'OWN003': ('data/image_io.py', 'image or figure written outside data/image_io; use write_image, write_pil_image, '
               'write_figure (atomic) or jpeg_round_trip'),
    'OWN004': ('metrics/', 'PSNR outside metrics/; use tola_plugin.metrics.image_metrics psnr_y8 / mean_psnr_y8 / '
               'float_psnr'),
    'OWN005': ('ocr/', 'text read with TransOCR outside ocr/; use tola_plugin.ocr.transocr_recognizer.read_text'),
    'OWN006': ('utils/user_text.py', 'speaking to the user by hand; use tola_plugin.utils.user_text.say'),
    'OWN007': ('archs/precision.py', "the precision choices written out; use tola_plugin.archs.precision's PRECISIONS "
               '(tola_cli: tola_cli.defaults.PRECISIONS)'),
    'OWN008': ('utils/procfs.py', '/proc read or a PID tested by hand; use tola_plugin.utils.procfs'),
    'OWN009': ('archs/stages.py', "the stages written out; read tola_plugin.archs.stages' STAGES"),
}
#: code -> {file or folder of the package: why it does not hold to the code yet}
PENDING = {}
#: files outside the package that may hold a copy: the command lines' mirror of the package's choices (a test checks it)
MIRRORS = {'OWN007': ('tola_cli', 'defaults.py')}
CHECKED = ('tola_plugin', 'tola_lab', 'tola_cli', 'tools')
ROUNDING = ('round', 'rint', 'around')
SWAP_FLAGS = ('COLOR_BGR2RGB', 'COLOR_RGB2BGR')


def place(filename: str):
    """(top folder, path inside it) of a checked file, e.g. ('tola_plugin', 'data/image_io.py'); None elsewhere."""
    parts = os.path.normpath(os.path.abspath(filename)).replace(os.sep, '/').split('/')
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in CHECKED:
            return parts[i], '/'.join(parts[i + 1:])
    return None


def _name(node: ast.AST) -> str:
    """The last name of ``x``, ``a.x`` or ``a.b.x``; '' for anything else."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ''


def _is_uint8(node: ast.AST) -> bool:
    return _name(node) == 'uint8' or (isinstance(node, ast.Constant) and node.value == 'uint8')


def _constant(node: ast.AST, values) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value in values


def _rounds_or_scales(node: ast.AST) -> bool:
    """Whether ``node`` rounds (round, rint, around) or scales to 8 bits (* 255, + 0.5) anywhere inside."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _name(sub.func) in ROUNDING:
            return True
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Mult) and (_constant(sub.left, (255, ))
                                                                            or _constant(sub.right, (255, ))):
            return True
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Add) and (_constant(sub.left, (0.5, ))
                                                                           or _constant(sub.right, (0.5, ))):
            return True
    return False


def _full_slice(node: ast.AST) -> bool:
    return isinstance(node, ast.Slice) and node.lower is None and node.upper is None and node.step is None


def _reversed(node: ast.AST) -> bool:
    step = node.step if isinstance(node, ast.Slice) else None
    return (isinstance(node, ast.Slice) and node.lower is None and node.upper is None and isinstance(step, ast.UnaryOp)
            and isinstance(step.op, ast.USub) and _constant(step.operand, (1, )))


def _channel_swap(node: ast.Subscript) -> bool:
    """``x[..., ::-1]`` or ``x[:, :, ::-1]`` (the last axis reversed behind an ellipsis or two full slices)."""
    index = node.slice
    if not isinstance(index, ast.Tuple) or len(index.elts) < 2 or not _reversed(index.elts[-1]):
        return False
    first = index.elts[:-1]
    return (len(first) == 1 and isinstance(first[0], ast.Constant) and first[0].value is Ellipsis) or \
        (len(first) >= 2 and all(_full_slice(e) for e in first))


def _pil_save(call: ast.Call) -> bool:
    """``Image.<...>(...).save(...)``: a save on an expression built from PIL's ``Image``."""
    return isinstance(call.func, ast.Attribute) and call.func.attr == 'save' and any(
        isinstance(n, ast.Name) and n.id == 'Image' for n in ast.walk(call.func.value))


def _is_stderr(node: ast.AST) -> bool:
    """``sys.stderr``."""
    return isinstance(node, ast.Attribute) and node.attr == 'stderr' and _name(node.value) == 'sys'


def _speaks(call: ast.Call) -> bool:
    """A print (or a printed traceback) to stderr, ``sys.stderr.write``, ``traceback.print_exc``/``print_exception``,
    ``logging.getLogger(__name__)``."""
    name = _name(call.func)
    if name in ('print_exc', 'print_exception') and _name(getattr(call.func, 'value', None)) == 'traceback':
        return True
    if name == 'write' and isinstance(call.func, ast.Attribute) and _is_stderr(call.func.value):
        return True
    if name == 'getLogger' and any(isinstance(a, ast.Name) and a.id == '__name__' for a in call.args):
        return True
    return name == 'print' and any(k.arg == 'file' and _is_stderr(k.value) for k in call.keywords)


def _precision_choices(node: ast.AST) -> bool:
    """A tuple, list or set literal holding both 'bf16' and 'fp16', or a dict literal mapping them to torch dtypes
    (per-precision data, such as a bound for each, is not a copy of the choices)."""
    if isinstance(node, ast.Dict):
        items = [k for k, v in zip(node.keys, node.values) if _name(v) in ('bfloat16', 'float16', 'half')]
    else:
        items = node.elts
    values = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
    return {'bf16', 'fp16'} <= values


def _stage_list(node: ast.AST) -> bool:
    """A literal holding both VAE stages, by name or by label (its values, for a dict)."""
    items = node.values if isinstance(node, ast.Dict) else node.elts
    values = {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}
    return {'vae_encoder', 'vae_decoder'} <= values or {'VAE encode', 'VAE decode'} <= values


def findings(tree: ast.AST):
    """(line, column, code) of every copy of an owned concept in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ('say', '_say'):
            yield node.lineno, node.col_offset, 'OWN006'
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and _precision_choices(node):
            yield node.lineno, node.col_offset, 'OWN007'
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) and _stage_list(node):
            yield node.lineno, node.col_offset, 'OWN009'
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (node.value == '/proc'
                                                                                 or node.value.startswith('/proc/')):
            yield node.lineno, node.col_offset, 'OWN008'
        if isinstance(node, ast.Call) and (_speaks(node)):
            yield node.lineno, node.col_offset, 'OWN006'
        if isinstance(node, ast.Call) and _name(node.func) == 'kill' and len(node.args) == 2 and _constant(
                node.args[1], (0, )):
            yield node.lineno, node.col_offset, 'OWN008'
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                code = {'tensor2img': 'OWN001', 'imwrite': 'OWN003', 'calculate_psnr': 'OWN004'}.get(alias.name)
                if code:
                    yield node.lineno, node.col_offset, code
        elif isinstance(node, ast.Subscript) and _channel_swap(node):
            yield node.lineno, node.col_offset, 'OWN002'
        elif isinstance(node, ast.Attribute) and node.attr in SWAP_FLAGS:
            yield node.lineno, node.col_offset, 'OWN002'
        elif isinstance(node, ast.Call):
            name = _name(node.func)
            converts = name in ('astype', 'to', 'type') and isinstance(node.func, ast.Attribute) and (any(
                _is_uint8(a) for a in node.args) or any(_is_uint8(k.value) for k in node.keywords))
            if converts and _rounds_or_scales(node.func.value):
                yield node.lineno, node.col_offset, 'OWN001'
            elif name == 'tensor2img':
                yield node.lineno, node.col_offset, 'OWN001'
            elif name in ('imwrite', 'imencode', 'savefig') or _pil_save(node):
                yield node.lineno, node.col_offset, 'OWN003'
            elif name in ('log10', 'calculate_psnr'):
                yield node.lineno, node.col_offset, 'OWN004'
            elif name in ('decode_transocr', 'recognize') and isinstance(node.func, (ast.Name, ast.Attribute)):
                yield node.lineno, node.col_offset, 'OWN005'


def _within(path: str, place: str) -> bool:
    """Whether ``path`` is the file ``place`` or lies in the folder ``place``."""
    return path == place if place.endswith('.py') else path.startswith(place)


def owned_by(code: str, top: str, path: str) -> bool:
    """Whether the file ``top``/``path`` may hold ``code``'s concept: its owner, a mirror, or a file pending."""
    if (top, path) == MIRRORS.get(code):
        return True
    return top == 'tola_plugin' and (_within(path, OWNERS[code][0])
                                     or any(_within(path, place) for place in PENDING.get(code, {})))


class Owners:
    name = 'tola-owners'
    version = '2'

    def __init__(self, tree: ast.AST, filename: str):
        self.tree = tree
        self.filename = filename

    def run(self):
        where = place(self.filename)
        if where is None:
            return
        for line, col, code in findings(self.tree):
            if not owned_by(code, *where):
                yield line, col, f'{code} {OWNERS[code][1]} (owner: tola_plugin/{OWNERS[code][0]})', type(self)
