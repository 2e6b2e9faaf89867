"""Record text for files that get shared: personal data masked, each record named by a stable short hash.

A report, the per-record table and the evidence sample quote the audited records; a report is made to be
passed on. `redact_result` masks, in every record-text field of a result (and the canary of a request),
what Microsoft Presidio's pattern recognizers find (presidio-analyzer, predefined_recognizers/generic):

- e-mail addresses: EmailRecognizer's "Email (Medium)" pattern (its tldextract check left out: an address
  with an unknown top-level domain is masked too);
- card numbers: CreditCardRecognizer's "All Credit Cards (weak)" pattern, kept only when the Luhn checksum
  holds, as there;
- IBANs: IbanRecognizer's "IBAN Generic" pattern, kept only when the ISO 13616 mod-97 check digits hold;
- phone numbers: Presidio asks python-phonenumbers; here a number of 7–15 digits in groups (an optional
  `+country`, a bracketed area code, groups split by space, dot or hyphen), ISO dates left alone;
- long digit runs: 5 or more digits in a row, or more than 15 in groups (account, order and card-like
  numbers whose checksum fails, and the secret numbers an audit plants).

Names are not masked: Presidio finds them with a spaCy language model, too heavy for this service; a record
whose names matter is shown in full only on request (`records=full`). Masking errs towards over-masking.

Each record carries `record_hash`, the first 10 hex digits of sha256 of its text's first 599 characters
(what the evidence keeps of a long text), so a row of a redacted file matches the same row of the full view
and the same record in another audit.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

EMAIL = re.compile(
    r"\b((([!#$%&'*+\-/=?^_`{|}~\w])|([!#$%&'*+\-/=?^_`{|}~\w][!#$%&'*+\-/=?^_`{|}~\.\w]{0,}"
    r"[!#$%&'*+\-/=?^_`{|}~\w]))[@]\w+(?:-+\w+)*(?:\.\w+(?:-+\w+)*)+)\b"
)
CARD = re.compile(
    r"\b(?!1\d{12}(?!\d))((4\d{3})|(5[0-5]\d{2})|(6\d{3})|(1\d{3})|(3\d{3}))[- ]?(\d{3,4})[- ]?(\d{3,4})"
    r"[- ]?(\d{3,5})\b"
)
IBAN = re.compile(
    r"(?<![A-Z0-9])[A-Z]{2}[0-9]{2}(?:[ -]?[A-Z0-9]{4}){2,7}(?:[ -]?[A-Z0-9]{1,3})?(?![A-Z0-9])"
)
PHONE = re.compile(
    r"(?<![\w+])(?!\d{4}-\d{2}-\d{2}\b)(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,8}){1,5}(?!\w)"
)
DIGITS = re.compile(r"(?<!\d)\d{5,}(?!\d)")
HASH_CHARS = 599
TEXT_KEYS = frozenset(
    {"text", "secret", "query", "prompt_in", "prompt_out", "released", "released_in", "released_out"}
)
"""Keys whose string values are record text, wherever they sit in a result's records, evidence,
likelihood and generated sections."""


def _luhn(digits: str) -> bool:
    total = 0
    for i, d in enumerate(reversed(digits)):
        n = int(d) * (2 if i % 2 else 1)
        total += n - 9 if n > 9 else n
    return total % 10 == 0


def _iban_valid(candidate: str) -> bool:
    """ISO 13616: the country code and check digits moved to the end, letters as 10–35, mod 97 is 1."""
    iban = re.sub(r"[ -]", "", candidate)
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def mask(text: str) -> str:
    """`text` with e-mail addresses, IBANs, card numbers, phone numbers and long digit runs masked as
    `[email]`, `[iban]`, `[card]`, `[phone]`, `[number]`."""
    text = EMAIL.sub("[email]", text)
    text = IBAN.sub(lambda m: "[iban]" if _iban_valid(m.group()) else m.group(), text)
    text = CARD.sub(lambda m: "[card]" if _luhn(_digits(m.group())) else m.group(), text)

    def phone(m: re.Match[str]) -> str:
        digits = len(_digits(m.group()))
        return m.group() if digits < 7 else "[phone]" if digits <= 15 else "[number]"

    text = PHONE.sub(phone, text)
    return DIGITS.sub("[number]", text)


def record_hash(text: str | None, record_id: str | None = None) -> str:
    """A stable short name of a record: its text's hash (its id's when it has no text)."""
    source = text[:HASH_CHARS] if text else f"id:{record_id}"
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:10]


def _mask_texts(value: Any, key: str | None = None) -> Any:
    if isinstance(value, dict):
        return {k: _mask_texts(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_texts(v, key) for v in value]
    if isinstance(value, str) and key in TEXT_KEYS:
        return mask(value)
    return value


def _hashed(records: Any) -> None:
    for row in records if isinstance(records, list) else []:
        if isinstance(row, dict):
            row["record_hash"] = record_hash(row.get("text"), row.get("record_id"))


def redact_result(result: dict[str, Any] | None, *, full: bool = False) -> dict[str, Any] | None:
    """A copy of `result` whose records (the per-record table, the evidence) carry `record_hash`, with every
    record text masked unless `full`."""
    if result is None:
        return None
    out = copy.deepcopy(result)
    _hashed(out.get("records"))
    evidence = out.get("evidence")
    if isinstance(evidence, dict):
        _hashed(evidence.get("records"))
    if full:
        return out
    for section in ("records", "evidence", "likelihood", "generated"):
        if section in out:
            out[section] = _mask_texts(out[section])
    for key in ("canary",):
        if isinstance(out.get(key), str):
            out[key] = mask(out[key])
    if isinstance(evidence, dict):
        out["evidence"]["answers"] = _mask_texts(evidence.get("answers"), "text")
        if isinstance(evidence.get("positive_answer"), str):
            out["evidence"]["positive_answer"] = mask(evidence["positive_answer"])
    return out


def strip_records(result: dict[str, Any] | None) -> dict[str, Any] | None:
    """A copy of `result` with every record text removed (None), kept: the records' ids, hashes and figures
    (what a purge of the dataset leaves of an audit)."""
    hashed = redact_result(result, full=True)
    if hashed is None:
        return None

    def strip(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: strip(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v, key) for v in value]
        return None if isinstance(value, str) and key in TEXT_KEYS else value

    for section in ("records", "evidence", "likelihood", "generated"):
        if section in hashed:
            hashed[section] = strip(hashed[section])
    if isinstance(hashed.get("canary"), str):
        hashed["canary"] = None
    evidence = hashed.get("evidence")
    if isinstance(evidence, dict):
        evidence["answers"] = None
        evidence["positive_answer"] = None
    return hashed


def redact_request(request: dict[str, Any] | None, *, full: bool = False) -> dict[str, Any] | None:
    """A copy of `request` with a canary text it gives masked unless `full`."""
    if request is None or full:
        return request
    out = copy.deepcopy(request)
    attack = out.get("attack")
    if isinstance(attack, dict) and isinstance(attack.get("canary"), str):
        attack["canary"] = mask(attack["canary"])
    return out
