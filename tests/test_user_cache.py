"""``utils/user_cache.JsonCache``, the one way an entry is kept in the user's cache folder (qualification verdicts,
the bf16 speed, merged files' hashes), and the hashes' memo (``runtime/model_digest.file_sha256``)."""
import json
import os

from tola_plugin.runtime import model_digest
from tola_plugin.utils.user_cache import JsonCache


def test_entries_are_kept_in_one_file_of_their_format_and_in_memory(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path))
    cache = JsonCache('c.json', 'fmt/1')
    assert cache.get('a') is None and cache.put('a', {'x': 1}) and cache.put('b', 2)
    path = tmp_path / 'tola-plugin' / 'c.json'
    assert json.loads(path.read_text()) == {'format': 'fmt/1', 'entries': {'a': {'x': 1}, 'b': 2}}
    assert JsonCache('c.json', 'fmt/1').get('a') == {'x': 1}  # another process reads the file
    assert JsonCache('c.json', 'fmt/2').get('a') is None  # another format is not ours
    cache.drop(['a'])
    assert cache.get('a') is None and JsonCache('c.json', 'fmt/1').entries() == {'b': 2}
    for damaged in ('{"format": "fmt/1", "entr', '[]', ''):
        path.write_text(damaged)
        assert cache.entries() == {} and cache.put('c', 3) and JsonCache('c.json', 'fmt/1').entries() == {'c': 3}
    assert not [p for p in os.listdir(path.parent) if p.endswith('.tmp')]  # written atomically


def test_a_cache_that_cannot_be_written_keeps_entries_in_this_process(tmp_path, monkeypatch):
    blocker = tmp_path / 'not_a_folder'
    blocker.write_text('x')
    monkeypatch.setenv('XDG_CACHE_HOME', str(blocker))  # the cache folder cannot be made
    cache = JsonCache('c.json', 'fmt/1')
    assert cache.put('a', 1) is False and cache.get('a') == 1 and cache.entries() == {}


def test_a_merged_file_is_hashed_once_while_it_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'cache'))
    monkeypatch.setattr(model_digest, 'HASHES', JsonCache('file_hashes.json', model_digest.HASHES.format))
    hashed = []
    real = model_digest.sha256_of
    monkeypatch.setattr(model_digest, 'sha256_of', lambda p: hashed.append(p) or real(p))
    path = tmp_path / 'model.safetensors'
    path.write_bytes(b'one')
    first = model_digest.file_sha256(str(path))
    monkeypatch.setattr(model_digest, 'HASHES', JsonCache('file_hashes.json', model_digest.HASHES.format))
    assert model_digest.file_sha256(str(path)) == first and len(hashed) == 1  # a new process reads the memo
    path.write_bytes(b'two!')  # another size: hashed again
    assert model_digest.file_sha256(str(path)) != first and len(hashed) == 2
