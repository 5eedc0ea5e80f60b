"""Which ``env`` values look like credentials: the rules, as rows, and the submit warning.

``env`` is recorded for good (the ledger, the views, the read models), so a credential
put there is kept in the clear everywhere. The submit answer warns about each such
variable, naming the variable and the rule, never the value, and points at
``secrets:``. The job is accepted all the same: a warning, not a refusal (a name such
as ``SORT_KEY`` may hold nothing secret). Pure: no I/O.

The first row that matches a variable decides its warning; value shapes come first,
being the surest, then the names.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One row: a test on the variable's name or on its value, and what the warning says."""

    id: str
    looks_like: str
    """What the value seems to be, in the warning's words."""
    name: str = ""
    """Regex searched in the variable's name (case-insensitive); empty: any name."""
    value: str = ""
    """Regex searched in the value; empty: any value."""
    test: Callable[[str], bool] | None = None
    """A test of the value a regex cannot say (randomness)."""

    def matches(self, variable: str, value: str) -> bool:
        """Whether the variable and its value fit every matcher of the row."""
        return (
            bool(value)
            and (not self.name or re.search(self.name, variable, re.IGNORECASE) is not None)
            and (not self.value or re.search(self.value, value) is not None)
            and (self.test is None or self.test(value))
        )


RANDOM_MIN_CHARS = 20
RANDOM_MIN_BITS_PER_CHAR = 4.2
"""Above hexadecimal's 4 bits a character: a hash or a UUID is no warning, a base64 or
mixed-case random token of 20 characters or more is."""


def looks_random(value: str) -> bool:
    """Long, without spaces, of letters and digits, with the entropy of a random token."""
    if len(value) < RANDOM_MIN_CHARS or any(c.isspace() for c in value):
        return False
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    counts = Counter(value)
    bits = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return bits >= RANDOM_MIN_BITS_PER_CHAR


_NAME_WORDS = (
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|PWD|PASSPHRASE|APIKEY|API_KEY|ACCESS_KEY|"
    r"PRIVATE_KEY|CREDENTIALS?|AUTH|SESSION|COOKIE)(_|$)"
)

# fmt: off
RULES: tuple[Rule, ...] = (
    Rule("value.private_key", "a private key", value=r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    Rule("value.aws_access_key_id", "an AWS access key id", value=r"^(AKIA|ASIA)[0-9A-Z]{16}$"),
    Rule("value.github_token", "a GitHub token",
         value=r"^(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{20,})$"),
    Rule("value.huggingface_token", "a Hugging Face token", value=r"^hf_[A-Za-z0-9]{30,}$"),
    Rule("value.slack_token", "a Slack token", value=r"^xox[abeprs]-[A-Za-z0-9-]{10,}$"),
    Rule("value.api_key", "an API key (sk-…, sk_live_…)",
         value=r"^(sk-[A-Za-z0-9_-]{20,}|[sr]k_(live|test)_[A-Za-z0-9]{16,})$"),
    Rule("value.jwt", "a JSON web token", value=r"^eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."),
    Rule("value.url_password", "a URL with a password in it",
         value=r"^[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"),
    Rule("name.aws_secret", "an AWS secret key", name=r"^AWS_(SECRET_ACCESS_KEY|SESSION_TOKEN)$"),
    Rule("name.credential_word", "a credential (the variable's name says so)", name=_NAME_WORDS),
    Rule("name.key_suffix", "a key (the variable's name ends in _KEY)", name=r"_KEY$"),
    Rule("value.random", f"a random token ({RANDOM_MIN_CHARS}+ characters of high entropy)",
         test=looks_random),
)
# fmt: on


def warnings(env: Mapping[str, str]) -> list[dict[str, str]]:
    """One warning per variable of ``env`` that a rule matches, in the variable's order."""
    out = []
    for variable, value in env.items():
        rule = next((r for r in RULES if r.matches(variable, value)), None)
        if rule is None:
            continue
        secret = variable.lower().replace("_", "-").strip("-") or "my-secret"
        out.append(
            {
                "field": f"env.{variable}",
                "rule": rule.id,
                "problem": f"looks like {rule.looks_like}; env is recorded in the clear, for "
                "good, on the ledger and in every view of the job",
                "fix": f"store it as a secret (`gridledger secret set {secret}`) and name it "
                f"in the spec instead: secrets: {{{variable}: {secret}}}",
            }
        )
    return out
