"""Strict loading of the official DiffTSR.ckpt layout (full size, every manifest) and refusals of bad files."""
import json
import os
import pickle

import pytest
import torch

from tola_plugin.archs.backbone_builder import load_difftsr, save_converted
from tola_plugin.checkpoints.difftsr import read_official
from backbone_testing import OFFICIAL_KEYS, cheap_official, manifest, official_fixture, write_tiny_official_ckpt

FULL = {'idm': 874_024_003, 'vae': 55_312_063, 'mom': 6_226_675}


@pytest.mark.parametrize('comp', ['idm', 'vae', 'mom'])
def test_every_manifest_loads_strictly_at_full_size(tmp_path, comp):
    """Official keys/shapes of the manifest -> our module, one component at a time (TDM present, skipped)."""
    path = str(tmp_path / 'DiffTSR.ckpt')
    torch.save({OFFICIAL_KEYS[comp]: cheap_official(manifest(comp)), 'TDM_Decoder': cheap_official(manifest('tdm'))},
               path)
    nets = load_difftsr(path, [comp])
    assert list(nets) == [comp]
    assert sum(p.numel() for p in nets[comp].parameters()) == FULL[comp]
    assert not any(p.is_meta for p in nets[comp].parameters())
    assert not nets[comp].training


def test_tdm_is_dropped_unread(tmp_path, monkeypatch):
    """The file is memory-mapped (weights_only) and TDM_Decoder is dropped before any tensor of it is used:
    loading the MoM next to a real-size TDM (211M params, 844 MB on disk) does not grow resident memory by
    anything near the TDM's size."""
    tdm = {k: torch.zeros(s) for k, s in manifest('tdm')}
    assert sum(t.numel() for t in tdm.values()) == 211_099_217
    path = str(tmp_path / 'DiffTSR.ckpt')
    torch.save({'MoM_module': cheap_official(manifest('mom')), 'TDM_Decoder': tdm}, path)
    del tdm
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, 'load', spy)
    before = _rss_mb()
    raw = read_official(path)
    grown = _rss_mb() - before
    assert calls and calls[0].get('weights_only') is True and calls[0].get('mmap') is True
    assert 'TDM_Decoder' not in raw and 'MoM_module' in raw
    assert grown < 300, f'resident memory grew by {grown:.0f} MB while reading: the TDM was materialised'
    nets = load_difftsr(path, ['mom'])
    assert set(nets) == {'mom'}


def _rss_mb():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    pytest.skip('no /proc/self/status')


# ----------------------------------------------------------------------------------------------- refusals


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    meta, _ = official_fixture()
    path = write_tiny_official_ckpt(tmp_path_factory.mktemp('ck') / 'DiffTSR.ckpt', meta)
    return path, meta['ours']


def test_missing_file_says_where_to_get_it(tmp_path):
    with pytest.raises(FileNotFoundError, match='DiffTSR.ckpt.*github.com/YuzheZhang-1999/DiffTSR'):
        load_difftsr(str(tmp_path / 'nope' / 'DiffTSR.ckpt'))


def test_truncated_file_is_refused(tmp_path, tiny):
    path, configs = tiny
    data = open(path, 'rb').read()
    bad = tmp_path / 'truncated.ckpt'
    bad.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match='truncated, corrupt, or carrying code'):
        load_difftsr(str(bad), configs=configs)


def _rewrite(tmp_path, path, edit):
    raw = torch.load(path, weights_only=True)
    edit(raw)
    out = str(tmp_path / 'edited.ckpt')
    torch.save(raw, out)
    return out


def test_wrong_key_is_refused_naming_component_and_key(tmp_path, tiny):
    path, configs = tiny

    def rename(raw):
        idm = raw['IDM_Unet']
        idm['input_blocks.1.0.in_layers.9.weight'] = idm.pop('input_blocks.1.0.in_layers.0.weight')

    with pytest.raises(KeyError, match=r"IDM_Unet.*input_blocks\.1\.0\.in_layers\.9\.weight"):
        load_difftsr(_rewrite(tmp_path, path, rename), ['idm'], configs=configs)

    def drop(raw):
        del raw['MoM_module']['Transformer.transformer.norm.bias']

    with pytest.raises(KeyError, match=r"MoM_module.*missing.*text_encoder\.norm\.bias"):
        load_difftsr(_rewrite(tmp_path, path, drop), ['mom'], configs=configs)

    def extra_vae(raw):
        raw['VAE_model']['loss.logvar'] = torch.zeros(())

    with pytest.raises(KeyError, match=r"VAE_model.*loss\.logvar"):
        load_difftsr(_rewrite(tmp_path, path, extra_vae), ['vae'], configs=configs)

    def no_vae(raw):
        del raw['VAE_model']

    with pytest.raises(KeyError, match="no 'VAE_model' entry"):
        load_difftsr(_rewrite(tmp_path, path, no_vae), ['vae'], configs=configs)


def test_wrong_shape_is_refused_naming_key_and_shapes(tmp_path, tiny):
    path, configs = tiny

    def reshape(raw):
        raw['IDM_Unet']['out.2.weight'] = torch.zeros(4, 32, 3, 3)

    with pytest.raises(
            ValueError, match=r"IDM_Unet: key 'out\.2\.weight' \(ours: 'conv_out\.weight'\) has shape "
            r"\(4, 32, 3, 3\), expected \(3, 32, 3, 3\)"):
        load_difftsr(_rewrite(tmp_path, path, reshape), ['idm'], configs=configs)


class _Payload:

    def __reduce__(self):
        return (os.system, ('touch PWNED_BY_PICKLE', ))


def test_pickle_carrying_code_is_refused_and_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / 'evil.ckpt'
    with open(path, 'wb') as f:
        pickle.dump({'IDM_Unet': _Payload()}, f)
    with pytest.raises(ValueError, match='weights_only=True'):
        load_difftsr(str(path), ['idm'])
    assert not (tmp_path / 'PWNED_BY_PICKLE').exists()


def test_unknown_component_and_bad_config(tiny):
    path, configs = tiny
    with pytest.raises(ValueError, match='unknown component'):
        load_difftsr(path, ['tdm'])
    with pytest.raises(TypeError, match="component 'idm': bad config"):
        load_difftsr(path, ['idm'], configs={'idm': {'no_such_option': 1}})


# ----------------------------------------------------------------------------------------------- conversion


def test_convert_tool_roundtrip(tmp_path, tiny):
    from tools.convert_difftsr import main as convert

    path, configs = tiny
    ref = load_difftsr(path, configs=configs)
    out = str(tmp_path / 'difftsr.safetensors')
    save_converted(ref, out)  # the tool's writer; the CLI itself needs full-size configs
    again = load_difftsr(out)  # configs come from the file
    for comp in ('idm', 'vae', 'mom'):
        a, b = ref[comp].state_dict(), again[comp].state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(SystemExit):
        convert([path, str(tmp_path / 'x.bin')])  # output must be .safetensors


def test_convert_cli_full_size(tmp_path):
    """The CLI on a full-size official-layout MoM checkpoint (next to a TDM entry), with --verify."""
    from tools.convert_difftsr import main as convert

    src = str(tmp_path / 'DiffTSR.ckpt')
    mom = {k: torch.full(s, 0.5) for k, s in manifest('mom')}
    torch.save({'MoM_module': mom, 'TDM_Decoder': cheap_official(manifest('tdm'))}, src)
    out = str(tmp_path / 'DiffTSR_tola.safetensors')
    convert([src, out, '--components', 'mom', '--verify'])
    nets = load_difftsr(out, ['mom'])
    assert sum(p.numel() for p in nets['mom'].parameters()) == FULL['mom']
    assert all(bool((p == 0.5).all()) for p in nets['mom'].parameters())


def test_foreign_safetensors_is_refused(tmp_path):
    from safetensors.torch import save_file

    path = str(tmp_path / 'other.safetensors')
    save_file({'a': torch.zeros(1)}, path)
    with pytest.raises(ValueError, match='not a converted DiffTSR checkpoint written by tools/convert_difftsr.py'):
        load_difftsr(path)


def test_legacy_torch_save_format_still_loads(tmp_path, tiny, capsys):
    """A pre-zip (legacy) torch.save file cannot be memory-mapped: it is read whole, with a warning on stderr."""
    path, configs = tiny
    legacy = str(tmp_path / 'legacy.ckpt')
    torch.save(torch.load(path, weights_only=True), legacy, _use_new_zipfile_serialization=False)
    ref = load_difftsr(path, ['mom'], configs=configs)['mom'].state_dict()
    capsys.readouterr()
    got = load_difftsr(legacy, ['mom'], configs=configs)['mom'].state_dict()
    assert capsys.readouterr().err.startswith(f'warning: {legacy} is in the legacy torch.save format')
    assert all(torch.equal(ref[k], got[k]) for k in ref)


OFFICIAL_YAML_PARAMS = {  # model.params of the official model/DiffTSR_config.yaml (TDM / TransOCR omitted)
    'IDM_Unet_config': {'target': 'model.IDM.modules.diffusionmodules.openaimodel.UNetModel', 'params': dict(
        image_size=[32, 128], in_channels=6, out_channels=3, model_channels=320, attention_resolutions=[8, 4, 2],
        num_res_blocks=2, channel_mult=[1, 2, 3, 4], num_heads=8, resblock_updown=True, use_spatial_transformer=True,
        transformer_depth=1, context_dim=160, use_checkpoint=True, legacy=False)},
    'MoM_module_config': {'target': 'model.MoM.MoM.MoM_model', 'params': {
        'MoM_Unet': {'target': 'x', 'params': dict(
            image_size=[32, 128], in_channels=6, out_channels=3, model_channels=32, attention_resolutions=[0],
            num_res_blocks=2, channel_mult=[1, 2], num_heads=4, resblock_updown=True, use_spatial_transformer=True,
            transformer_depth=1, context_dim=128, use_checkpoint=True, legacy=False)},
        'MoM_Transformer': {'target': 'y', 'params': dict(n_embed=160, n_layer=4, vocab_size=6736, max_seq_len=24,
                                                          use_tokenizer=False)}}},
    'VAE_model_config': {'target': 'z', 'params': {'embed_dim': 3, 'ddconfig': dict(
        double_z=True, z_channels=3, resolution=512, in_channels=3, out_ch=3, ch=128, ch_mult=[1, 2, 4],
        num_res_blocks=2, attn_resolutions=[], dropout=0.0)}},
}


def _plain(config):
    return {k: v for k, v in json.loads(json.dumps(dict(config))).items() if not k.startswith('_')}


def test_configs_from_official_yaml():
    """The official YAML maps to our defaults; the fixture's tiny official configs map to the tiny configs."""
    from tola_plugin.archs.backbone_builder import CLASSES
    from tola_plugin.checkpoints.difftsr import configs_from_official

    configs = configs_from_official(OFFICIAL_YAML_PARAMS)
    for comp, cfg in configs.items():
        with torch.device('meta'):
            assert _plain(CLASSES[comp](**cfg).config) == _plain(CLASSES[comp]().config), comp
    meta, _ = official_fixture()
    tiny = meta['official']
    tiny_params = {
        'IDM_Unet_config': tiny['idm'], 'VAE_model_config': tiny['vae'], 'MoM_module_config': {
            'MoM_Unet': tiny['mom']['unet'], 'MoM_Transformer': tiny['mom']['bert'], 'num_classes': 6736,
            'context_dim': 16
        }
    }
    ours = configs_from_official(tiny_params)
    for comp in ('idm', 'vae', 'mom'):
        with torch.device('meta'):
            a, b = CLASSES[comp](**ours[comp]).config, CLASSES[comp](**meta['ours'][comp]).config
        assert _plain(a) == _plain(b), comp
    bad = {
        'IDM_Unet_config': {
            'params': dict(OFFICIAL_YAML_PARAMS['IDM_Unet_config']['params'], use_scale_shift_norm=True)
        }
    }
    with pytest.raises(ValueError, match='IDM_Unet_config.use_scale_shift_norm'):
        configs_from_official(bad)


def test_in_place_edits_never_reach_the_checkpoint(tmp_path, tiny):
    """Parameters are assigned from a private (copy-on-write) memory map: editing them in place (e.g. merging
    LoRA) changes neither the file nor a second load."""
    path, configs = tiny
    before = open(path, 'rb').read()
    nets = load_difftsr(path, ['mom'], configs=configs)
    with torch.no_grad():
        for p in nets['mom'].parameters():
            p.add_(1.0)
    assert open(path, 'rb').read() == before
    again = load_difftsr(path, ['mom'], configs=configs)['mom']
    assert not torch.equal(next(again.parameters()), next(nets['mom'].parameters()))
