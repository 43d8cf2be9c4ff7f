"""The web demo (tola-web, docs/web.md): the page and its server (``app``), its examples (``examples``: the sample
packages' images), the headless Chromium that drives it (``headless_browser``: the browser test and the screenshot)
and the screenshot of docs/web.md (``screenshot``, tools/web_screenshot.py)."""
