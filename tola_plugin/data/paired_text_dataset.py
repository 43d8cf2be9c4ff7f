"""Fixed LR(/HR) test pairs with transcriptions: CTR-TSR-Test x4, RealCE-200, RT50 (no HR).

Folder mode: LR and HR folders matched by exact filename, labels from a TSV manifest
(``filename<TAB>transcription``); every listed name must exist in each folder and, unless
``allow_unlisted_files``, every image in a folder must be listed. LMDB mode: FudanVI LMDBs matched by
index (``image-%09d``), labels from the LR LMDB (an HR LMDB's labels must agree).
Images not at 512x128 are resized to it (PIL bicubic, as DiffTSR's inference); with ``lq_size: native`` the LR
goes to 512/s x 128/s instead (the input of BasicSR's x s networks, the baselines).
"""

import numpy as np
import torch
from torch.utils import data

from basicsr.utils import get_root_logger
from basicsr.utils.registry import DATASET_REGISTRY

from tola_plugin.data.image_io import list_image_files
from tola_plugin.data.text_labels import text_targets, usable_positions
from tola_plugin.data.text_line_source import (CANVAS_H, CANVAS_W, FolderLineSource, LmdbLineSource, background_option,
                                               to_canvas)


def _unlisted(folder: str, listed: set) -> list:
    return [n for n in list_image_files(folder) if n not in listed]


@DATASET_REGISTRY.register()
class PairedTextDataset(data.Dataset):
    """Test pairs on the 512x128 canvas.

    Options: dataroot_lq; dataroot_gt [None: no HR, e.g. RT50]; io_backend.type ['disk' | 'lmdb'];
    labels (disk: TSV, required); index_list (lmdb, 0-based) [None]; resize_to_canvas [True];
    allow_unlisted_files [False]; idm_text_norm ['lower']; skip_invalid_labels [False];
    background [[255, 255, 255]]: RGB colour under transparent pixels (RGBA/LA/palette images);
    lq_size ['canvas' | 'native']: the LR on the canvas (TOLA) or at 128/s x 512/s, s = the option file's
    ``scale`` (a x s network's input; the same resize).
    Any other key (besides BasicSR's loader keys) is an error (options/checks.py).

    Item: ``lq`` (3,128,512) float32 RGB [0,1] ((3,128/s,512/s) with ``lq_size: native``); ``gt`` (3,128,512)
    and ``gt_path`` only with HR; ``lq_path`` (file path or LMDB key); ``text``; ``idm_tokens`` (24,) int64;
    ``ocr_target`` (25,) int64.
    """

    option_keys = frozenset({
        'dataroot_lq', 'dataroot_gt', 'labels', 'index_list', 'resize_to_canvas', 'allow_unlisted_files',
        'idm_text_norm', 'skip_invalid_labels', 'background', 'lq_size'
    })

    def __init__(self, opt: dict):
        super().__init__()
        self.opt = opt
        self.logger = get_root_logger()
        if not opt.get('dataroot_lq'):
            raise KeyError('PairedTextDataset needs the "dataroot_lq" option')
        self.resize = bool(opt.get('resize_to_canvas', True))
        self.lq_size = self._lq_size(opt)
        self.idm_text_norm = opt.get('idm_text_norm', 'lower')
        backend = opt.get('io_backend', {}).get('type', 'disk')
        if backend == 'disk':
            self.lq, self.gt = self._folders(opt)
        elif backend == 'lmdb':
            self.lq, self.gt = self._lmdbs(opt)
        else:
            raise ValueError(f'io_backend.type must be "disk" or "lmdb", got {backend!r}')
        self.records = usable_positions(self.lq.labels, self.lq.key, self.idm_text_norm,
                                        bool(opt.get('skip_invalid_labels', False)), opt['dataroot_lq'],
                                        self.logger.warning)

    @staticmethod
    def _folders(opt):
        if not opt.get('labels'):
            raise KeyError('PairedTextDataset (disk) needs the "labels" option (TSV: filename<TAB>transcription)')
        if opt.get('index_list'):
            raise ValueError('index_list is for io_backend lmdb; list the wanted files in the labels TSV instead')
        background = background_option(opt)
        lq = FolderLineSource(opt['dataroot_lq'], opt['labels'], background=background)
        gt = (
            FolderLineSource(opt['dataroot_gt'], opt['labels'], background=background)
            if opt.get('dataroot_gt') else None)
        if not opt.get('allow_unlisted_files', False):
            listed = set(lq.names)
            for folder in [opt['dataroot_lq']] + ([opt['dataroot_gt']] if gt else []):
                extra = _unlisted(folder, listed)
                if extra:
                    raise ValueError(f'{len(extra)} image(s) in {folder} are not in {opt["labels"]} (set '
                                     f'allow_unlisted_files: true to ignore them); first: {extra[:5]}')
        return lq, gt

    @staticmethod
    def _lmdbs(opt):
        if opt.get('labels'):
            raise ValueError('io_backend lmdb reads labels from the LR LMDB; remove the "labels" option')
        background = background_option(opt)
        lq = LmdbLineSource(opt['dataroot_lq'], opt.get('index_list'), background)
        gt = LmdbLineSource(opt['dataroot_gt'], opt.get('index_list'), background) if opt.get('dataroot_gt') else None
        if gt is not None:
            if len(gt.reader) != len(lq.reader):
                raise ValueError(f'{opt["dataroot_lq"]} has {len(lq.reader)} samples but {opt["dataroot_gt"]} '
                                 f'has {len(gt.reader)}')
            differ = [lq.key(i) for i in range(len(lq)) if lq.labels[i].strip() != gt.labels[i].strip()]
            if differ:
                raise ValueError(f'{len(differ)} label(s) differ between {opt["dataroot_lq"]} and '
                                 f'{opt["dataroot_gt"]}; first keys: {differ[:5]}')
        return lq, gt

    @staticmethod
    def _lq_size(opt) -> tuple:
        """(height, width) of the LR items."""
        lq_size = opt.get('lq_size', 'canvas')
        if lq_size == 'canvas':
            if opt.get('scale') is not None and int(opt['scale']) > 1:
                raise ValueError(f'dataset {opt.get("name")!r}: with lq_size: canvas (the default) the LR lines are '
                                 f'resized to 128x512, the input of TOLA (scale: 1), but the option file\'s scale is '
                                 f'{opt["scale"]} (a x{opt["scale"]} network such as BasicSR\'s): set lq_size: native')
            return CANVAS_H, CANVAS_W
        if lq_size != 'native':
            raise ValueError(f'lq_size must be "canvas" or "native", got {lq_size!r}')
        scale = opt.get('scale')
        if not isinstance(scale, int) or isinstance(scale, bool) or scale < 1 or CANVAS_H % scale or CANVAS_W % scale:
            raise ValueError(f'lq_size: native needs the option file\'s scale, a divisor of {CANVAS_H} and {CANVAS_W}; '
                             f'got scale {scale!r}')
        return CANVAS_H // scale, CANVAS_W // scale

    def _canvas(self, source, pos, size=(CANVAS_H, CANVAS_W)) -> torch.Tensor:
        img = source.read(pos)
        if not self.resize and img.shape[:2] != size:
            raise ValueError(f'{source.key(pos)}: size {img.shape[1]}x{img.shape[0]}, expected '
                             f'{size[1]}x{size[0]} (or set resize_to_canvas: true)')
        return torch.from_numpy(np.ascontiguousarray(to_canvas(img, size[1], size[0]).transpose(2, 0, 1)))

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> dict:
        pos = self.records[index]
        label = self.lq.labels[pos]
        idm_tokens, ocr_target = text_targets(label, self.lq.key(pos), self.idm_text_norm)
        item = {
            'lq': self._canvas(self.lq, pos, self.lq_size),
            'lq_path': self.lq.key(pos),
            'text': label,
            'idm_tokens': idm_tokens,
            'ocr_target': ocr_target,
        }
        if self.gt is not None:
            item['gt'] = self._canvas(self.gt, pos)
            item['gt_path'] = self.gt.key(pos)
        return item
