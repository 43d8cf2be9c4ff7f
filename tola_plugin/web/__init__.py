"""The web demo (tola-web, docs/web.md): the page (``page``: its layout and one request's work), what it stores
(``uploads``: one bounded folder per server), the HTTP bounds in front of it (``http_bounds``), the server that runs
them (``server``: ``launch``, ``serve``) and its examples (``examples``: the sample packages' images); the headless
Chromium that drives it, for the browser test and docs/web.md's screenshot, is the lab's (``tola_lab.browser``).

Nothing leaves the machine: Gradio's analytics and version check are off (GRADIO_ANALYTICS_ENABLED=False, set here,
before any module of the folder imports gradio), its default theme's fonts are served by the app itself, the Hugging
Face hub is put offline, and no share link is made."""
import os

os.environ['GRADIO_ANALYTICS_ENABLED'] = 'False'  # no telemetry, no version check (read when gradio is imported)
os.environ.setdefault('HF_HUB_OFFLINE', '1')
