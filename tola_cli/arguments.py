"""Argument types shared by the command lines (light: importing it loads nothing of the package, so --help is fast)."""
import argparse
import socket


def shown(value) -> str:
    """A number as an error shows it (``short_number``: 1e+300, not 301 digits); the package is imported on the
    error path only."""
    from tola_plugin.data.image_io import short_number
    return short_number(value)


def safetensors_path(text: str) -> str:
    """A path ending with .safetensors (the files the converting and exporting tools write), else an argparse
    error saying so."""
    if not text.endswith('.safetensors'):
        raise argparse.ArgumentTypeError(f'expected a file name ending with .safetensors, got {text!r}')
    return text


def rgb_triple(text: str):
    """'R,G,B' with three integers in [0, 255] -> (r, g, b); otherwise an argparse error saying what was expected."""
    try:
        values = tuple(int(p) for p in text.split(','))
    except ValueError:
        values = ()
    if len(values) != 3 or not all(0 <= v <= 255 for v in values):
        raise argparse.ArgumentTypeError(f'expected R,G,B with three integers in [0, 255], got {text!r}')
    return values


LAUNCHER_EPILOG = """\
--force_yml takes BasicSR's KEY:SUBKEY=VALUE (train:ema_decay=0.999; the value is all after the first '='; ~ is
null; a list is read as YAML), checked as the option file's values are, and:
  short_run=N                      N iterations, at most 2 lines per batch, no loader workers, a loss line every
                                   iteration, the schedule shrunk to fit: a first look on a CPU (training files)
  val:metrics:NAME=~               remove the validation metric NAME (e.g. val:metrics:lpips=~, without its file)
  network_g:backbone_init=demo     the demo backbone shipped with the package (no official weights needed)
  path:pretrain_network_g=demo     start from the demo model's adaptation (with backbone_init=demo)
  train:ocr_recognizer=demo        the demo backbone's TransOCR for the OCR loss of the text-aware models
A weight file a run needs and lacks stops it at start, naming the file, where it comes from and the override that
runs without it. docs/own_data.md walks through a project of one's own; README "Writing an option file".
"""


def launcher_parser(prog: str, training: bool) -> argparse.ArgumentParser:
    """The command line of BasicSR's launchers with the plugin (tola-train, tola-test), for --help and usage errors:
    the launchers' parser (``basicsr_glue.option_parsing.command_line``, BasicSR's arguments) reads them again when the
    run starts (its flags, ours in the epilog)."""
    what = 'train with BasicSR\'s training pipeline' if training else 'test with BasicSR\'s test pipeline'
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter, epilog=LAUNCHER_EPILOG,
        description=f'{prog}: {what}, the plugin registered (python -m tola_plugin.{"train" if training else "test"} '
        f'and python -m basicsr.{"train" if training else "test"} are the same command). Outputs go under the current '
        f'folder: {"experiments/, tb_logger/" if training else "results/"}.')
    parser.add_argument('-opt', required=True, help='option file (YAML; options/ has ours)')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm'], default='none',
                        help='job launcher (pytorch: under torchrun; slurm: under srun)')
    if training:
        parser.add_argument('--auto_resume', action='store_true',
                            help="resume from the experiment's newest complete training state")
    parser.add_argument('--debug', action='store_true', help="BasicSR's debug mode; also shows a traceback on error")
    parser.add_argument('--local_rank', type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument('--force_yml', nargs='+', metavar='KEY:SUBKEY=VALUE',
                        help='change values of the option file (below)')
    return parser


def listen_host(text: str) -> str:
    """A name or address of this machine to listen on, else an argparse error saying why: resolved and bound (port
    0) now, so a name that does not resolve or another machine's address is said at once, not as a library's
    ``[Errno -2]`` after the model has loaded."""
    expected = 'expected a name or address of this machine: 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)'
    try:
        family, kind, proto, _, address = socket.getaddrinfo(text, 0, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as err:
        raise argparse.ArgumentTypeError(f'{text!r} does not resolve ({getattr(err, "strerror", None) or err}); '
                                         f'{expected}') from None
    with socket.socket(family, kind, proto) as probe:
        try:
            probe.bind(address)
        except OSError as err:
            raise argparse.ArgumentTypeError(f'{text!r} ({address[0]}) cannot be listened on here ({err.strerror}); '
                                             f'{expected}') from None
    return text
