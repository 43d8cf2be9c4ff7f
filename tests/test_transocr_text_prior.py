"""Text prior: DiffTSR's post-processing quirks and TOLA's confidence alignment, on crafted ids/probs."""
import pytest
import torch

from tola_plugin.text.alphabets import IDM_PAD, TRANSOCR_END, decode_idm, encode_idm, idm_char_index, transocr_classes
from tola_plugin.text.text_prior import difftsr_prediction_text, transocr_to_idm

CLASSES = transocr_classes()
INDEX = {c: i for i, c in enumerate(CLASSES) if 0 < i < TRANSOCR_END}
START, END = 0, TRANSOCR_END


def ids_of(text):
    return [INDEX[c] for c in text]


def run(tokens, probs=None, steps=24):
    """One crafted row, padded to ``steps`` with 'z' (never reached after END)."""
    row = (tokens + ids_of('z') * steps)[:steps]
    if probs is None:
        probs = [0.5 + 0.01 * i for i in range(steps)]  # step i has probability 0.5 + 0.01 i
    ids, prob = torch.tensor([row]), torch.tensor([probs], dtype=torch.float32)
    out_ids, out_conf = transocr_to_idm(ids, prob)
    return out_ids[0].tolist(), out_conf[0].tolist()


def step_prob(i):
    return pytest.approx(0.5 + 0.01 * i)


def test_plain_text_cut_at_first_end_and_padded():
    tokens, conf = run(ids_of('中国') + [END] + ids_of('ab'))
    assert tokens == encode_idm('中国') and tokens[2:] == [IDM_PAD] * 22
    assert conf[:2] == [step_prob(0), step_prob(1)] and conf[2:] == [0.0] * 22


def test_start_inside_text_is_written_as_letters():
    tokens, conf = run(ids_of('中') + [START] + ids_of('国') + [END])
    assert decode_idm(tokens) == '中START国'
    assert tokens[1:6] == [idm_char_index(c) for c in 'START']
    # all five letters carry the START step's probability; the next character its own step's
    assert conf[:7] == [step_prob(0)] + [step_prob(1)] * 5 + [step_prob(2)]


def test_unknown_characters_stay_in_place_with_their_confidence():
    assert idm_char_index('撅') == IDM_PAD and idm_char_index('\xad') == IDM_PAD
    tokens, conf = run(ids_of('a撅b') + [1] + [END])  # id 1 is '\xad'
    assert tokens[:4] == [idm_char_index('a'), IDM_PAD, idm_char_index('b'), IDM_PAD]
    assert conf[:4] == [step_prob(0), step_prob(1), step_prob(2), step_prob(3)] and conf[4] == 0.0


def test_traditional_to_simplified_same_length_keeps_alignment():
    tokens, conf = run(ids_of('國華') + [END])
    assert decode_idm(tokens) == '国华'
    assert conf[:2] == [step_prob(0), step_prob(1)] and conf[2] == 0.0


def test_length_changing_conversion_gives_min_probability_everywhere():
    probs = [0.9, 0.3, 0.8, 0.2] + [0.05] * 20  # step 4 (END) and beyond must not count
    tokens, conf = run(ids_of('公升水') + [END], probs)
    assert decode_idm(tokens) == '升水'  # zhconv phrase 公升 -> 升
    assert conf[:2] == [pytest.approx(0.3)] * 2 and conf[2:] == [0.0] * 22
    tokens, conf = run(ids_of('伏地挺身') + [END], [0.9, 0.7, 0.6, 0.95] + [0.01] * 20)
    assert decode_idm(tokens) == '俯卧撑' and conf[:3] == [pytest.approx(0.6)] * 3 and conf[3] == 0.0


def test_only_23_steps_are_read():
    letters = 'abcdefghijklmnopqrstuvwxyz'
    tokens, conf = run(ids_of(letters[:24]))
    assert decode_idm(tokens) == letters[:23] and tokens[23] == IDM_PAD and conf[23] == 0.0
    assert conf[22] == step_prob(22)
    tokens, _ = run(ids_of(letters[:23]) + [END])
    assert decode_idm(tokens) == letters[:23]


def test_start_expansion_is_truncated_to_24():
    tokens, conf = run([START] * 6 + [END])
    assert decode_idm(tokens) == ('START' * 6)[:24]
    assert conf[20:24] == [step_prob(4)] * 4  # letters 21..24 come from the 5th START


def test_empty_prediction():
    tokens, conf = run([END] + ids_of('abc'))
    assert tokens == [IDM_PAD] * 24 and conf == [0.0] * 24


def test_batch_device_dtype_and_gradient():
    ids = torch.tensor([(ids_of('中国') + [END] + [5] * 21), (ids_of('公升') + [END] + [5] * 21)])
    probs = torch.rand(2, 24, dtype=torch.float64).clamp_min(0.01).requires_grad_(True)
    tokens, conf = transocr_to_idm(ids, probs)
    assert tokens.dtype == torch.long and tokens.shape == (2, 24) and conf.dtype == torch.float64
    conf.sum().backward()
    grad = probs.grad
    assert grad[0, :2].tolist() == [1.0, 1.0] and grad[0, 2:].abs().sum() == 0
    assert grad[1].sum() == 1.0 and grad[1, int(probs[1, :2].argmin())] == 1.0  # min-probability rule


def test_confidences_in_range_and_tokens_decode():
    torch.manual_seed(0)
    ids = torch.randint(0, TRANSOCR_END + 1, (16, 24))
    probs = torch.rand(16, 24).clamp_min(1e-6)
    tokens, conf = transocr_to_idm(ids, probs)
    assert ((tokens >= 0) & (tokens <= IDM_PAD)).all()
    assert (conf >= 0).all() and (conf <= 1).all()
    for b, row in enumerate(tokens.tolist()):
        decode_idm(row)  # every token is a valid IDM index
        n = min(len(difftsr_prediction_text(ids[b].tolist(), probs[b].tolist())[0]), 24)
        assert (conf[b, :n] > 0).all() and (conf[b, n:] == 0).all()  # (0, 1] for characters, 0 for padding


def test_difftsr_prediction_text_matches_official_string_rules():
    text, conf = difftsr_prediction_text(ids_of('ab') + [START] + ids_of('國') + [END], [0.5] * 24)
    assert text == 'abSTART国' and len(conf) == len(text)


def test_bad_inputs():
    with pytest.raises(ValueError, match=r'\(B, S\)'):
        transocr_to_idm(torch.zeros(24, dtype=torch.long), torch.zeros(24))
    with pytest.raises(ValueError, match=r'\(B, S\)'):
        transocr_to_idm(torch.zeros(1, 24, dtype=torch.long), torch.zeros(1, 23))
    with pytest.raises(ValueError, match='outside'):
        transocr_to_idm(torch.full((1, 24), 9000), torch.ones(1, 24))
