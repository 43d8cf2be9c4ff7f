"""The benchmark's inputs: rendered text lines, degraded as the paper's x4 setting."""
import torch

from tola_plugin.data.text_labels import text_targets
from tola_plugin.data.text_line_source import to_canvas
from tola_plugin.data.text_render import TextLineRenderer


def rendered_lines(count: int, seed: int = 0, with_targets: bool = False, chinese_chars=None):
    """``count`` rendered text lines, degraded as the paper's x4 setting: HR 128x512 -> bicubic 32x128 -> the
    128x512 canvas (PIL bicubic, as the datasets). -> (count, 3, 128, 512) RGB in [0, 1]; with ``with_targets``
    also the HR lines (same shape) and the OCR targets (count, 25) of their texts. ``chinese_chars``: the
    renderer's Chinese pool (``TextLineRenderer``; 'demo': the demo backbone's)."""
    import cv2

    renderer = TextLineRenderer(seed=seed, chinese_chars=chinese_chars)
    lines, hr, targets = [], [], []
    for i in range(count):
        rgb, text, _ = renderer.render(i)
        lr = cv2.resize(rgb, (128, 32), interpolation=cv2.INTER_CUBIC)
        lines.append(torch.from_numpy(to_canvas(lr, order='RGB')).permute(2, 0, 1))
        hr.append(torch.from_numpy(to_canvas(rgb, order='RGB')).permute(2, 0, 1))
        targets.append(text_targets(text, f'rendered line {i}')[1])
    if with_targets:
        return torch.stack(lines), torch.stack(hr), torch.stack(targets)
    return torch.stack(lines)
