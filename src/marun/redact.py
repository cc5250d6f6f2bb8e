"""Which names hold secrets, and how to keep their values out of every output.

Variables: a variable is secret when its name contains KEY, SECRET, TOKEN, PASSWORD, PASSWD or
CREDENTIAL, or when one of its `_`-separated words is AK or SK (an access key pair: `AK`,
`MA_SK`, `OBS_AK`). A variable's value has no other place to hide, so the rule is broad.

Options (`--name VALUE`, `--name=VALUE`): the name is cut into words at every character that
is not a letter or digit (`--hf-token` -> HF, TOKEN); it is secret when one of its words ends
with KEY, SECRET, TOKEN, PASSWORD, PASSWD or CREDENTIAL(S), or is PASS, PW, AK or SK. A word
that merely contains one of them is a different word: `--num_tokens 512`, `--max_tokens`
and `--tokenizer` are not secret, `--api_token`, `--token`, `--hf-token`, `--apikey` and
`--secret_key` are. See docs/configuration.md ("Secrets").

Besides those, in any word: the password of a URL (`https://user:PASS@host`,
`tcp://user:pass@host:1234`); the value after `--mca`/`-mca`/`--gmca` NAME when NAME is
secret by the variable rule; the value after `-p` (or glued, `-pPASS`) for the programs whose
`-p` is a password (sshpass, mysql and its tools; for everything else `-p` is a port).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

MASK = "***"
_SUBSTRINGS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL")
_WORDS = frozenset({"AK", "SK"})
_WORD_SPLIT = re.compile(r"[^A-Z0-9]+")
_OPTION_ENDINGS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS")
_OPTION_WORDS = frozenset({"PASS", "PW", "AK", "SK"})
_MCA_FLAGS = frozenset({"--mca", "-mca", "--gmca", "-gmca"})
# Programs whose `-p` takes a password rather than a port.
_P_IS_PASSWORD = frozenset({"sshpass", "mysql", "mysqldump", "mysqladmin", "mariadb"})
# scheme://user:PASSWORD@  (the user part may be empty: `redis://:pass@host`)
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:)([^\s/?#@]+)@")


@lru_cache(maxsize=4096)  # a plan of every node asks about the same few names again and again
def is_secret_name(name: str) -> bool:
    """The variable rule."""
    upper = name.upper()
    if any(s in upper for s in _SUBSTRINGS):
        return True
    return any(word in _WORDS for word in _WORD_SPLIT.split(upper))


def is_secret_option(name: str) -> bool:
    """The option rule, for `name` without its dashes."""
    for word in _WORD_SPLIT.split(name.upper()):
        if word in _OPTION_WORDS or (word and word.endswith(_OPTION_ENDINGS)):
            return True
    return False


def mask_url_credentials(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` in it masked."""
    if "://" not in text:
        return text
    return _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + "@", text)


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else mask_url_credentials(v)) for k, v in env.items()}


def mask_argv(argv: Sequence[str]) -> list[str]:
    """`argv` with every secret value masked (see the module's rules)."""
    out: list[str] = []
    hide_next = False
    mca_name_next = False
    p_is_password = False
    for word in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if mca_name_next:
            mca_name_next = False
            hide_next = is_secret_name(word)
            out.append(word)
            continue
        if os.path.basename(word) in _P_IS_PASSWORD:
            p_is_password = True
        if word in _MCA_FLAGS:
            mca_name_next = True
            out.append(word)
            continue
        if p_is_password and word.startswith("-p") and not word.startswith("--"):
            if word == "-p":
                hide_next = True
                out.append(word)
            else:
                out.append("-p" + MASK)
            continue
        if word.startswith("-"):
            name, eq, _ = word.lstrip("-").partition("=")
            if name and is_secret_option(name):
                if eq:
                    out.append(word.split("=", 1)[0] + "=" + MASK)
                else:
                    out.append(word)
                    hide_next = True
                continue
        elif "=" in word:
            name = word.split("=", 1)[0]
            if name.isidentifier() and is_secret_name(name):
                out.append(name + "=" + MASK)
                continue
        out.append(mask_url_credentials(word))
    return out
