"""Argument types shared by the command lines (light: importing it loads nothing of the package, so --help is fast)."""
import argparse


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


def openvino_streams(text: str):
    """'auto' or an integer >= 1 (OpenVINO's streams, tola_plugin.runtime.openvino_client.check_streams), else an
    argparse error saying what was expected."""
    if text == 'auto':
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or 'auto', got {text!r}")
    return value
