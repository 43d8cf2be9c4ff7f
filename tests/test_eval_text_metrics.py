"""ACC/NED, normalization, edit operations, categories and confidence bins: hand-computed answers and the
CTR benchmark's published TransOCR scores."""
import gzip
import os
import re

import pytest

from tola_plugin.commands.evaluation.diagnostics import CONFIDENCE_BINS, confidence_bin, text_category
from tola_plugin.metrics.text_metrics import EditOps, edit_distance, edit_operations, ned, normalize, recognition_scores

# FudanVI's published TransOCR predictions (tests/data/eval/ctr_benchmark/README.md; web gzipped here).
BENCHMARK = os.path.join(os.path.dirname(__file__), 'data', 'eval', 'ctr_benchmark')
LINE = re.compile(r'^(\d+) \[(.*)\] \[(.*)\]$')


def read_predictions(path):
    opener = gzip.open if path.endswith('.gz') else open
    preds, gts = [], []
    with opener(path, 'rt', encoding='utf-8') as f:
        for line in f:
            m = LINE.match(line.rstrip('\n'))
            assert m, f'unparsable line {line!r}'
            preds.append(m.group(2))
            gts.append(m.group(3))
    return preds, gts


@pytest.mark.parametrize(
    'pred,gt,expected',
    [
        ('abc', 'abc', 1.0),
        ('abd', 'abc', 1 - 1 / 3),
        ('ab', 'abcd', 0.5),  # two deletions over max length 4
        ('abcdef', 'abc', 0.5),  # three insertions over 6
        ('', '', 1.0),  # max(|p|,|g|,1) = 1 and ED = 0
        ('x', '', 0.0),
        ('', '文字', 0.0),
        ('文学识别', '文字识别', 0.75),
    ])
def test_ned_hand_cases(pred, gt, expected):
    assert ned(pred, gt) == pytest.approx(expected)


@pytest.mark.parametrize(
    'pred,gt,ops',
    [
        ('abxde', 'abcd', EditOps(1, 0, 1)),  # c->x substituted, e inserted
        ('ac', 'abc', EditOps(0, 1, 0)),  # b deleted
        ('abc', 'abc', EditOps(0, 0, 0)),
        ('', 'abc', EditOps(0, 3, 0)),
        ('xyz', '', EditOps(0, 0, 3)),
        ('北京', '南京市', EditOps(1, 1, 0)),
    ])
def test_edit_operations_sum_to_edit_distance(pred, gt, ops):
    got = edit_operations(pred, gt)
    assert got == ops
    assert got.total == edit_distance(pred, gt)


def test_normalization_is_the_papers():
    assert normalize('ＡＢＣ１２３') == 'ABC123'  # full-width -> half-width
    assert normalize('漢字　識別') == '汉字识别'  # traditional -> simplified, ideographic space
    assert normalize(' Hello\tWorld \n') == 'HelloWorld'  # whitespace removed, case kept
    assert normalize('Hello World', lower=True) == 'helloworld'  # CTR benchmark variant


def test_acc_is_exact_match_after_normalization_case_preserved():
    preds = ['HELLO', 'hello', '漢字', 'abc']
    gts = ['hello', 'hello', '汉字', 'abd']
    paper = recognition_scores(preds, gts)
    assert paper['acc'] == pytest.approx(2 / 4)
    assert paper['ned'] == pytest.approx((0 + 1 + 1 + 2 / 3) / 4)  # 'HELLO' vs 'hello': 5 substitutions
    assert recognition_scores(preds, gts, lower=True)['acc'] == pytest.approx(3 / 4)
    with pytest.raises(ValueError):
        recognition_scores(['a'], ['a', 'b'])


@pytest.mark.parametrize('name,acc_percent,ned3,ned4', [
    ('TransOCR_web.txt.gz', 62.74, 0.782, 0.7822),
    ('TransOCR_scene.txt.gz', 67.81, 0.817, 0.8173),
])
def test_ctr_benchmark_published_scores(name, acc_percent, ned3, ned4):
    """FudanVI's TransOCR predictions reproduce the benchmark README table with the lower-case variant."""
    path = os.path.join(BENCHMARK, name)
    preds, gts = read_predictions(path)
    scores = recognition_scores(preds, gts, lower=True)
    assert round(100 * scores['acc'], 2) == acc_percent
    assert round(scores['ned'], 3) == ned3
    assert round(scores['ned'], 4) == ned4


@pytest.mark.parametrize('text,category', [
    ('汉字识别', 'Chinese'),
    ('2号楼', 'Chinese'),
    ('北京-123', 'Chinese'),
    ('hello', 'English'),
    ("golden's", 'English'),
    ('A4', 'English'),
    ('KFC肯德基', 'Mixed'),
    ('T恤', 'Mixed'),
    ('12345', 'Num./Other'),
    ('¥8.50', 'Num./Other'),
    ('', 'Num./Other'),
])
def test_text_categories(text, category):
    assert text_category(text) == category


def test_confidence_bins_edges():
    assert CONFIDENCE_BINS == ('[0,.25)', '[.25,.50)', '[.50,.75)', '[.75,1]')
    assert [confidence_bin(c) for c in (0.0, 0.2499, 0.25, 0.4999, 0.5, 0.74, 0.75, 0.99, 1.0)] == \
        [0, 0, 1, 1, 2, 2, 3, 3, 3]
    with pytest.raises(ValueError):
        confidence_bin(1.01)
