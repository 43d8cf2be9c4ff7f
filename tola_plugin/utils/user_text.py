"""One rule for text we did not write (file names, labels, error messages naming them) on its way to a terminal or
into a record: no control character gets there raw.

A file may be named ``\\x1b]0;owned\\x07a.png`` or ``\\x1b[2J.png``: printed raw, the name sets the terminal's title,
clears the screen or hides the rest of the line; stored raw in a CSV, it does the same to whoever ``cat``s the file.
``UNSAFE`` holds the characters that must not pass: the C0 and C1 controls and DEL (ESC, BEL, CR, ...; Unicode's
``Cc``), the bidirectional overrides that make a name read otherwise than it is (U+202A-U+202E, U+2066-U+2069, the
marks U+200E/U+200F), the line and paragraph separators, and the lone surrogates by which Python carries the bytes of
a name that is not UTF-8 (printing those raises UnicodeEncodeError).

- ``say(message)``: the one way the package speaks to the user: one line, ``shown``, on stderr (stdout for a
  tool's result lines), above a progress bar when one is drawn. Every note, warning, error line, progress line and
  summary goes through it (``make lint``: OWN006); a table or a JSON document a tool prints as its result is not a
  message. Inside a BasicSR run, the models, datasets and the glue's patches of its loops log with BasicSR's root
  logger, which also writes the run's log file.
- ``shown(text)``: for a terminal or a log: each unsafe character as its escape (``\\x1b``, ``\\u202e``, ``\\udcff``),
  the rest as it is. Every message the command lines print about user files goes through it (``say``), as the web
  page's Markdown does through ``markdown_text``.
- ``recorded(text)`` / ``unrecorded(text)``: the same escapes, reversible (a backslash is written ``\\\\``): CSV cells
  (``atomic_files.write_csv``; ``read_csv`` reads the original back). JSON records escape the same characters in
  JSON's own ``\\uXXXX`` form (``json_text``), which every JSON reader reads back.
"""
import re
import sys

UNSAFE = re.compile('[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]')
#: UNSAFE but the C0 controls, which ``json.dumps`` escapes in strings itself (a raw newline in its output is layout)
_JSON_UNSAFE = re.compile('[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]')
_RECORDED = re.compile(r'\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4})')
#: what Markdown (GitHub's, as Gradio renders it) or the HTML it passes reads as syntax inside a line: emphasis, code,
#: links and images, autolinks (':'), tags and entities, tables, strike-through, math
MARKDOWN_SPECIAL = re.compile(r'([\\`*_{}\[\]()!|<>~&$:])')


def _escape(match) -> str:
    code = ord(match.group())
    return f'\\x{code:02x}' if code < 0x100 else f'\\u{code:04x}'


def shown(text) -> str:
    """``text`` (any object: its ``str``) safe for a terminal: every UNSAFE character as its escape."""
    return UNSAFE.sub(_escape, str(text))


def say(message, stream=None) -> None:
    """``message`` (any object: its ``str``) to the user as one line, every UNSAFE character escaped (``shown``: a
    newline too), flushed; on stderr, or ``stream`` (``sys.stdout`` for a tool's result lines). Written through
    tqdm's ``write`` once tqdm is imported, so that a progress bar on the terminal stays below the line."""
    text, out = shown(message), sys.stderr if stream is None else stream
    tqdm = sys.modules.get('tqdm')  # never imported: no bar can be drawn
    if tqdm is None:
        print(text, file=out, flush=True)
    else:
        tqdm.tqdm.write(text, file=out)
        out.flush()


def note(message) -> None:
    """A note of the library itself (not of a command line's own work) on stderr: ``say('tola-plugin: ' + message)``."""
    say(f'tola-plugin: {message}')


def recorded(text: str) -> str:
    """``text`` as a record stores it: ``shown``'s escapes, and a backslash doubled, so that ``unrecorded`` gives the
    text back exactly."""
    return UNSAFE.sub(_escape, text.replace('\\', '\\\\'))


def unrecorded(text: str) -> str:
    """Inverse of ``recorded``."""

    def back(match) -> str:
        body = match.group(1)
        return '\\' if body == '\\' else chr(int(body[1:], 16))

    return _RECORDED.sub(back, text)


def json_text(text: str) -> str:
    """A JSON document (``json.dumps(..., ensure_ascii=False)``) with every UNSAFE character still in it (JSON
    escapes only C0 controls) written as ``\\uXXXX``: valid JSON, read back unchanged. Those characters can only
    stand inside JSON strings, where the escape means the same character."""
    return _JSON_UNSAFE.sub(lambda m: f'\\u{ord(m.group()):04x}', text)


def markdown_text(text) -> str:
    """``text`` for Markdown (and the HTML it becomes): ``shown``, then every character Markdown or HTML would
    read as syntax (links, emphasis, code, tags, entities) backslash-escaped, so it shows as written."""
    return MARKDOWN_SPECIAL.sub(r'\\\1', shown(text))
