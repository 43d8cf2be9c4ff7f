"""Screen real text images with the RT50 admission protocol (paper supp. "RT50 Construction") and
assemble the fixed set.

Candidates: --candidates TSV with a header naming at least ``filename`` and ``label`` (optional
``source``, ``difficulty`` = mild/medium/hard, assigned by the curator), images in --images. In file
order each candidate must pass: label = 2-8 Chinese characters, 3-12 English letters or 2-6 digits
(category from the label); size >= 24x8; aspect 2-10; on the 512x128 canonical gray image gray mean
in [20,235], gray std in [10,80], Laplacian variance in [2,1200], edge density in [0.01,0.65],
entropy >= 3.0; a transcription already admitted is rejected, and so is an image within dHash
Hamming distance 7 of an admitted one. All bounds are inclusive and are CLI options.

Selection: admitted candidates in file order fill the --composition quotas (and --difficulty quotas
when the column exists); IDs RT001.. follow that order. Outputs in --out: screening.tsv (every
candidate, every statistic, decision), images/RTxxx.png on the 512x128 canvas, labels.tsv (for
PairedTextDataset), manifest.tsv (ID, label, category, difficulty, source, statistics, dHash,
SHA-256 of source and canvas file). --screen-only stops after screening.tsv.

Example:
    tola-screen-rt50 --images raw/ --candidates raw/candidates.tsv --out data/RT50
"""
import argparse

from tola_cli.command import run_command
from tola_cli.defaults import RT50_DIFFICULTIES, RT50_LABEL_LENGTHS, RT50_THRESHOLDS


def parse_quota(text: str, allowed):
    quota = {}
    for part in text.split(','):
        name, _, value = part.partition('=')
        if name not in allowed or not value.isdigit():
            raise argparse.ArgumentTypeError(f'expected name=count with names from {list(allowed)}, got {part!r}')
        quota[name] = int(value)
    return quota


def parse_args(argv=None):
    t = RT50_THRESHOLDS
    p = argparse.ArgumentParser(prog='tola-screen-rt50', description=__doc__.split('\n\n')[0])
    p.add_argument('--images', required=True, help='folder of candidate images')
    p.add_argument('--candidates', required=True, help='TSV with header: filename, label[, source, difficulty]')
    p.add_argument('--out', required=True, help='output folder (must be empty or absent)')
    p.add_argument('--screen-only', action='store_true', help='write screening.tsv only, select nothing')
    p.add_argument('--composition', type=lambda s: parse_quota(s, RT50_LABEL_LENGTHS),
                   default={'chinese': 17, 'english': 17, 'numeric': 16}, help='[chinese=17,english=17,numeric=16]')
    p.add_argument('--difficulty', type=lambda s: parse_quota(s, RT50_DIFFICULTIES),
                   default={'mild': 10, 'medium': 20, 'hard': 20},
                   help='quotas used when the difficulty column exists [mild=10,medium=20,hard=20]')
    for category, (lo, hi) in RT50_LABEL_LENGTHS.items():
        p.add_argument(f'--{category}-len', type=int, nargs=2, default=[lo, hi], metavar=('LO', 'HI'),
                       help=f'{category} label length range, inclusive [{lo} {hi}]')
    p.add_argument('--min-width', type=int, default=t['min_width'])
    p.add_argument('--min-height', type=int, default=t['min_height'])
    for name in ('aspect', 'gray_mean', 'gray_std', 'laplacian_var', 'edge_density'):
        p.add_argument('--' + name.replace('_', '-'), type=float, nargs=2, default=list(t[name]), metavar=('LO', 'HI'),
                       help=f'inclusive range [{t[name][0]} {t[name][1]}]')
    p.add_argument('--min-entropy', type=float, default=t['min_entropy'], help=f'[{t["min_entropy"]}]')
    p.add_argument('--dhash-distance', type=int, default=t['dhash_distance'],
                   help=f'near duplicate when Hamming distance <= this [{t["dhash_distance"]}]')
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from tola_plugin.commands.data_preparation.rt50_screening import build_rt50
    lengths = {
        'chinese': tuple(args.chinese_len), 'english': tuple(args.english_len), 'numeric': tuple(args.numeric_len)
    }
    thresholds = {
        'min_width': args.min_width, 'min_height': args.min_height, 'aspect': tuple(args.aspect),
        'gray_mean': tuple(args.gray_mean), 'gray_std': tuple(args.gray_std),
        'laplacian_var': tuple(args.laplacian_var), 'edge_density': tuple(args.edge_density),
        'min_entropy': args.min_entropy
    }
    return build_rt50(args.images, args.candidates, args.out, args.composition, args.difficulty, lengths, thresholds,
                      args.dhash_distance, args.screen_only)


def cli(argv=None):
    run_command(main, parse_args, argv)


if __name__ == '__main__':
    cli()
