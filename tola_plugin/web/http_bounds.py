"""The HTTP bounds in front of the web page (``server.launch`` installs them): ``RequestGuard`` (ASGI middleware:
names, origins, body sizes, the store's room) and ``BoundedHTTP`` (uvicorn's connection with header and body
timeouts and a connection cap)."""
import contextlib
import ipaddress
from typing import Iterable, Optional

import h11
from starlette.formparsers import MultiPartException
from uvicorn.protocols.http.h11_impl import H11Protocol

from tola_plugin.web.uploads import Store, StoreFull

UPLOAD_MAX_MB = 20.0  # larger uploads are refused by the server before they are stored
HEADER_TIMEOUT_S = 10.0  # a request's line and headers must arrive within this; half-open requests held 1,500 fds
BODY_IDLE_TIMEOUT_S = 30.0  # a request body that stops arriving for this long is cut (the rest of a stalled upload)
MAX_CONNECTIONS = 256  # connections open at once; one more is closed when accepted
LOCAL_NAMES = ('localhost', '127.0.0.1', '::1')  # names of this machine, served whatever --host is
FORM_BYTES = 64 * 1024  # a request may carry one file of max_file_mb plus this much multipart form around it


class BodyTooLarge(MultiPartException):
    """A request body that grew past its bound while it was read. Raised from the middleware's ``receive``, a
    ``MultiPartException`` so that Gradio's upload route (starlette's multipart parser) deletes the files it had begun
    to write; the middleware answers 413 in place of whatever the route then sends."""


class RequestGuard:
    """ASGI middleware in front of the page (``launch``); every refusal is answered before the app sees the request:

    - **Names the server was not started for** (403): a ``Host`` that is not one of ``hosts`` (nor an IP address): a
      page of another site whose name was pointed at this machine (DNS rebinding) is same-origin to the browser, so
      ``Origin`` alone lets it read and post everything. ``hosts`` None: no check.
    - **Cross-origin writes** (403): a POST (any method but GET, HEAD, OPTIONS) whose ``Origin`` is not this page's
      (``Host``), or that the browser marks ``Sec-Fetch-Site: cross-site``: a form on any other web page the user
      visits could post uploads here (a multipart POST is a "simple" request, sent without asking).
    - **Bodies over one file's worth** (413): ``Content-Length`` over one file of ``max_file_mb`` plus FORM_BYTES,
      before any of it is read; a body that grows past that while it is read, whatever its headers said, is cut
      there (the route's partial files removed); a chunked body without a length is refused (411), one with both a
      length and ``Transfer-Encoding`` too (400: the server would follow the encoding and ignore the length).
    - **Stored bytes** (``store``): an upload is let in only when it fits in the store's bound once finished files
      are removed (``Store.reserve``), else 507 saying why; its length stays reserved while it is read.
    """

    def __init__(self, app, max_file_mb: float, store: Optional[Store] = None, hosts: Optional[Iterable[str]] = None):
        self.app, self.max_file_mb, self.store = app, max_file_mb, store
        self.hosts = None if hosts is None else frozenset(_host_name(h.encode('latin-1')) for h in hosts)
        self.max_bytes = int(max_file_mb * 2**20) + FORM_BYTES

    async def __call__(self, scope, receive, send):
        if scope['type'] not in ('http', 'websocket'):
            return await self.app(scope, receive, send)
        headers = dict(scope.get('headers') or ())
        refusal = self._refusal(scope, headers)
        if refusal:
            if scope['type'] == 'websocket':
                return await send({'type': 'websocket.close', 'code': 1008})
            return await _answer(send, *refusal)
        if scope['type'] == 'websocket' or scope.get('method') in SAFE_METHODS:
            return await self.app(scope, receive, send)
        if self.store is None or not scope.get('path', '').endswith('/upload'):
            return await self._bounded(scope, receive, send)
        length = int(headers.get(b'content-length', b'0'))
        try:
            self.store.reserve(length)
        except StoreFull as err:
            return await _answer(send, 507, f'upload refused: {err}')
        try:
            return await self._bounded(scope, receive, send)
        finally:
            self.store.release(length)

    def _refusal(self, scope, headers):
        """(status, message) of a request refused from its headers alone, else None."""
        host = headers.get(b'host', b'')
        if self.hosts is not None and not _served_name(_host_name(host), self.hosts):
            return 403, (f'refused: this server is not {host.decode("latin-1")!r} (a page of another site whose name '
                         f'leads here: DNS rebinding); it answers to {", ".join(sorted(self.hosts))} and its IP '
                         'addresses (tola-web --allowed-host NAME adds a name)')
        if scope.get('method') not in SAFE_METHODS or scope['type'] == 'websocket':
            origin = headers.get(b'origin')
            if origin is not None and _netloc(origin) != host.decode('latin-1').lower():
                return 403, (f'refused: a request from another site ({origin.decode("latin-1")!r}); this page '
                             'takes uploads from itself only')
            if headers.get(b'sec-fetch-site') == b'cross-site':
                return 403, 'refused: a request from another site; this page takes uploads from itself only'
        if scope['type'] == 'websocket':
            return None
        length = headers.get(b'content-length')
        chunked = b'chunked' in headers.get(b'transfer-encoding', b'').lower()
        if chunked and length is not None:
            return 400, 'upload refused: a request with both a Content-Length and a Transfer-Encoding'
        if chunked:
            return 411, 'upload refused: a request body needs a Content-Length'
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            size = f'{int(length) / 1e6:.1f} MB' if length.isdigit() else f'a Content-Length of {length!r}'
            return 413, self._too_large(size)
        return None

    def _too_large(self, size: str) -> str:
        return (f'upload refused: the request carries {size}; one request may carry one image of at most '
                f'{self.max_file_mb:g} MB (tola-web --max-file-mb)')

    async def _bounded(self, scope, receive, send):
        """The app with a body counted as it is read: past ``max_bytes`` the read fails (BodyTooLarge) and 413 is
        sent instead of the app's answer."""
        state = {'read': 0, 'over': False, 'started': False}

        async def counted():
            message = await receive()
            if message['type'] == 'http.request':
                state['read'] += len(message.get('body', b''))
                if state['read'] > self.max_bytes:
                    state['over'] = True
                    raise BodyTooLarge(self._too_large(f'more than {self.max_bytes / 1e6:.1f} MB'))
            return message

        async def guarded_send(message):
            if state['over']:
                return  # the 413 below answers instead
            state['started'] = state['started'] or message['type'] == 'http.response.start'
            await send(message)

        try:
            await self.app(scope, counted, guarded_send)
        except BodyTooLarge:
            pass
        if state['over'] and not state['started']:
            await _answer(send, 413, self._too_large(f'more than {self.max_bytes / 1e6:.1f} MB'))


#: a request that only reads (no upload, no restore) is never refused for its origin
SAFE_METHODS = ('GET', 'HEAD', 'OPTIONS')


def _netloc(origin: bytes) -> str:
    """'host:port' of an Origin header ('null' and anything unparsable: '')."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(origin.decode('latin-1'))
    except ValueError:
        return ''
    default = {'http': 80, 'https': 443}.get(parts.scheme)
    netloc = (parts.netloc or '').lower()
    return netloc[:-len(f':{default}')] if default and netloc.endswith(f':{default}') else netloc


async def _answer(send, status: int, message: str):
    body = message.encode()
    await send({
        'type': 'http.response.start', 'status': status, 'headers': [(b'content-type', b'text/plain; charset=utf-8'),
                                                                     (b'content-length', str(len(body)).encode()),
                                                                     (b'connection', b'close')]
    })
    await send({'type': 'http.response.body', 'body': body})


def _host_name(host: bytes) -> str:
    """The name of a Host header, without its port and brackets, lower case ('[::1]:7860' -> '::1')."""
    name = host.decode('latin-1').strip().lower()
    if name.startswith('['):
        return name[1:name.find(']')] if ']' in name else name
    return (name.rsplit(':', 1)[0] if name.count(':') == 1 else name).rstrip('.')


def _served_name(name: str, hosts) -> bool:
    """Whether ``name`` (a Host's) is one the server answers to: one of ``hosts``, or an IP address (typed by the
    visitor: a rebinding page has a name of its own)."""
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in hosts


class BoundedHTTP(H11Protocol):
    """uvicorn's HTTP/1.1 connection with bounds of its own (uvicorn has neither a header nor a body timeout: half-open
    requests held 1,500 descriptors): a request's line and headers must arrive within HEADER_TIMEOUT_S of the
    connection or of the previous response, and its body must not pause for BODY_IDLE_TIMEOUT_S while the server
    reads it (each, 408 and closed); at most MAX_CONNECTIONS are open (one more is closed at once)."""

    timer = None
    timer_for = None  # 'headers' (armed once per request) or 'body' (re-armed by each chunk)

    def connection_made(self, transport):
        super().connection_made(transport)
        if len(self.connections) > MAX_CONNECTIONS:
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.timer_for == 'body':
            self._stop_timer()  # a chunk came: the body's idle time starts again
        self._arm()

    def connection_lost(self, exc):
        self._stop_timer()
        super().connection_lost(exc)

    def _waiting_for(self):
        """'headers' or 'body' while the client owes them, else None (answering, or closed)."""
        if self.transport.is_closing():
            return None
        return {h11.IDLE: 'headers', h11.SEND_BODY: 'body'}.get(self.conn.their_state)

    def _arm(self):
        waiting = self._waiting_for()
        if waiting != self.timer_for:
            self._stop_timer()
        if waiting is not None and self.timer is None:
            delay = HEADER_TIMEOUT_S if waiting == 'headers' else BODY_IDLE_TIMEOUT_S
            self.timer, self.timer_for = self.loop.call_later(delay, self._timed_out), waiting

    def _stop_timer(self):
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.timer_for = None

    def _timed_out(self):
        waiting, self.timer, self.timer_for = self.timer_for, None, None
        if waiting != self._waiting_for():
            return
        if waiting == 'body' and self.flow.read_paused:  # the server is not reading (its buffer is full): not idle
            self._arm()
            return
        body = (f'request headers not received within {HEADER_TIMEOUT_S:g} s' if waiting == 'headers' else
                f'request body stalled: nothing received for {BODY_IDLE_TIMEOUT_S:g} s').encode()
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # nothing answered yet: say why
            self.transport.write(b'HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\nconnection: close\r\n'
                                 b'content-length: %d\r\n\r\n%s' % (len(body), body))
        self.transport.close()


@contextlib.contextmanager
def bounded_connections(http_server):
    """Gradio's servers started within the block speak ``BoundedHTTP`` (Gradio makes uvicorn's Config itself and
    takes no protocol: its Server class is the one place to set it)."""
    plain = http_server.Server

    class Server(plain):

        def __init__(self, config, *args, **kwargs):
            config.http = BoundedHTTP
            super().__init__(config, *args, **kwargs)

    http_server.Server = Server
    try:
        yield
    finally:
        http_server.Server = plain
