"""Headless Chromium driven by Selenium, for the operator inbox's browser tests.

Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them when missing), driven by
Selenium from PyPI (the ``dev`` extra). Each driver is its own browser profile (its own cookies),
so two operators are two drivers; every driver is quit by the context that started it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from guarantee_support import skip_or_fail_in_ci

T = TypeVar("T")

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
DRIVER = "chromedriver"


def chromium_paths() -> tuple[str, str]:
    """``(browser, driver)`` executables, or skip (fail under CI) naming what is missing."""
    browser = next((found for name in CHROMIUM if (found := shutil.which(name))), None)
    driver = shutil.which(DRIVER) or (
        "/usr/lib/chromium/chromedriver"
        if Path("/usr/lib/chromium/chromedriver").exists()
        else None
    )
    if browser is None or driver is None:
        skip_or_fail_in_ci(
            "headless Chromium is missing: apt-get install -y chromium chromium-driver "
            f"(browser: {browser}, driver: {driver})"
        )
    return browser, driver


@contextmanager
def chromium(profile: Path, *, width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium WebDriver with its own profile directory; quit on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    profile.mkdir(parents=True, exist_ok=True)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver: Any, condition: Any, timeout: float = 60) -> Any:
    """``WebDriverWait(driver, timeout).until(condition)``."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(condition)


def unstale(driver: Any, action: Callable[[Any], T], timeout: float = 15) -> T:
    """``action(driver)``, again while it meets an element the page replaced meanwhile (the
    queue refreshes itself); what it returns (``None`` counts as done)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    done: list[T] = []

    def attempt(d: Any) -> bool:
        done.append(action(d))
        return True

    WebDriverWait(
        driver, timeout, poll_frequency=0.2, ignored_exceptions=(StaleElementReferenceException,)
    ).until(attempt)
    return done[-1]


def sign_in(driver: Any, base: str, token: str) -> None:
    """Sign in to the inbox at ``base`` with ``token`` (the page it lands on is left open)."""
    from selenium.webdriver.common.by import By

    driver.get(f"{base}/inbox/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "sign-in").click()


def text_of(driver: Any, element_id: str) -> str:
    """The visible text of the element with ``element_id``."""
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.ID, element_id).text)
