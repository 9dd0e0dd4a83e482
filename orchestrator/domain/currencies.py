"""Currencies payorch accepts: the ISO 4217 codes Stripe supports for charges.

Codes are accepted in any letter case and stored lower-case, as Stripe writes them, so
``"USD"`` and ``"usd"`` are the same request (and the same idempotency fingerprint).
"""

from __future__ import annotations

SUPPORTED_CURRENCIES = frozenset(
    {
        "aed",
        "afn",
        "all",
        "amd",
        "ang",
        "aoa",
        "ars",
        "aud",
        "awg",
        "azn",
        "bam",
        "bbd",
        "bdt",
        "bgn",
        "bhd",
        "bif",
        "bmd",
        "bnd",
        "bob",
        "brl",
        "bsd",
        "bwp",
        "byn",
        "bzd",
        "cad",
        "cdf",
        "chf",
        "clp",
        "cny",
        "cop",
        "crc",
        "cve",
        "czk",
        "djf",
        "dkk",
        "dop",
        "dzd",
        "egp",
        "etb",
        "eur",
        "fjd",
        "fkp",
        "gbp",
        "gel",
        "gip",
        "gmd",
        "gnf",
        "gtq",
        "gyd",
        "hkd",
        "hnl",
        "htg",
        "huf",
        "idr",
        "ils",
        "inr",
        "isk",
        "jmd",
        "jod",
        "jpy",
        "kes",
        "kgs",
        "khr",
        "kmf",
        "krw",
        "kwd",
        "kyd",
        "kzt",
        "lak",
        "lbp",
        "lkr",
        "lrd",
        "lsl",
        "mad",
        "mdl",
        "mga",
        "mkd",
        "mmk",
        "mnt",
        "mop",
        "mur",
        "mvr",
        "mwk",
        "mxn",
        "myr",
        "mzn",
        "nad",
        "ngn",
        "nio",
        "nok",
        "npr",
        "nzd",
        "omr",
        "pab",
        "pen",
        "pgk",
        "php",
        "pkr",
        "pln",
        "pyg",
        "qar",
        "ron",
        "rsd",
        "rub",
        "rwf",
        "sar",
        "sbd",
        "scr",
        "sek",
        "sgd",
        "shp",
        "sle",
        "sos",
        "srd",
        "std",
        "szl",
        "thb",
        "tjs",
        "tnd",
        "top",
        "try",
        "ttd",
        "twd",
        "tzs",
        "uah",
        "ugx",
        "usd",
        "uyu",
        "uzs",
        "vnd",
        "vuv",
        "wst",
        "xaf",
        "xcd",
        "xof",
        "xpf",
        "yer",
        "zar",
        "zmw",
    }
)

# The one sentence every currency refusal says, whatever was wrong with the input (missing
# letters, a digit, a number, an unknown code): the API, the routing rules and the console
# name what is accepted, not which check failed first.
CURRENCY_RULE = (
    "must be a three-letter ISO 4217 currency code that Stripe supports, such as usd "
    "(any letter case)"
)


def supported_currency(value: object) -> str | None:
    """``value`` as the stored code (lower case), or None when it is not one we accept.
    ASCII letters only: ``str.lower()`` maps some non-ASCII letters to ASCII ones (the
    Kelvin sign U+212A becomes "k"), which would let "\u212arw" pass as "krw"."""
    if not isinstance(value, str) or len(value) != 3 or not value.isascii():
        return None
    code = value.lower()
    return code if code in SUPPORTED_CURRENCIES else None


# Stripe's maximum charge amount in minor units (eight digits).
MAX_AMOUNT = 99_999_999
