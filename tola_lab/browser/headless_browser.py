"""Drive the web demo in Debian's headless Chromium through Selenium (the browser test and tools/web_screenshot.py).

``find_chromium`` locates the browser and its driver (Debian: apt-get install chromium chromium-driver);
``start_chromium`` starts them with a fresh profile, no background network traffic and bounded timeouts;
``restore_in_page`` uploads a file to the tola-web page, presses Restore and waits for the result or the error.
Selenium is given both paths, so its manager never looks for (or downloads) a browser or driver.
"""
import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

BROWSERS = ('chromium', 'chromium-browser', 'google-chrome')
DRIVERS = ('chromedriver', )
DRIVER_DIRS = ('/usr/lib/chromium', )  # Debian keeps a copy here when /usr/bin/chromedriver is absent
CHROMIUM_FLAGS = ('--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic',
                  '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync',
                  '--disable-extensions', '--hide-scrollbars')


def find_chromium() -> Tuple[Optional[Tuple[str, str]], str]:
    """((browser path, driver path), '') when both are on PATH (or the driver in DRIVER_DIRS), else (None, the
    reason)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None, 'selenium is not installed (pip install -r requirements.txt)'
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    if browser is None:
        return None, f'no Chromium found ({", ".join(BROWSERS)}; Debian: apt-get install chromium chromium-driver)'
    driver = next((p for p in map(shutil.which, DRIVERS) if p), None) or next(
        (p for p in (os.path.join(d, 'chromedriver') for d in DRIVER_DIRS) if os.access(p, os.X_OK)), None)
    if driver is None:
        return None, 'no chromedriver found (Debian: apt-get install chromium-driver)'
    return (browser, driver), ''


def start_chromium(browser: str, driver: str, width: int = 1280, height: int = 1000, timeout: float = 20.0):
    """A headless Chromium under Selenium with a fresh profile (removed by ``quit_chromium``); page loads and
    scripts time out after ``timeout`` seconds."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    profile = tempfile.mkdtemp(prefix='tola-chromium-')
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS + (f'--window-size={width},{height}', f'--user-data-dir={profile}'):
        options.add_argument(flag)
    try:
        browser_driver = webdriver.Chrome(service=Service(driver), options=options)
    except Exception:
        shutil.rmtree(profile, ignore_errors=True)
        raise
    browser_driver.set_page_load_timeout(timeout)
    browser_driver.set_script_timeout(timeout)
    browser_driver.tola_profile = profile
    return browser_driver


def quit_chromium(browser_driver) -> None:
    """Stop the browser and its driver and remove the profile."""
    try:
        browser_driver.quit()
    finally:
        shutil.rmtree(getattr(browser_driver, 'tola_profile', ''), ignore_errors=True)


@dataclass
class PageState:
    """What the page shows after Restore: the status line's text, the restored image's natural size (width,
    height) or None, the text table's text, and every resource URL the page loaded."""
    status: str
    restored_size: Optional[Tuple[int, int]]
    table: str
    resources: Tuple[str, ...]


_TOAST = '[data-testid="toast-body"]'


def _toast_text(browser_driver) -> str:
    """The text of Gradio's error toasts ('' when none); textContent, as a toast fades in."""
    from selenium.webdriver.common.by import By
    toasts = browser_driver.find_elements(By.CSS_SELECTOR, _TOAST)
    return ' '.join(' '.join(t.get_attribute('textContent').split()) for t in toasts)


_RESTORED_SIZE = ("const img = document.querySelector('#tola-restored img');"
                  "return img && img.complete && img.naturalWidth > 0 ? [img.naturalWidth, img.naturalHeight] : null;")


def restore_in_page(browser_driver, url: str, path: str, timeout: float = 30.0) -> PageState:
    """Open ``url`` (a tola-web page), upload ``path``, press Restore, and wait (at most ``timeout`` seconds) until
    the status line reports the result or an error. When Gradio refuses the upload itself (a file type that is not
    an image, a file over --max-file-mb), the status is the text of its error toast and Restore is not pressed."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    browser_driver.get(url)
    wait = WebDriverWait(browser_driver, timeout, poll_frequency=0.2)
    upload = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '#tola-upload input[type=file]'))[0]
    status = browser_driver.find_element(By.CSS_SELECTOR, '#tola-status')
    before = status.text
    upload.send_keys(os.path.abspath(path))
    # the upload is done when the input shows a preview (an <img>) or Gradio reports an error in a toast
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '#tola-upload img') or _toast_text(d))
    text = _toast_text(browser_driver)
    if not text:
        browser_driver.find_element(By.CSS_SELECTOR, '#tola-restore').click()
        wait.until(lambda d: status.text != before and
                   (status.text.startswith('Error') or d.execute_script(_RESTORED_SIZE)))
        text = status.text
    size = browser_driver.execute_script(_RESTORED_SIZE)
    resources = browser_driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return PageState(text,
                     tuple(size) if size else None,
                     browser_driver.find_element(By.CSS_SELECTOR, '#tola-lines').text, tuple(resources))


def page_text(browser_driver) -> str:
    """The visible text of the whole page."""
    from selenium.webdriver.common.by import By
    return browser_driver.find_element(By.TAG_NAME, 'body').text


def urls_off_host(resources, host: str) -> Dict[str, str]:
    """{url: its host} of the resources not served by ``host`` (data: and blob: URLs are local)."""
    from urllib.parse import urlparse
    return {
        u: urlparse(u).hostname or ''
        for u in resources if not u.startswith(('data:', 'blob:')) and urlparse(u).hostname != host
    }
