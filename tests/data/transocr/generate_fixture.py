"""Regenerate official_outputs.npz by running the OFFICIAL DiffTSR TransOCR + Text_Prediction on CPU.

Not a test and not imported by the package. Run outside the repo, against a throw-away copy of
YuzheZhang-1999/DiffTSR (commit f9839633); only the arrays it writes are committed:

    git --git-dir=<mirror of YuzheZhang-1999/DiffTSR> archive HEAD model | tar -x -C /tmp/difftsr_copy
    python tests/data/transocr/generate_fixture.py /tmp/difftsr_copy tests/data/transocr/official_outputs.npz

CPU patches applied (no change to the maths): ``pytorch_lightning`` stubbed (imported but unused by
TransOCR), ``Tensor.cuda`` / ``Module.cuda`` made no-ops.
"""
import os
import sys
import types

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(os.path.dirname(HERE))


def _patch_cpu():
    sys.modules.setdefault('pytorch_lightning', types.SimpleNamespace(LightningModule=nn.Module))
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.cuda = lambda self, *a, **k: self


def _read_images():
    from PIL import Image
    images = []
    for name in ('lr_synth_0.png', 'lr_real_7.png'):
        array = np.asarray(Image.open(os.path.join(HERE, name)).convert('RGB'), dtype=np.float32) / 255.0
        images.append(torch.from_numpy(array).permute(2, 0, 1))
    return torch.stack(images)


def _crafted(classes):
    """Greedy id sequences exercising the official post-processing quirks, 24 steps each."""
    index = {c: i for i, c in enumerate(classes) if i not in (0, len(classes) - 1)}
    end = len(classes) - 1
    filler = index['a']

    def seq(text_ids):
        return (text_ids + [filler] * 24)[:24]

    ids = lambda text: [index[c] for c in text]  # noqa: E731
    rows = [
        seq(ids('中国银行') + [end] + ids('后面')),  # cut at the first END
        seq(ids('中') + [0] + ids('国') + [end]),  # START inside the text -> 'START'
        seq([1] + ids('è撅灬') + ids('國華學') + [end]),  # '\xad', chars missing from IDM, traditional
        seq(ids('公升') + ids('水') + [end]),  # zhconv phrase: 公升 -> 升 (length changes)
        seq(ids('伏地挺身') + [end]),  # 4 -> 3 characters
        [index['0123456789abcdefghijklmnopqrstuvwxyz'[i % 36]] for i in range(24)],  # no END: 23-step window
        seq([end] + ids('abc')),  # empty prediction
        seq([0] * 6 + [end]),  # 6 STARTs = 30 letters -> truncated to 24
        seq(ids('abcdefghijklmnopqrstuvw') + [end]),  # 23 chars then END at step 24
        seq(ids('abcdefghijklmnopqrstuv') + [end]),  # 22 chars
    ]
    return torch.tensor(rows, dtype=torch.long)


def main(official_root, out_path):
    _patch_cpu()
    sys.path.insert(0, official_root)
    sys.path.insert(0, TESTS)
    os.chdir(official_root)
    from model.TDM.models.text_prediction import Text_Prediction
    from model.TDM.models.transocr import Transformer
    from model.TDM.utils.util import converter, get_alphabet
    from test_transocr_equivalence import official_random_state

    torch.set_num_threads(2)
    alphabet_path = os.path.join(official_root, 'model/TDM/utils/benchmark.txt')
    classes = get_alphabet(alphabet_path)
    reference = Transformer(len(classes))
    shapes = {k: v.shape for k, v in reference.state_dict().items()}
    state = official_random_state(shapes, reference.pe.pe)
    del reference
    checksum = np.array(
        [float(state[k].double().sum()) for k in ('encoder.conv1.weight', 'pe.pe', 'generator_word.proj.weight')])
    ckpt = '/tmp/transocr_equiv_official_random.pth'
    torch.save({'state_dict': state}, ckpt)
    del state
    predictor = Text_Prediction(alphabet_path=alphabet_path, ckpt_path=ckpt)
    os.remove(ckpt)
    model = predictor.trans_ocr_model  # eval mode, official weights loaded strictly

    images = _read_images()
    records = []
    original_forward = model.forward

    def recording_forward(image, text_length, text_input, **kwargs):
        result = original_forward(image, text_length, text_input, **kwargs)
        records.append((image.detach().clone(), result['pred'].detach().clone(), result['conv'].detach().clone()))
        return result

    model.forward = recording_forward
    with torch.no_grad():
        label_index = predictor.predict(images)
    model.forward = original_forward
    preprocessed = records[0][0]
    conv_feature = records[0][2]
    step_ids, step_probs = [], []
    for _, pred, _ in records:  # exactly the official per-step reduction
        best = torch.max(torch.softmax(pred, 2), 2)
        step_ids.append(best[1][:, -1])
        step_probs.append(best[0][:, -1])

    # Teacher forcing with the official label converter (labels end with '$', standing for END).
    labels = ['中国银行$', 'hi世$']
    length, text_input, text_all, _ = converter(labels)
    with torch.no_grad():
        teacher = model(preprocessed, length, text_input, test=True)['pred']
    targets = torch.full((len(labels), int(length.max())), -100, dtype=torch.long)
    start = 0
    for row, n in enumerate(length.tolist()):
        targets[row, :n] = text_all[start:start + n]
        start += n

    # Official post-processing on crafted sequences: a stub recognizer emitting one-hot logits.
    crafted = _crafted(classes)

    class Stub(nn.Module):

        def forward(self, image, text_length, text_input, conv_feature=None, test=False):
            step = text_input.size(1) - 1
            logits = torch.zeros(text_input.size(0), text_input.size(1), len(classes))
            logits[torch.arange(crafted.size(0)), -1, crafted[:, step]] = 10.0
            return {'pred': logits, 'conv': None}

    predictor.trans_ocr_model = Stub()
    crafted_label_index = predictor.predict(torch.zeros(crafted.size(0), 3, 128, 512))
    crafted_probs = torch.rand(crafted.shape, generator=torch.Generator().manual_seed(7)) * 0.9 + 0.05

    np.savez_compressed(out_path, weight_checksum=checksum, image_checksum=images.double().sum(
        (1, 2, 3)).numpy(), preprocessed=preprocessed.numpy(), conv_feature=conv_feature.numpy(),
                        targets=targets.numpy(), teacher_logits=teacher.numpy(),
                        greedy_ids=torch.stack(step_ids, 1).numpy(), greedy_probs=torch.stack(step_probs, 1).numpy(),
                        official_label_index=label_index.numpy(), crafted_ids=crafted.numpy(),
                        crafted_probs=crafted_probs.numpy(), crafted_label_index=crafted_label_index.numpy())
    print('wrote', out_path, os.path.getsize(out_path), 'bytes; label_index', label_index.tolist())


if __name__ == '__main__':
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
