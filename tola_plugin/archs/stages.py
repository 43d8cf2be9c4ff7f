"""The one table of Algorithm 1's six stages, in the forward's order: every module that names a stage (a precision
plan, the stage runner, a runtime's conversion, the timings and their tables) reads it here.

- name: the stage's key ('idm'); label: what timings and tables call it ('IDM'); verb: the ``StageRunner`` method
  that computes it (``TOLANet.forward`` calls each once); servable: a runtime other than torch may compute it
  (OpenVINO converts it); planned: its compute dtype follows the precision plan (the text prior's is fp32 always:
  its ids are argmaxes that low precision could flip on near-ties).
"""
from typing import NamedTuple


class Stage(NamedTuple):
    name: str
    label: str
    verb: str
    servable: bool
    planned: bool


STAGES = (
    Stage('text_prior', 'text prior', 'read_text', servable=True, planned=False),
    Stage('vae_encoder', 'VAE encode', 'encode', servable=True, planned=True),
    Stage('mom', 'MoM text', 'encode_text', servable=False, planned=True),
    Stage('idm', 'IDM', 'denoise', servable=True, planned=True),
    Stage('lrc', 'LRC', 'correct', servable=False, planned=True),
    Stage('vae_decoder', 'VAE decode', 'decode', servable=True, planned=True),
)
#: the stages whose compute dtype a precision sets (``archs/precision.StageDtypes``' keys)
PLANNED = tuple(s.name for s in STAGES if s.planned)
LABEL = {s.name: s.label for s in STAGES}
