"""TOLAConfig: the one list of TOLANet's options (defaults, checks, kinds), shared by the constructor BasicSR calls,
the strict option check, the merged file's metadata and the loaders; files written before it still load."""
import dataclasses
import inspect
import json
import os
import pathlib
import re

import numpy as np
import pytest
import torch

from basicsr.archs import build_network
from basicsr.utils.registry import ARCH_REGISTRY

import tola_plugin  # noqa: F401
from tola_plugin.archs.diffusion_schedule import schedule_constants
from tola_plugin.archs.precision import StageDtypes
from tola_plugin.archs.stage_runner import StageRunner
from tola_plugin.archs.tola_arch import Switch, TOLANet
from tola_plugin.archs.tola_config import KINDS, SWITCHES, TOLAConfig
from tola_plugin.checkpoints import tola as tola_files
from tola_plugin.options.checks import check_typed_block, resolved_options
from tola_testing import REPO, one_thread, tiny_net_opt  # noqa: F401

pytestmark = pytest.mark.usefixtures('one_thread')
DATA = os.path.join(REPO, 'tests', 'data', 'tola')


def load_json(name):
    with open(os.path.join(DATA, name), encoding='utf-8') as f:
        return json.load(f)


# ------------------------------------------------------------------------------------------- the options
def test_defaults_are_the_papers():
    config = TOLAConfig()
    assert (config.timestep, config.latent, config.noise, config.text_prior, config.confidence,
            config.context_route) == (999, 'mode', 'gaussian', 'predicted', 'predicted', 'mom')
    # rank-4 LoRA with alpha = rank (the paper's (r, α) = (4, 4)) in the IDM and the VAE encoder, and the LRC
    # (h, g, n) = (32, 16, 1)
    assert (config.lora_rank, config.lora_alpha, config.idm_lora, config.vae_lora) == (4, None, True, True)
    assert resolved_options(ARCH_REGISTRY, config.lrc) == {
        'type': 'LatentResidualCorrection', 'in_channels': 6, 'out_channels': 3, 'num_feat': 32, 'num_grow_ch': 16,
        'num_block': 1
    }
    assert (config.precision, config.gradient_checkpointing, config.backbone_init) == ('fp32', (), 'checkpoint')


def test_every_option_has_one_kind_and_the_switches_are_the_networks_attributes():
    kinds = {name: TOLAConfig.kind(name) for name in TOLAConfig.names()}
    assert set(kinds.values()) == set(KINDS)
    assert sorted(TOLAConfig.names(*KINDS)) == sorted(kinds)
    assert list(SWITCHES) == list(TOLAConfig.names('switch')) == [
        'timestep', 'latent', 'noise', 'text_prior', 'confidence', 'context_route', 'clamp_output', 'precision',
        'text_decoding'
    ]
    assert TOLAConfig.names('file') == ('difftsr_checkpoint', 'transocr_checkpoint')
    assert TOLAConfig.names('training') == ('gradient_checkpointing', )
    attributes = {name for name, value in vars(TOLANet).items() if isinstance(value, Switch)}
    assert attributes == set(SWITCHES)


def test_the_constructor_takes_exactly_the_configs_options():
    """BasicSR's strict option check reads the constructor's signature: the config's options and defaults, so a
    misspelled key of network_g names the closest one."""
    parameters = inspect.signature(TOLANet).parameters
    assert list(parameters) == list(TOLAConfig.names())
    defaults = TOLAConfig().options()
    assert {name: p.default for name, p in parameters.items()} == {**defaults, 'gradient_checkpointing': ()}
    with pytest.raises(ValueError, match=r"network_g.precison: unknown option of TOLANet \(did you mean 'precision'"):
        check_typed_block({'type': 'TOLANet', 'precison': 'bf16'}, ARCH_REGISTRY, 'network_g')
    with pytest.raises(ValueError, match=r"^lora_rnak: unknown option of TOLANet \(did you mean 'lora_rank'\?\)"):
        TOLANet(lora_rnak=4)  # refused before any file is read


@pytest.mark.parametrize('option,value,needle', [
    ('backbone_init', 'ckpt', "backbone_init must be one of ('checkpoint', 'random', 'demo', 'empty'), got 'ckpt'"),
    ('difftsr_checkpoint', 3, 'difftsr_checkpoint must be a file path, got 3'),
    ('idm_config', [16, 32], 'idm_config must be a mapping of constructor options or null'),
    ('random_seed', 1.5, 'random_seed must be an integer, got 1.5'),
    ('lora_rank', 0, 'lora_rank must be a positive integer, got 0'),
    ('lora_rank', True, 'lora_rank must be a positive integer, got True'),
    ('lora_alpha', 0, 'lora_alpha must be a positive number or null'),
    ('lora_alpha', '4', 'lora_alpha must be a positive number or null'),
    ('idm_lora', 1, 'idm_lora must be one of (True, False), got 1'),
    ('lrc', {'num_feat': 32}, 'lrc must be a network block'),
    ('lrc', {'type': 'LatentResidualCorrection', 'num_fet': 32}, "lrc.num_fet: unknown option of "
     "LatentResidualCorrection (did you mean 'num_feat'?)"),
    ('timestep', 1000, 'timestep must be an integer in [0, 999], got 1000'),
    ('timestep', True, 'timestep must be an integer in [0, 999], got True'),
    ('latent', 'mean', "latent must be one of ('mode', 'sample'), got 'mean'"),
    ('clamp_output', 1, 'clamp_output must be one of (True, False), got 1'),
    ('precision', 'fp64', "precision must be one of ('fp32', 'bf16', 'fp16', 'auto'), got 'fp64'"),
    ('gradient_checkpointing', 'idm', 'gradient_checkpointing must be a list of distinct parts'),
    ('gradient_checkpointing', ['idm', 'idm'], 'gradient_checkpointing must be a list of distinct parts'),
])
def test_a_bad_value_names_the_option(option, value, needle):
    with pytest.raises(ValueError) as err:
        TOLAConfig(**{option: value})
    assert needle in str(err.value)


def test_contradictions_are_refused():
    with pytest.raises(ValueError, match='vae_lora_active: false switches off a VAE LoRA, but vae_lora is false'):
        TOLAConfig(vae_lora=False, vae_lora_active=False)
    with pytest.raises(ValueError, match="context_route 'direct' needs a text prior"):
        TOLAConfig(text_prior='none').replace(context_route='direct')


def test_values_are_normalised_and_copied():
    given = {'block_out_channels': [16, 32]}
    config = TOLAConfig(
        difftsr_checkpoint=pathlib.Path('a/b.ckpt'), idm_config=given, timestep=np.int64(949),
        gradient_checkpointing=['vae_decoder', 'idm'])
    given['block_out_channels'].append(64)  # the caller's mapping changes, the config does not
    assert config.difftsr_checkpoint == os.path.join('a', 'b.ckpt') and type(config.timestep) is int
    assert config.idm_config == {'block_out_channels': [16, 32]}
    assert config.gradient_checkpointing == ('idm', 'vae_decoder')
    options = config.options()
    assert options['gradient_checkpointing'] == ['idm', 'vae_decoder']  # as YAML and JSON write it
    options['idm_config']['block_out_channels'].append(128)
    assert config.idm_config == {'block_out_channels': [16, 32]}  # a copy
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.timestep = 1


def test_switches_are_checked_and_the_rest_cannot_be_switched():
    assert TOLAConfig.check_switches({'timestep': np.int64(949), 'noise': 'zero'}) == {'timestep': 949, 'noise': 'zero'}
    with pytest.raises(ValueError, match=r"\['lrc'\] cannot be switched on a built network"):
        TOLAConfig.check_switches({'lrc': None, 'noise': 'zero'})
    with pytest.raises(ValueError, match='noise must be one of'):
        TOLAConfig.check_switches({'noise': 'none'})


def test_recorded_options_leave_out_files_and_training():
    config = TOLAConfig(backbone_init='random', gradient_checkpointing=['idm'], precision='bf16')
    recorded = config.recorded_options()
    assert sorted(recorded) == sorted(TOLAConfig.names('architecture', 'switch'))
    assert TOLAConfig.from_options(recorded) == config.replace(gradient_checkpointing=())


# ------------------------------------------------------------------------------------------- the network
def test_basicsr_builds_the_network_of_its_options_and_the_config_follows_the_switches():
    options = tiny_net_opt(lora_rank=2, noise='zero')
    net = build_network({'type': 'TOLANet', **options})  # as BasicSR builds network_g
    assert net.config == TOLAConfig.from_options(options)
    assert net.trainable_parameter_counts() == TOLANet.from_config(net.config).trainable_parameter_counts()
    assert (net.noise, net.precision) == ('zero', 'fp32')

    net.timestep = 949  # an assignment is set_switches: checked, and the schedule follows
    assert net.config.timestep == 949 and net.switches()['timestep'] == 949
    assert (net.sqrt_alpha_bar, net.sqrt_one_minus_alpha_bar) == schedule_constants(949)
    with pytest.raises(ValueError, match='latent must be one of'):
        net.latent = 'mean'
    net.text_prior = 'none'
    with pytest.raises(ValueError, match="context_route 'direct' needs a text prior"):
        net.context_route = 'direct'
    assert net.config.context_route == 'mom' and net.context_route == 'mom'  # nothing half-set

    net.set_gradient_checkpointing(['idm'])  # the config says what the network does
    assert net.config.gradient_checkpointing == ('idm', )

    fp32 = StageDtypes.uniform(torch.float32)
    with net.running(StageRunner(fp32, 'torch fp32 (qualified)')):  # placed by a runtime: its decision
        with pytest.raises(ValueError, match=r'the precision of a placed network is its runtime.s decision \(torch'):
            net.precision = 'bf16'
        assert net.precision == 'fp32' and net.stage_dtypes('cpu') == fp32
        net.set_switches(noise='gaussian')  # the other switches still change
    # its own torch runner again: the switch is its precision
    net.precision = 'bf16'
    assert net.stage_dtypes('cpu') == StageDtypes.uniform(torch.bfloat16, training=net.training)


# ------------------------------------------------------------------------------- files written before TOLAConfig
def test_merged_files_keep_their_options(tmp_path):
    """The merged file's metadata: the network writes what tola-plugin wrote before TOLAConfig (the same
    options, the same format), and such a file builds the network of those options."""
    for case in load_json('merged_options_v1.json')['cases']:
        net = TOLANet(**tiny_net_opt(**case['built_with'])).set_switches(**case['switched'])
        path = str(tmp_path / 'merged.safetensors')
        net.save_merged(path)
        metadata = tola_files.read_merged_metadata(path)
        assert metadata['format'] == 'tola_plugin.tola_merged/1'
        assert json.loads(metadata['options']) == case['options']
        loaded = TOLANet.from_merged(path)
        assert loaded.config == TOLAConfig.from_options(case['options'])
        assert loaded.switches() == {name: case['options'][name] for name in SWITCHES} == net.switches()
        assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), loaded.state_dict().values()))


def test_adaptation_checkpoints_keep_their_settings():
    recorded = load_json('adaptation_settings_v1.json')['settings']
    net = TOLANet(**tiny_net_opt())
    assert net.adaptation_config() == recorded
    tola_files.check_adaptation_config(recorded, net.adaptation_config(), 'old.pth', 'checkpoint')


# ---------------------------------------------------------------------------------------------------- docs
def test_the_docs_table_lists_every_option_with_its_kind():
    text = open(os.path.join(REPO, 'docs', 'tola.md'), encoding='utf-8').read()
    section = text[text.index('## `TOLANet` options'):text.index('### LoRA placement')]
    documented = {}
    for row in re.findall(r'^\| (`\w+`(?:, `\w+`)*) \| (\w+) \|', section, re.M):
        for name in re.findall(r'`(\w+)`', row[0]):
            documented[name] = row[1]
    assert documented == {name: TOLAConfig.kind(name) for name in TOLAConfig.names()}


def test_the_docs_example_runs():
    """docs/tola.md's example, literally (the shipped demo backbone: a few seconds)."""
    text = open(os.path.join(REPO, 'docs', 'tola.md'), encoding='utf-8').read()
    (example, ) = re.findall(r'```python\n(.*?)```', text, re.S)
    scope = {}
    exec(compile(example, 'docs/tola.md', 'exec'), scope)  # noqa: S102 (our own page)
    assert scope['net'].config.lora_rank == 8 and scope['net'].noise == 'zero'
