"""Small Python projects the corpus sessions work on: sources, tests and test output."""

SLUG_SRC = '''"""URL slugs."""

import re

_NON_WORD = re.compile(r"[^\\w\\s-]")
_SEPARATORS = re.compile(r"[\\s_-]+")


def slugify(text: str, separator: str = "-") -> str:
    """Lower-case ``text`` and join its words with ``separator``."""
    text = _NON_WORD.sub("", text).strip().lower()
    return _SEPARATORS.sub(separator, text)
'''

SLUG_TEST = """import pytest

from textkit.slug import slugify


def test_basic():
    assert slugify("Hello World") == "hello-world"


def test_punctuation():
    assert slugify("Rock & Roll!") == "rock-roll"


def test_custom_separator():
    assert slugify("a b c", separator="_") == "a_b_c"


def test_accents():
    assert slugify("Crème Brûlée") == "creme-brulee"
"""

SLUG_FAIL = """============================= test session starts ==============================
platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0
rootdir: /workspace/repo
configfile: pyproject.toml
collected 4 items

tests/test_slug.py ...F                                                  [100%]

=================================== FAILURES ===================================
_________________________________ test_accents _________________________________

    def test_accents():
>       assert slugify("Crème Brûlée") == "creme-brulee"
E       AssertionError: assert 'crème-brûlée' == 'creme-brulee'
E         
E         - creme-brulee
E         ?   ^     ^
E         + crème-brûlée
E         ?   ^     ^

tests/test_slug.py:19: AssertionError
=========================== short test summary info ============================
FAILED tests/test_slug.py::test_accents - AssertionError: assert 'crème-brûlée' == 'creme-brulee'
========================= 1 failed, 3 passed in 0.04s =========================="""

SLUG_PASS = """tests/test_slug.py ....                                                  [100%]

============================== 4 passed in 0.03s ==============================="""

SLUG_FIX_OLD = """    text = _NON_WORD.sub("", text).strip().lower()"""
SLUG_FIX_NEW = """    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = _NON_WORD.sub("", text).strip().lower()"""

MONEY_SRC = '''"""Formatting amounts of money for invoices."""

from __future__ import annotations

_STYLES = {
    "USD": ("$", ",", ".", "prefix"),
    "GBP": ("£", ",", ".", "prefix"),
    "EUR": ("€", ".", ",", "suffix"),
}


def format_money(amount: float, currency: str) -> str:
    symbol, thousands, decimal, position = _STYLES[currency]
    whole, cents = f"{round(amount, 2):.2f}".split(".")
    grouped = f"{int(whole):,}".replace(",", thousands)
    text = f"{grouped}{decimal}{cents}"
    return f"{symbol}{text}" if position == "prefix" else f"{text} {symbol}"
'''

MONEY_TEST = """from billing.money import format_money


def test_usd():
    assert format_money(1234.5, "USD") == "$1,234.50"


def test_eur_uses_comma_decimals():
    assert format_money(1234.5, "EUR") == "1.234,50 €"


def test_rounds_half_up():
    assert format_money(0.125, "USD") == "$0.13"
    assert format_money(2.675, "GBP") == "£2.68"
"""

MONEY_FAIL = """============================= test session starts ==============================
platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0
rootdir: /workspace/repo
collected 3 items

tests/test_money.py ..F                                                  [100%]

=================================== FAILURES ===================================
______________________________ test_rounds_half_up _____________________________

    def test_rounds_half_up():
>       assert format_money(0.125, "USD") == "$0.13"
E       AssertionError: assert '$0.12' == '$0.13'
E         
E         - $0.13
E         + $0.12

tests/test_money.py:13: AssertionError
=========================== short test summary info ============================
FAILED tests/test_money.py::test_rounds_half_up - AssertionError: assert '$0.12' == '$0.13'
========================= 1 failed, 2 passed in 0.05s =========================="""

MONEY_PASS = """tests/test_money.py ...                                                  [100%]

============================== 3 passed in 0.02s ==============================="""

WEEKS_SRC = '''"""ISO week dates."""

from datetime import datetime


def iso_week_to_date(text: str) -> str:
    """``2024-W09-4`` -> ``2024-02-29`` (ISO 8601 week date to calendar date)."""
    day = datetime.strptime(text, "%Y-W%W-%w")
    return day.date().isoformat()
'''

WEEKS_TEST = """import pytest

from dateparse.weeks import iso_week_to_date


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2024-W09-4", "2024-02-29"),
        ("2021-W01-1", "2021-01-04"),
        ("2020-W53-7", "2021-01-03"),
    ],
)
def test_iso_week_to_date(text, expected):
    assert iso_week_to_date(text) == expected


def test_rejects_garbage():
    with pytest.raises(ValueError):
        iso_week_to_date("2024-09-4")
"""

WEEKS_FAIL = """============================= test session starts ==============================
collected 4 items

tests/test_weeks.py .FF.                                                 [100%]

=================================== FAILURES ===================================
_____________________ test_iso_week_to_date[2021-W01-1-2021-01-04] _____________________

text = '2021-W01-1', expected = '2021-01-04'

    @pytest.mark.parametrize(
        "text, expected",
        [
            ("2024-W09-4", "2024-02-29"),
            ("2021-W01-1", "2021-01-04"),
            ("2020-W53-7", "2021-01-03"),
        ],
    )
    def test_iso_week_to_date(text, expected):
>       assert iso_week_to_date(text) == expected
E       AssertionError: assert '2021-01-11' == '2021-01-04'
E         
E         - 2021-01-04
E         + 2021-01-11
E        +  where '2021-01-11' = iso_week_to_date('2021-W01-1')

tests/test_weeks.py:15: AssertionError
_____________________ test_iso_week_to_date[2020-W53-7-2021-01-03] _____________________

text = '2020-W53-7', expected = '2021-01-03'

>       assert iso_week_to_date(text) == expected
E       ValueError: time data '2020-W53-7' does not match format '%Y-W%W-%w'

tests/test_weeks.py:15: ValueError
=========================== short test summary info ============================
FAILED tests/test_weeks.py::test_iso_week_to_date[2021-W01-1-2021-01-04] - AssertionError: assert '2021-01-11' == '2021-01-04'
FAILED tests/test_weeks.py::test_iso_week_to_date[2020-W53-7-2021-01-03] - ValueError: time data '2020-W53-7' does not match format '%Y-W%W-%w'
========================= 2 failed, 2 passed in 0.06s =========================="""

WEEKS_FIX = '''"""ISO week dates."""

import re
from datetime import date

_WEEK_DATE = re.compile(r"^(\\d{4})-W(\\d{2})-([1-7])$")


def iso_week_to_date(text: str) -> str:
    """``2024-W09-4`` -> ``2024-02-29`` (ISO 8601 week date to calendar date)."""
    match = _WEEK_DATE.match(text)
    if not match:
        raise ValueError(f"not an ISO week date: {text!r}")
    year, week, day = (int(g) for g in match.groups())
    return date.fromisocalendar(year, week, day).isoformat()
'''

SEMVER_SRC = '''"""Semantic version ordering."""

from __future__ import annotations


def _key(version: str) -> tuple:
    core, _, pre = version.partition("-")
    major, minor, patch = (int(p) for p in core.split("."))
    return (major, minor, patch, pre)


def sort_versions(versions: list[str]) -> list[str]:
    return sorted(versions, key=_key)
'''

SEMVER_TEST = """from semver_lite import sort_versions


def test_numeric_parts():
    assert sort_versions(["1.10.0", "1.2.0", "1.9.3"]) == ["1.2.0", "1.9.3", "1.10.0"]


def test_prerelease_ordering():
    assert sort_versions(["1.0.0", "1.0.0-beta", "1.0.0-alpha"]) == ["1.0.0-alpha", "1.0.0-beta", "1.0.0"]


def test_prerelease_numeric_identifiers():
    assert sort_versions(["2.0.0-rc.10", "2.0.0-rc.2"]) == ["2.0.0-rc.2", "2.0.0-rc.10"]
"""

SEMVER_FAIL = """============================= test session starts ==============================
collected 3 items

tests/test_compare.py .FF                                                [100%]

=================================== FAILURES ===================================
___________________________ test_prerelease_ordering ___________________________

    def test_prerelease_ordering():
>       assert sort_versions(["1.0.0", "1.0.0-beta", "1.0.0-alpha"]) == ["1.0.0-alpha", "1.0.0-beta", "1.0.0"]
E       AssertionError: assert ['1.0.0', '1.0.0-alpha', '1.0.0-beta'] == ['1.0.0-alpha', '1.0.0-beta', '1.0.0']
E         
E         At index 0 diff: '1.0.0' != '1.0.0-alpha'
E         Use -v to get more diff

tests/test_compare.py:9: AssertionError
_____________________ test_prerelease_numeric_identifiers ______________________

    def test_prerelease_numeric_identifiers():
>       assert sort_versions(["2.0.0-rc.10", "2.0.0-rc.2"]) == ["2.0.0-rc.2", "2.0.0-rc.10"]
E       AssertionError: assert ['2.0.0-rc.10', '2.0.0-rc.2'] == ['2.0.0-rc.2', '2.0.0-rc.10']
E         
E         At index 0 diff: '2.0.0-rc.10' != '2.0.0-rc.2'
E         Use -v to get more diff

tests/test_compare.py:13: AssertionError
=========================== short test summary info ============================
FAILED tests/test_compare.py::test_prerelease_ordering - AssertionError: assert ['1.0.0', '1.0.0-alpha', '1.0.0-beta'] == ['1.0.0-alpha', '1.0.0-beta', '1.0.0']
FAILED tests/test_compare.py::test_prerelease_numeric_identifiers - AssertionError: assert ['2.0.0-rc.10', '2.0.0-rc.2'] == ['2.0.0-rc.2', '2.0.0-rc.10']
========================= 2 failed, 1 passed in 0.04s =========================="""

SEMVER_FIX_KEY = """def _key(version: str) -> tuple:
    core, _, pre = version.partition("-")
    major, minor, patch = (int(p) for p in core.split("."))
    if not pre:
        return (major, minor, patch, 1, ())
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (major, minor, patch, 0, parts)"""

CONF_SRC = '''"""Application settings from a TOML file with APP_* environment overrides."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

DEFAULTS = {"workers": 2, "debug": False, "log_level": "info"}


class ConfigError(ValueError):
    pass


def load_config(path: Path, env: dict[str, str] | None = None) -> dict:
    env = dict(os.environ if env is None else env)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except Exception as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    config = {**DEFAULTS, **data.get("app", {})}
    for key in config:
        name = f"APP_{key.upper()}"
        if name in env:
            config[key] = env[name]
    return config
'''

CONF_TEST = """import pytest

from confload import ConfigError, load_config


@pytest.fixture
def app_toml(tmp_path):
    path = tmp_path / "app.toml"
    path.write_text('[app]\\nworkers = 4\\nlog_level = "debug"\\n')
    return path


def test_reads_file(app_toml):
    assert load_config(app_toml, env={})["workers"] == 4


def test_env_override_keeps_type(app_toml):
    config = load_config(app_toml, env={"APP_WORKERS": "8", "APP_DEBUG": "true"})
    assert config["workers"] == 8
    assert config["debug"] is True


def test_broken_file(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[app\\nworkers = ")
    with pytest.raises(ConfigError):
        load_config(path, env={})
"""

CONF_FAIL = """============================= test session starts ==============================
collected 3 items

tests/test_config.py .F.                                                 [100%]

=================================== FAILURES ===================================
_________________________ test_env_override_keeps_type _________________________

app_toml = PosixPath('/tmp/pytest-of-agent/pytest-3/test_env_override_keeps_type0/app.toml')

    def test_env_override_keeps_type(app_toml):
        config = load_config(app_toml, env={"APP_WORKERS": "8", "APP_DEBUG": "true"})
>       assert config["workers"] == 8
E       AssertionError: assert '8' == 8

tests/test_config.py:18: AssertionError
=========================== short test summary info ============================
FAILED tests/test_config.py::test_env_override_keeps_type - AssertionError: assert '8' == 8
========================= 1 failed, 2 passed in 0.03s =========================="""

CONF_FIX_OLD = """        if name in env:
            config[key] = env[name]"""
CONF_FIX_NEW = """        if name in env:
            config[key] = _coerce(env[name], DEFAULTS.get(key))"""
CONF_COERCE = """

def _coerce(raw: str, default: object) -> object:
    if isinstance(default, bool):
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"expected a boolean, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError as exc:
            raise ConfigError(f"expected an integer, got {raw!r}") from exc
    return raw
"""

BUCKET_SRC = '''"""A token bucket rate limiter."""

from __future__ import annotations

import time


class TokenBucket:
    def __init__(self, rate: float, capacity: float, clock=time.monotonic):
        self.rate = rate
        self.capacity = capacity
        self.clock = clock
        self.tokens = capacity
        self.updated = clock()

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) / self.rate)
        self.updated = now

    def take(self, n: float = 1.0) -> bool:
        self._refill()
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False
'''

BUCKET_TEST = """import pytest

from throttle.bucket import TokenBucket


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_starts_full():
    bucket = TokenBucket(rate=2.0, capacity=5, clock=FakeClock())
    assert all(bucket.take() for _ in range(5))
    assert not bucket.take()


def test_refills_at_rate():
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, capacity=5, clock=clock)
    for _ in range(5):
        bucket.take()
    clock.now = 0.25
    bucket._refill()
    assert bucket.tokens == pytest.approx(0.5, abs=1e-3)
"""

BUCKET_FAIL = """============================= test session starts ==============================
collected 2 items

tests/test_bucket.py .F                                                  [100%]

=================================== FAILURES ===================================
_____________________________ test_refills_at_rate _____________________________

    def test_refills_at_rate():
        clock = FakeClock()
        bucket = TokenBucket(rate=2.0, capacity=5, clock=clock)
        for _ in range(5):
            bucket.take()
        clock.now = 0.25
        bucket._refill()
>       assert bucket.tokens == pytest.approx(0.5, abs=1e-3)
E       assert 0.125 == 0.5 ± 1.0e-03
E         
E         comparison failed
E         Obtained: 0.125
E         Expected: 0.5 ± 1.0e-03

tests/test_bucket.py:27: AssertionError
=========================== short test summary info ============================
FAILED tests/test_bucket.py::test_refills_at_rate - assert 0.125 == 0.5 ± 1.0e-03
========================= 1 failed, 1 passed in 0.03s =========================="""

CSV_SRC = '''"""Import stock rows from CSV exports."""

from __future__ import annotations

import csv
import io


def parse_rows(text: str) -> list[dict]:
    reader = csv.DictReader(io.StringIO(text))
    rows = []
    for record in reader:
        if not any(record.values()):
            continue
        rows.append({"sku": record["sku"], "qty": int(record["qty"])})
    return rows
'''

CSV_TEST = """from importer.csv_rows import parse_rows

EXPORT = "sku , qty \\nA-1,3\\n\\nB-2,0\\n"


def test_parse_rows_strips_header_whitespace():
    rows = parse_rows(EXPORT)
    assert rows == [{"sku": "A-1", "qty": 3}, {"sku": "B-2", "qty": 0}]


def test_empty_export():
    assert parse_rows("sku,qty\\n") == []
"""

CSV_FAIL = """============================= test session starts ==============================
collected 2 items

tests/test_csv_rows.py F.                                                [100%]

=================================== FAILURES ===================================
___________________ test_parse_rows_strips_header_whitespace ___________________

    def test_parse_rows_strips_header_whitespace():
>       rows = parse_rows(EXPORT)

tests/test_csv_rows.py:7: 
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ 

    def parse_rows(text: str) -> list[dict]:
        reader = csv.DictReader(io.StringIO(text))
        rows = []
        for record in reader:
            if not any(record.values()):
                continue
>           rows.append({"sku": record["sku"], "qty": int(record["qty"])})
E           KeyError: 'sku'

src/importer/csv_rows.py:15: KeyError
=========================== short test summary info ============================
FAILED tests/test_csv_rows.py::test_parse_rows_strips_header_whitespace - KeyError: 'sku'
========================= 1 failed, 1 passed in 0.03s =========================="""

LRU_SRC = '''"""A small least-recently-used cache."""

from collections import OrderedDict


class LRUCache:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: OrderedDict = OrderedDict()

    def get(self, key, default=None):
        return self._items.get(key, default)

    def put(self, key, value) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)
'''

LRU_TEST = """from lru import LRUCache


def test_evicts_oldest():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert cache.get("a") is None
    assert cache.get("c") == 3


def test_get_refreshes_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert cache.get("b") is None
    assert cache.get("a") == 1
"""

LRU_FAIL = """============================= test session starts ==============================
collected 2 items

tests/test_lru.py .F                                                     [100%]

=================================== FAILURES ===================================
__________________________ test_get_refreshes_recency __________________________

    def test_get_refreshes_recency():
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        assert cache.get("a") == 1
        cache.put("c", 3)
>       assert cache.get("b") is None
E       AssertionError: assert 2 is None
E        +  where 2 = <bound method LRUCache.get of <lru.LRUCache object at 0x7f3a2c1d0e50>>('b')
E        +    where <bound method LRUCache.get of <lru.LRUCache object at 0x7f3a2c1d0e50>> = <lru.LRUCache object at 0x7f3a2c1d0e50>.get

tests/test_lru.py:18: AssertionError
=========================== short test summary info ============================
FAILED tests/test_lru.py::test_get_refreshes_recency - AssertionError: assert 2 is None
========================= 1 failed, 1 passed in 0.02s =========================="""

INV_SRC = '''"""Stock reservations."""

from __future__ import annotations


class Inventory:
    def __init__(self):
        self.reserved: list[tuple[str, int]] = []

    def reserve(self, sku: str, qty: int) -> None:
        if qty <= 0:
            raise ValueError("qty must be positive")
        self.reserved.append((sku, qty))

    def summary(self) -> str:
        return f"Total: {len(self.reserved)} items"
'''

INV_TEST = """import unittest

from shop.inventory import Inventory


class SummaryTest(unittest.TestCase):
    def test_counts_unique_skus(self):
        inv = Inventory()
        inv.reserve("A-1", 2)
        inv.reserve("B-7", 1)
        inv.reserve("A-1", 1)
        self.assertEqual(inv.summary(), "Total: 3 items (2 unique)")

    def test_rejects_zero(self):
        with self.assertRaises(ValueError):
            Inventory().reserve("A-1", 0)


if __name__ == "__main__":
    unittest.main()
"""

INV_FAIL = """.F
======================================================================
FAIL: test_counts_unique_skus (tests.test_inventory.SummaryTest.test_counts_unique_skus)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/workspace/repo/tests/test_inventory.py", line 12, in test_counts_unique_skus
    self.assertEqual(inv.summary(), "Total: 3 items (2 unique)")
AssertionError: 'Total: 3 items' != 'Total: 3 items (2 unique)'
- Total: 3 items
+ Total: 3 items (2 unique)


----------------------------------------------------------------------
Ran 2 tests in 0.001s

FAILED (failures=1)"""

STATS_SRC = '''"""Descriptive statistics without numpy."""

from __future__ import annotations


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def mean(values: list[float]) -> float:
    return sum(values) / len(values)
'''

STATS_TEST = """import pytest

from pystats import mean, median


def test_median_odd():
    assert median([5, 1, 3]) == 3


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
    assert median([10.5, 2.25]) == 6.375


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5
"""

STATS_FAIL = """============================= test session starts ==============================
collected 3 items

tests/test_stats.py .F.                                                  [100%]

=================================== FAILURES ===================================
_______________________________ test_median_even _______________________________

    def test_median_even():
>       assert median([4, 1, 3, 2]) == 2.5
E       assert 3 == 2.5
E        +  where 3 = median([4, 1, 3, 2])

tests/test_stats.py:11: AssertionError
=========================== short test summary info ============================
FAILED tests/test_stats.py::test_median_even - assert 3 == 2.5
========================= 1 failed, 2 passed in 0.02s =========================="""

TABLE_SRC = '''"""Render rows as a Markdown table."""

from __future__ import annotations


def render_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\\n".join([line(header), sep, *(line(r) for r in rows)])
'''

TABLE_TEST = """from mdtable import render_table


def test_simple_table():
    out = render_table(["name", "qty"], [["apple", "3"], ["kiwi", "12"]])
    assert out == "| name  | qty |\\n|-------|-----|\\n| apple | 3   |\\n| kiwi  | 12  |"


def test_right_aligns_numbers():
    out = render_table(["item", "price"], [["tea", "4.5"], ["coffee", "12.25"]], align={"price": "right"})
    assert out.splitlines()[2] == "| tea    |   4.5 |"


def test_empty_rows():
    assert render_table(["a"], []) == "| a |\\n|---|"
"""

CLI_SRC = '''"""textkit command line: ``python -m textkit slug "Some Title"``."""

from __future__ import annotations

import argparse
import sys

from textkit.slug import slugify


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="textkit")
    sub = parser.add_subparsers(dest="command", required=True)
    slug = sub.add_parser("slug")
    slug.add_argument("text")
    slug.add_argument("--separator", default="-")
    args = parser.parse_args(argv)
    print(slugify(args.text, args.separator))
    return 0
'''
