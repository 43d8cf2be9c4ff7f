"""One R,G,B parser and one device resolver for every command line."""
import argparse

import pytest
import torch

from tola_cli import evaluate
from tola_cli.arguments import rgb_triple
from tola_cli.infer import build_parser
from tola_plugin.utils.devices import resolve_device


def _type_of(parser, dest):
    return next(a.type for a in parser._actions if a.dest == dest)


def test_rgb_triple_is_the_parser_of_both_command_lines():
    assert rgb_triple('0,128,255') == (0, 128, 255)
    for bad in ('1,2', '1,2,3,4', 'a,b,c', '256,0,0', '-1,0,0', ''):
        with pytest.raises(argparse.ArgumentTypeError, match='expected R,G,B'):
            rgb_triple(bad)
    assert _type_of(build_parser(), 'alpha_background') is rgb_triple
    assert _type_of(evaluate.build_parser(), 'background') is rgb_triple


def test_one_device_resolver(monkeypatch):
    assert resolve_device(None) == resolve_device('auto') == torch.device('cpu')
    with pytest.raises(ValueError, match='CUDA is not available'):
        resolve_device('cuda')
    with pytest.raises(ValueError, match="device 'gpu'"):
        resolve_device('gpu')
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)  # CUDA simulated
    assert resolve_device('auto') == torch.device('cuda') and resolve_device('cpu') == torch.device('cpu')
