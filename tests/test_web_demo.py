"""tola-web (docs/web.md): the request handler in-process, the command line, and the page in a real headless Chromium.

The browser tests start the server the way a user outside the clone does, with the demo model given by --model from a
folder of their own (the page recognises it by its weights), drive Debian's Chromium through Selenium, and stop both
themselves. They are skipped, with the reason
printed, only where no Chromium and chromedriver are installed (tools/setup_env.sh installs them when run as root).
"""
import glob
import json
import os
import re
import shutil
import urllib.request

import numpy as np
import pytest
import torch

from tola_lab.browser.headless_browser import (find_chromium, page_text, quit_chromium, restore_in_page, start_chromium,
                                               urls_off_host)
from tola_plugin.archs.tola_arch import image_noise_seed
from tola_plugin.assets.rendered_samples import samples_dir
from tola_plugin.data.image_io import read_image_file
from tola_plugin.inference.demo_model import demo_model_path
from tola_plugin.inference.image_kind import looks_like_a_photo
from tola_plugin.inference.pipeline import LineResult, Restoration, TOLAPipeline
from inference_testing import StandInRestorer, write_tiny_merged

web_page = pytest.importorskip('tola_plugin.web.page', reason='gradio is not installed (the [web] extra)')
from tola_cli import web as web_cli  # noqa: E402
from tola_plugin.web import http_bounds, uploads  # noqa: E402

LINE = os.path.join(samples_dir(), 'line_1x4.png')  # 128x32, rendered "Text2025" (labels.tsv)
LINE_TEXT = 'Text2025'
MAX_FILE_MB = 0.1  # the test server's upload limit: the 8 KB line passes, the 129 KB photo does not
# seconds for any one wait in the page or on the server: only a guard against a hang (a restore in the page takes
# about 10 s on a shared 2-core machine, several times that under load)
PAGE_TIMEOUT = 300.0
# Gradio's queue calls pandas options that pandas 3 deprecates (not ours to fix)
pytestmark = pytest.mark.filterwarnings('ignore::pandas.errors.Pandas4Warning')


@pytest.fixture
def not_an_image(tmp_path):
    path = tmp_path / 'notes.png'  # an image's name, text inside: passes the page's file-type filter
    path.write_text('these are notes, not pixels\n')
    return str(path)


# ---------------------------------------------------------------------------------------------- the handler
def test_restore_upload_line_sizes_and_text():
    """A 128x32 line: input shown as read, restored to 512x128, PP-OCRv4's reading before in the table."""
    page = web_page.restore_upload(TOLAPipeline(StandInRestorer()), LINE, 'line_1x4.png')
    assert page.input.shape == (32, 128, 3) and page.restored.shape == (128, 512, 3)
    assert page.overlay is None and len(page.rows) == 1
    number, prior, confidence, before, _ = page.rows[0]
    # StandInRestorer's prior is its noise seed: seeded by the uploaded file's name, as tola-infer seeds by file name
    assert (number, prior, confidence, before) == (1, str(image_noise_seed('line_1x4.png', 0)), 0.5, LINE_TEXT)
    assert 'line\\_1x4.png' in page.summary and '128×32 → 512×128' in page.summary  # Markdown: the name as text
    assert 'on cpu, torch' in page.summary


def test_a_photo_is_restored_as_a_photo_and_the_switch_says_so():
    """The bundled example photo (320x240) on a page started without --detect: 'auto' finds its lines and restores
    each in place (never squashed into one line); 'line' restores it as one line, as asked; a line stays a line."""
    photo = os.path.join(samples_dir(), 'photo.png')
    pipe = TOLAPipeline(StandInRestorer())
    page = web_page.restore_upload(pipe, photo, 'photo.png')
    assert page.detected and page.overlay is not None and len(page.rows) >= 3
    assert page.restored.shape == page.input.shape  # the photo at its own size, its lines restored in place
    assert 'as a photo:' in page.summary and 'kind auto' in page.summary
    as_line = web_page.restore_upload(pipe, photo, 'photo.png', kind='line')
    assert not as_line.detected and as_line.restored.shape[0] == 128 and 'as one text line' in as_line.summary
    assert not web_page.restore_upload(pipe, LINE, 'line_1x4.png').detected
    assert [looks_like_a_photo(h, w)
            for h, w in ((600, 900), (32, 128), (32, 32), (128, 512), (200, 300))] == [True, False, False, False, True]
    with pytest.raises(ValueError, match='kind must be one of'):
        web_page.restore_upload(pipe, LINE, kind='both')


def test_the_page_says_what_it_is_doing_and_the_time_left():
    """While a photo restored the page showed only an elapsed counter: Gradio's progress now gets what is being done
    (the detector, the lines found, each step of lines restored with the time left, the reading) and the fraction."""
    seen = []
    pipe = TOLAPipeline(StandInRestorer(), batch_size=1)
    page = web_page.restore_upload(pipe, os.path.join(samples_dir(), 'photo.png'), 'photo.png',
                                   progress=lambda fraction, desc: seen.append((fraction, desc)))
    lines, windows = len(page.rows), len(pipe.net.calls)
    assert seen[:2] == [(None, 'finding the text lines (PP-OCRv4)'),
                        (0.0, f'{lines} text line(s) found ({windows} windows of 128x512)')]
    steps = seen[2:-1]
    assert [fraction for fraction, _ in steps] == [(k + 1) / windows for k in range(windows)]
    for fraction, desc in steps:
        left = r', about \d+ s left' if fraction < 1 else ''
        assert re.fullmatch(rf'\d+ of {lines} line\(s\) restored, \d+ s{left}', desc), desc
    assert steps[-1][1].startswith(f'{lines} of {lines} line(s) restored')
    assert re.fullmatch(r'reading the lines with PP-OCRv4, before and after, \d+ s', seen[-1][1])


def test_restore_upload_refuses_non_image_and_too_large(not_an_image):
    pipe = TOLAPipeline(StandInRestorer())
    with pytest.raises(ValueError, match=r'notes\.png is not an image this demo can read: not a decodable image'):
        web_page.restore_upload(pipe, not_an_image, 'notes.png')
    with pytest.raises(
            ValueError, match=r'line_1x4\.png is too large: 128x32 pixels = 0\.0 megapixels, the limit '
            r'is 0\.001 \(the --max-megapixels option'):
        web_page.restore_upload(pipe, LINE, 'line_1x4.png', max_megapixels=0.001)
    assert not pipe.net.calls  # refused before the network ran


def test_draw_lines_outlines_each_detected_line():
    rgb = np.full((60, 100, 3), 255, np.uint8)
    line = LineResult('', 0.0, [], [], polygon=[[10, 20], [80, 20], [80, 40], [10, 40]])
    out = web_page.draw_lines(rgb, Restoration(rgb, [line], (60, 100), 1.0, detected=True))
    assert rgb.min() == 255  # the input is left alone
    assert out[30, 10, 2] < 128 and out[20, 45, 2] < 128  # on the outline: orange (anti-aliased), blue is low
    assert out[30, 45].min() == 255 and out[5, 90].min() == 255  # inside and outside the line: untouched


def test_cli_checks_arguments(capsys):
    for argv, message in ((['--port',
                            '70000'], '--port must be in [0, 65535]'), (['--max-megapixels', '0'],
                                                                        '--max-megapixels must be a finite number > 0'),
                          (['--max-file-mb', '-1'], '--max-file-mb must be a finite number > 0'),
                          (['--max-windows', '0'], '--max-windows must be a finite number > 0')):
        with pytest.raises(SystemExit):
            web_cli.parse_args(argv)
        assert message in capsys.readouterr().err
    args = web_cli.parse_args(['--model', 'm.safetensors', '--detect', '--port', '0'])
    assert (args.model, args.detect, args.port, args.host) == ('m.safetensors', True, 0, '127.0.0.1')


def test_cli_missing_model_is_one_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match='no such file|not found|does not exist'):
        web_cli.main(['--model', str(tmp_path / 'absent.safetensors'), '--port', '0'], block=False)


# ---------------------------------------------------------------------------------------------- the real page
@pytest.fixture(scope='module')
def chromium():
    found, reason = find_chromium()
    if found is None:
        print(f'SKIP browser tests: {reason}')
        pytest.skip(reason)
    driver = start_chromium(*found, width=1280, height=1100, timeout=PAGE_TIMEOUT)
    yield driver
    quit_chromium(driver)


@pytest.fixture(scope='module')
def demo_server(tmp_path_factory, chromium):
    """`tola-web --model MY_DEMO_COPY --port 0 --max-file-mb 0.1 --backend torch` on 127.0.0.1: the demo model under a
    name and folder of the user's own."""
    work = tmp_path_factory.mktemp('web_cwd')
    model = shutil.copy(demo_model_path(), work / 'my_model.safetensors')
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the demo net is faster on one thread on the shared machine
    cwd = os.getcwd()
    os.chdir(work)
    try:
        app = web_cli.main([
            '--model',
            str(model), '--port', '0', '--device', 'cpu', '--backend', 'torch', '--max-file-mb',
            str(MAX_FILE_MB)
        ], block=False)
    finally:
        os.chdir(cwd)
    try:
        yield app.local_url
    finally:
        app.close()
        torch.set_num_threads(threads)


def test_page_restores_an_uploaded_line(demo_server, chromium, tmp_path):
    state = restore_in_page(chromium, demo_server, LINE, timeout=PAGE_TIMEOUT)
    chromium.save_screenshot(str(tmp_path / 'tola_web.png'))
    assert state.status.startswith('Restored line_1x4.png as one text line (kind auto: line-shaped) in'), state.status
    assert state.restored_size == (512, 128)  # the 128x32 line at the network's height, aspect kept
    assert LINE_TEXT in state.table  # PP-OCRv4's reading of the input
    text = page_text(chromium)
    assert 'tiny demo backbone' in text and "not the paper's weights" in text  # the demo model, by its weights
    runtime = text[text.index('runtime: cpu,'):].split('\n')[0]  # where it runs, and why (RuntimePlan.describe)
    assert re.match(r'runtime: cpu, torch fp32 \(asked backend torch, precision fp32\): \w', runtime), runtime
    assert not urls_off_host(state.resources, '127.0.0.1')  # fonts, scripts, images: all from the demo server
    shot = read_image_file(str(tmp_path / 'tola_web.png'))  # the page was drawn: a full window, not a blank one
    width, height = chromium.execute_script('return [window.innerWidth, window.innerHeight]')  # the viewport
    assert shot.shape[:2] == (height, width) and len(np.unique(shot.reshape(-1, 3), axis=0)) > 50


def test_page_reports_a_non_image_and_keeps_serving(demo_server, chromium, not_an_image):
    state = restore_in_page(chromium, demo_server, not_an_image, timeout=PAGE_TIMEOUT)
    assert state.status.startswith('Error: notes.png is not an image this demo can read'), state.status
    assert state.restored_size is None
    with urllib.request.urlopen(demo_server, timeout=PAGE_TIMEOUT) as response:  # the server is still up
        assert response.status == 200


def test_page_refuses_a_file_over_the_upload_limit(demo_server, chromium, tmp_path):
    """Gradio itself refuses an upload over --max-file-mb, with the file's name in the page's error toast."""
    big = shutil.copy(os.path.join(samples_dir(), 'photo.png'), tmp_path / 'big.png')  # 129 KB > MAX_FILE_MB
    state = restore_in_page(chromium, demo_server, str(big), timeout=PAGE_TIMEOUT)
    assert 'exceed the maximum allowed size' in state.status and 'big.png' in state.status, state.status


# ------------------------------------------------------------------- issue 33 item 7: bounded, cleaned-up uploads
def _post_files(url, files, headers=None):
    """POST ``files`` ([(name, bytes)]) as one multipart form, as the page's upload does (with more ``headers``);
    -> (status, body)."""
    import urllib.error
    boundary = 'tolawebboundary'
    body = b''.join(b'--%s\r\nContent-Disposition: form-data; name="files"; filename="%s"\r\nContent-Type: image/png'
                    b'\r\n\r\n%s\r\n' % (boundary.encode(), name.encode(), data) for name, data in files)
    body += b'--%s--\r\n' % boundary.encode()
    request = urllib.request.Request(
        url, data=body, method='POST',
        headers={'Content-Type': f'multipart/form-data; boundary={boundary}', **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=PAGE_TIMEOUT) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_python_of_docs_web_md_runs_as_written(tmp_path, capsys):
    """docs/web.md, "Python", literally: only the model, the image and the port are this test's (a tiny merged
    model, the bundled line, a free port). The page is served at the URL it prints, and closing removes its folder."""
    from tola_plugin.web.server import free_port
    text = open(os.path.join(os.path.dirname(__file__), '..', 'docs', 'web.md'), encoding='utf-8').read()
    code = re.search(r'## Python\n\n```python\n(.*?)```', text, re.S).group(1)
    port = free_port('127.0.0.1')
    for doc, mine in (('MERGED.safetensors', write_tiny_merged(tmp_path / 'tiny.safetensors')), ('line.png', LINE),
                      ('port=7860', f'port={port}')):
        assert doc in code
        code = code.replace(doc, mine)
    names = {}
    exec(compile(code, 'docs/web.md', 'exec'), names)  # noqa: S102 (the page's own code)
    assert names['result'].restored.shape[:2] == (128, 512) and names['result'].summary
    assert capsys.readouterr().out.splitlines()[-1] == f'http://127.0.0.1:{port}/'
    assert names['server'].closed and not os.path.exists(names['page'].folder)


def test_uploads_are_bounded_per_request_and_removed_when_the_server_stops(tmp_path, capsys):
    model = write_tiny_merged(tmp_path / 'tiny.safetensors')
    app = web_cli.main(['--model', model, '--port', '0', '--device', 'cpu', '--max-file-mb',
                        str(MAX_FILE_MB)], block=False)
    folder = app.page.folder
    out = capsys.readouterr().out  # one line of ours where the page is; none of Gradio's advice for Python users
    assert f'tola-web: serving {app.local_url} (this machine only); Ctrl-C stops it' in out, out
    assert 'share=True' not in out and 'Running on local URL' not in out, out
    try:
        url = app.local_url.rstrip('/') + '/gradio_api/upload'
        part = os.urandom(60_000)  # each file under the 0.1 MB per-file limit
        status, body = _post_files(url, [('a.png', part)])
        assert status == 200 and body.count(folder) == 1, body  # stored in the server's own folder
        stored = sorted(glob.glob(os.path.join(folder, '**', '*'), recursive=True))
        status, body = _post_files(url, [(f'{i}.png', part) for i in range(3)])  # 180 KB in one request
        assert status == 413 and 'one request may carry one image of at most 0.1 MB' in body, (status, body)
        assert sorted(glob.glob(os.path.join(folder, '**', '*'), recursive=True)) == stored  # nothing kept
    finally:
        app.close()
    assert not os.path.exists(folder)


# ------------------------------------------------- issue 43 item 6: bounds that cannot be walked around; no Markdown
def _raw_request(url, head, body=b''):
    """Send ``head`` (the request line and headers, without the blank line) and ``body`` as given, byte for byte
    (urllib would fix the headers); -> (status, body)."""
    import socket
    from urllib.parse import urlsplit
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=PAGE_TIMEOUT) as sock:
        sock.sendall(head.encode('latin-1') + b'\r\n\r\n' + body)
        data = b''
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            data += chunk
    status = int(data.split(b' ', 2)[1]) if data.startswith(b'HTTP/') else 0
    return status, data.split(b'\r\n\r\n', 1)[-1].decode('utf-8', 'replace')


def _stored(folder):
    return sorted(p for p in glob.glob(os.path.join(folder, '**', '*'), recursive=True) if os.path.isfile(p))


STORED_MB = 0.9  # the page's own files (the examples' copies, 0.61 MB) and 5 uploads of 60 KB


@pytest.fixture
def upload_server(tmp_path):
    """tola-web with the tiny model, 0.1 MB per file and STORED_MB stored in all; yields (upload url, folder, app)."""
    model = write_tiny_merged(tmp_path / 'tiny.safetensors')
    app = web_cli.main([
        '--model', model, '--port', '0', '--device', 'cpu', '--max-file-mb',
        str(MAX_FILE_MB), '--max-stored-mb',
        str(STORED_MB)
    ], block=False)
    try:
        yield app.local_url.rstrip('/') + '/gradio_api/upload', app.page.folder, app
    finally:
        app.close()


def test_a_chunked_body_with_a_small_length_is_refused(upload_server):
    """Content-Length: 10 with Transfer-Encoding: chunked stored 60 MB under --max-file-mb 2 (the server follows the
    encoding): refused before the body is read."""
    url, folder, _ = upload_server
    boundary = 'tolawebboundary'
    part = b''.join(b'--%s\r\nContent-Disposition: form-data; name="files"; filename="%d.png"\r\nContent-Type: '
                    b'image/png\r\n\r\n%s\r\n' % (boundary.encode(), i, os.urandom(60_000))
                    for i in range(5)) + b'--%s--\r\n' % boundary.encode()  # 5 files, each under the per-file bound
    chunked = b''.join(b'%x\r\n%s\r\n' % (len(part[i:i + 50_000]), part[i:i + 50_000])
                       for i in range(0, len(part), 50_000)) + b'0\r\n\r\n'
    path, before = url.split('/', 3)[3], _stored(folder)  # the page's own files: the examples
    head = (f'POST /{path} HTTP/1.1\r\nHost: {url.split("/")[2]}\r\nContent-Length: 10\r\nTransfer-Encoding: chunked'
            f'\r\nContent-Type: multipart/form-data; boundary={boundary}')
    status, body = _raw_request(url, head, chunked)
    assert status == 400 and 'both a Content-Length and a Transfer-Encoding' in body, (status, body)
    assert _stored(folder) == before


def test_a_body_that_grows_past_the_bound_while_read_is_cut():
    """Whatever the headers say, the body is counted as the app reads it: past one file's worth the read fails, the
    app's answer is replaced by 413."""
    import asyncio
    sent, reads = [], []

    async def app(scope, receive, send):  # reads the whole body, as an upload route does, then answers 200
        while True:
            message = await receive()
            reads.append(len(message.get('body', b'')))
            if not message.get('more_body'):
                break
        await send({'type': 'http.response.start', 'status': 200, 'headers': []})
        await send({'type': 'http.response.body', 'body': b'stored'})

    chunks = [{'type': 'http.request', 'body': b'x' * 50_000, 'more_body': True} for _ in range(40)]

    async def receive():
        return chunks.pop(0)

    async def send(message):
        sent.append(message)

    guard = http_bounds.RequestGuard(app, max_file_mb=0.1)
    scope = {
        'type': 'http', 'method': 'POST', 'path': '/gradio_api/upload', 'headers': [(b'content-length', b'10'),
                                                                                    (b'host', b'127.0.0.1:1')]
    }
    asyncio.run(guard(scope, receive, send))
    assert sent[0]['status'] == 413 and b'one request may carry one image of at most 0.1 MB' in sent[1]['body']
    assert sum(reads) <= guard.max_bytes + 50_000 and len(sent) == 2  # the read stopped at the bound; no 200


def test_uploads_from_another_site_are_refused(upload_server):
    url, folder, _ = upload_server
    part, before = [('a.png', os.urandom(20_000))], _stored(folder)
    for headers in ({'Origin': 'http://evil.example'}, {'Origin': 'null'}, {'Sec-Fetch-Site': 'cross-site'}):
        status, body = _post_files(url, part, headers)
        assert status == 403 and 'another site' in body, (headers, status, body)
    assert _stored(folder) == before
    own = url.split('/gradio_api')[0]
    status, body = _post_files(url, part, {'Origin': own, 'Sec-Fetch-Site': 'same-origin'})  # the page itself
    assert status == 200 and body.count(folder) == 1, body


def test_stored_bytes_are_bounded_in_all_and_no_waiting_upload_is_removed(upload_server):
    """Issue 48 item 4: making room removed the oldest files, another visitor's upload not yet restored among them.
    Now everything in the folder counts (the page's own files too), an upload waiting for its restoration is kept, a new
    upload that does not fit is refused (507, saying why), and only once the waiting ones are older than
    PENDING_MAX_AGE_S (the store's clock, injected) do they go, the oldest first."""
    url, folder, app = upload_server
    store, bound, kept = app.page.store, STORED_MB * 2**20, []
    page = set(_stored(folder))
    for i in range(6):  # 6 x 60 KB: the 6th does not fit beside 5 waiting uploads and the page's files
        status, body = _post_files(url, [(f'{i}.png', os.urandom(60_000))])
        assert sum(os.path.getsize(p) for p in _stored(folder)) <= bound
        if i < 5:
            assert status == 200, body
            kept.append(json.loads(body)[0])
            # each upload a second younger than the one before, set: uploads within one tick of the filesystem's
            # clock (coarse on many kernels; a fast machine) would have the same age
            os.utime(kept[-1], ns=(os.stat(kept[0]).st_mtime_ns + i * 10**9, ) * 2)
    assert status == 507 and 'do not fit' in body and 'uploads not yet restored' in body and '--max-stored-mb' in body
    assert all(os.path.exists(p) for p in kept) and page <= set(_stored(folder))  # nobody's upload was removed
    now = os.stat(kept[0]).st_mtime
    store.clock = lambda: now + uploads.PENDING_MAX_AGE_S + 0.5  # the first has waited too long, the others not
    status, body = _post_files(url, [('6.png', os.urandom(60_000))])
    assert status == 200, body
    assert not os.path.exists(kept[0]) and all(os.path.exists(p) for p in kept[1:]) and page <= set(_stored(folder))
    assert sum(os.path.getsize(p) for p in _stored(folder)) <= bound
    status = web_page.restore_request(None, store, {'path': kept[0], 'orig_name': '0.png'}, 'wavelet', 'auto')[-1]
    assert status.startswith('**Error:** 0.png is no longer on the server') and 'removed to make room' in status \
        and '--max-stored-mb' in status, status  # not "image file not found"


def _upload_into(folder, name, rgb):
    """An upload as Gradio stores it: ``<folder>/<hash>/<name>`` -> its payload."""
    path = os.path.join(folder, f'{abs(hash(name)):x}', name)
    os.makedirs(os.path.dirname(path))
    import cv2
    cv2.imwrite(path, rgb[..., ::-1])
    return {'path': path, 'orig_name': name}


def test_restores_count_in_the_bound_and_only_finished_files_make_room(tmp_path):
    """Issue 48 item 4: each restore stored Gradio's copies of the input and output uncounted (40 restores of one
    upload: 5.3 MB under a 2 MB bound). The page writes the images it shows into the store itself, counted; to make
    room it removes finished files (shown images, restored uploads), never an upload still waiting."""
    pipe = TOLAPipeline(StandInRestorer())
    folder = str(tmp_path / 'store')
    os.makedirs(folder)
    store = uploads.Store(folder, max_mb=0.25)
    rng = np.random.default_rng(0)
    waiting = _upload_into(folder, 'waiting.png', rng.integers(0, 256, (32, 128, 3), dtype=np.uint8))
    for user in range(20):  # 20 visitors, each one upload restored twice (another colour fix): noise, large PNGs
        payload = _upload_into(folder, f'{user}.png', rng.integers(0, 256, (32, 128, 3), dtype=np.uint8))
        for color_fix in ('wavelet', 'none'):
            shown_input, restored, _, _, status = web_page.restore_request(pipe, store, payload, color_fix, 'line')
            assert status.startswith('Restored'), status
            assert os.path.exists(restored) and os.path.dirname(os.path.dirname(restored)) == os.path.realpath(folder)
            assert read_image_file(restored).shape[:2] == (128, 512)
            assert store.used() <= 0.25 * 2**20, store.used()
    assert os.path.exists(waiting['path'])  # the upload nobody restored yet stays
    status = web_page.restore_request(pipe, store, waiting, 'wavelet', 'line')[-1]
    assert status.startswith('Restored **waiting.png**'), status
    huge = _upload_into(folder, 'huge.png', rng.integers(0, 256, (128, 1024, 3), dtype=np.uint8))
    status = web_page.restore_request(pipe, uploads.Store(folder, max_mb=0.05), huge, 'wavelet', 'line')[-1]
    assert status.startswith('**Error:** ') and 'do not fit' in status, status  # said, never over the bound


def test_requests_under_another_name_are_refused(upload_server):
    """Issue 48 item 4: the origin guard compared Origin with Host only, so a DNS-rebinding page (Host and Origin
    evil.example:PORT) was served. Host must be a name the server was started for, localhost or an IP address."""
    url, folder, app = upload_server
    port = url.split('/')[2].rsplit(':', 1)[1]
    before = _stored(folder)
    for host in (f'evil.example:{port}', 'evil.example', f'127.0.0.1.evil.example:{port}', ''):
        status, body = _raw_request(url, f'GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close')
        assert status == 403 and 'DNS rebinding' in body, (host, status, body)
        status, body = _post_files(url, [('a.png', b'x' * 100)], {'Host': host, 'Origin': f'http://{host}'})
        assert status == 403 and 'DNS rebinding' in body, (host, status, body)
    assert _stored(folder) == before
    for host in (f'127.0.0.1:{port}', f'localhost:{port}', f'LOCALHOST.:{port}', f'[::1]:{port}', f'10.1.2.3:{port}'):
        status, body = _raw_request(url, f'GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close')
        assert status == 200, (host, status, body[:200])
    assert app.page.blocks.server.config.http is http_bounds.BoundedHTTP  # the bounded connections below serve the page


class _FakeLoop:
    """The clock of a connection: ``call_later`` records the timers, the test fires them."""

    def __init__(self):
        self.timers = []

    def call_later(self, delay, callback):
        self.timers.append(_Timer(delay, callback))
        return self.timers[-1]

    def create_task(self, coro):  # the request's answer: not run here
        coro.close()
        return _Task()


class _Task:

    def add_done_callback(self, done):
        pass


class _Timer:

    def __init__(self, delay, callback):
        self.delay, self.fire, self.cancelled = delay, callback, False

    def cancel(self):
        self.cancelled = True


class _FakeTransport:

    def __init__(self):
        self.written, self.closed = b'', False

    def write(self, data):
        self.written += data

    def close(self):
        self.closed = True

    def is_closing(self):
        return self.closed

    def get_extra_info(self, name, default=None):
        return {'peername': ('10.0.0.1', 5555), 'sockname': ('127.0.0.1', 7860)}.get(name, default)

    def set_protocol(self, protocol):
        pass

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


def test_half_open_requests_are_closed_and_connections_bounded(monkeypatch):
    """Issue 48 item 4: a request whose headers never end held its connection for ever (1,500 descriptors). Headers
    must arrive within HEADER_TIMEOUT_S (a timer armed once, not by each byte: the loop's clock is the test's), and at
    most MAX_CONNECTIONS are open."""
    import uvicorn
    from uvicorn.server import ServerState

    async def app(scope, receive, send):
        await send({'type': 'http.response.start', 'status': 200, 'headers': []})
        await send({'type': 'http.response.body', 'body': b'ok'})

    config, state, loop = uvicorn.Config(app, http=http_bounds.BoundedHTTP, lifespan='off'), ServerState(), _FakeLoop()
    slow = http_bounds.BoundedHTTP(config, state, {}, _loop=loop)
    slow.connection_made(_FakeTransport())
    for byte in b'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n':  # a byte at a time: the timer stays the first one
        slow.data_received(bytes([byte]))
    assert len(loop.timers) == 1 and loop.timers[0].delay == http_bounds.HEADER_TIMEOUT_S
    loop.timers[0].fire()  # the time is up
    assert slow.transport.closed and slow.transport.written.startswith(b'HTTP/1.1 408 ')
    assert b'request headers not received within 10 s' in slow.transport.written
    whole = http_bounds.BoundedHTTP(config, state, {}, _loop=loop)
    whole.connection_made(_FakeTransport())
    whole.data_received(b'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
    assert loop.timers[1].cancelled and not whole.transport.closed  # the headers came: no timeout while it answers
    monkeypatch.setattr(http_bounds, 'MAX_CONNECTIONS', len(state.connections))
    extra = http_bounds.BoundedHTTP(config, state, {}, _loop=loop)
    extra.connection_made(_FakeTransport())
    assert extra.transport.closed and len(loop.timers) == 2  # one over the bound: closed when accepted


def test_a_request_body_that_stops_arriving_is_cut():
    """Issue 48: after its headers, a body sent slowly and then stopped held its connection for ever. Each chunk re-arms
    BODY_IDLE_TIMEOUT_S (the loop's clock is the test's); when the server itself stops reading (its buffer full: flow
    control), the pause is not the client's and the connection stays."""
    import uvicorn
    from uvicorn.server import ServerState

    async def app(scope, receive, send):
        pass

    config, state, loop = uvicorn.Config(app, http=http_bounds.BoundedHTTP, lifespan='off'), ServerState(), _FakeLoop()
    upload = http_bounds.BoundedHTTP(config, state, {}, _loop=loop)
    upload.connection_made(_FakeTransport())
    upload.data_received(b'POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n0123456789')
    assert loop.timers[0].cancelled and loop.timers[-1].delay == http_bounds.BODY_IDLE_TIMEOUT_S  # headers done: body's
    upload.data_received(b'0123456789')
    assert loop.timers[-2].cancelled and not loop.timers[-1].cancelled  # a chunk: the idle time starts again
    upload.flow.pause_reading()
    loop.timers[-1].fire()
    assert not upload.transport.closed and len(loop.timers) == 4  # the server's pause: re-armed, not cut
    upload.flow.resume_reading()
    loop.timers[-1].fire()
    assert upload.transport.closed and upload.transport.written.startswith(b'HTTP/1.1 408 ')
    assert b'request body stalled: nothing received for 30 s' in upload.transport.written


def test_names_on_the_page_are_text_not_markdown():
    name = '[link](http://evil.example) **b** <img src=x>.png'
    page = web_page.restore_upload(TOLAPipeline(StandInRestorer()), LINE, name)
    assert not re.search(r'(?<!\\)[\[<]', page.summary.replace('**', ''))  # no link, no tag: all escaped
    assert r'\[link\]\(http\://evil.example\) \*\*b\*\* \<img src=x\>.png' in page.summary
    status = web_page.error_status(ValueError(f'{name} is not an image this demo can read'))
    assert status.startswith('**Error:** \\[link\\]') and not re.search(r'(?<!\\)[\[<]', status)
    assert '\x1b' not in web_page.error_status(ValueError('a\x1b[2J.png'))
