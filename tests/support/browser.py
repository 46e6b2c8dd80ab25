"""A headless Chromium driven by Selenium, for the console's browser test.

Uses Debian's ``chromium`` and ``chromium-driver`` (noxfile.py's tests session installs them
as root with apt-get when they are missing); nothing is downloaded at run time (Selenium
Manager is bypassed by naming the driver). Skips with the reason when any piece is absent.

The tests share one browser per pytest process (:class:`SharedChromium`, the ``chromium``
fixture): a Chromium and its chromedriver cost ~1.7 CPU-s to start and stop (2-core VM,
load ~30, 2026-11-30), and eight tests each started their own.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PAGE_TIMEOUT_S = 30.0
WAIT_S = 20.0


@contextmanager
def headless_chromium(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A Selenium WebDriver on headless Chromium; skips the test if it cannot start."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (noxfile.py's tests session installs it)")
    binary = next((b for b in map(shutil.which, BROWSERS) if b), None)
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip(
            "no chromium/chromedriver: apt-get install -y chromium chromium-driver "
            "(noxfile.py's tests session does it when run as root)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    try:
        driver = webdriver.Chrome(service=Service(driver_path), options=options)
    except Exception as exc:  # a broken install: say so rather than fail the suite
        pytest.skip(f"chromium did not start: {exc}")
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    driver.set_script_timeout(PAGE_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()


class SharedChromium:
    """One headless Chromium for the tests of a process, started at its first use. Each
    test takes it with :meth:`page` and leaves it on a blank page with no cookies (the
    console keeps no other state in the browser), so that no page of a past test polls its
    server meanwhile or is seen by the next test."""

    def __init__(self) -> None:
        self._running: AbstractContextManager[Any] | None = None
        self._driver: Any = None

    @contextmanager
    def page(self) -> Iterator[Any]:
        """The browser's WebDriver for one test (skips the test as
        :func:`headless_chromium` does)."""
        if self._driver is None:
            running = headless_chromium()
            self._driver = running.__enter__()
            self._running = running
        try:
            yield self._driver
        finally:
            try:
                self._driver.get("about:blank")
                self._driver.delete_all_cookies()
            except Exception:  # a browser the test broke: the next test gets a new one
                self.close()

    def close(self) -> None:
        """Quit the browser (if it runs)."""
        running, self._running, self._driver = self._running, None, None
        if running is not None:
            running.__exit__(None, None, None)


def wait_js(driver: Any, script: str, check: Any, what: str) -> Any:
    """Poll ``script``'s value until ``check(value)``; AssertionError after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    value = None
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if check(value):
            return value
        time.sleep(0.1)
    raise AssertionError(f"the page never showed {what} (last: {value!r})")
