"""Secrets with a recognisable shape: vendor prefixes, alphabets and lengths; key blocks; JWTs;
``Authorization`` values.

The formats follow the vendors' documentation and the public rule sets of gitleaks and
CredSweeper; the matching is ours (see docs/SECURITY.md for why): every pattern is anchored at a
literal and bounded, so hostile text is scanned in linear time.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable

from rag_mcp.search.redact import keys
from rag_mcp.search.redact.values import looks_random, placeholder

Hit = tuple[str, int, int] | None  # (kind, start, end), possibly moved or re-kinded
Check = Callable[[str, str, int, int], Hit]  # (text, kind, start, end) -> hit or None
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def _token(text: str, kind: str, s: int, e: int) -> Hit:
    """The token starts a word and is not a filler (``ghp_xxxx...``) or AWS's documented key."""
    if (s > 0 and text[s - 1] in _ALNUM) or "EXAMPLE" in text[s:e]:
        return None
    return (kind, s, e) if len(set(text[max(s, e - 16) : e])) >= 6 else None


def _varied(text: str, kind: str, s: int, e: int) -> Hit:
    # Short prefixes (hf_, SK+hex, LTAI): ask for two character classes, as random output has.
    v = text[max(s, e - 32) : e]
    classes = any(c.isupper() for c in v) + any(c.islower() for c in v) + any(
        c.isdigit() for c in v)
    return _token(text, kind, s, e) if classes >= 2 else None


def _discord(text: str, kind: str, s: int, e: int) -> Hit:
    # A bot token opens with the bot's numeric user ID in base64, unlike a dotted identifier.
    head = text[s : text.index(".", s)]
    try:
        uid = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return None
    return _token(text, kind, s, e) if uid.isdigit() and 15 <= len(uid) <= 21 else None


def _back(text: str, s: int, ok: Callable[[str], bool], most: int) -> int:
    j = s
    while j > 0 and s - j < most and ok(text[j - 1]):
        j -= 1
    return j


def _telegram(text: str, kind: str, s: int, e: int) -> Hit:
    # "<bot id>:AA<secret>"; URLs glue it to "/bot", so only more digits disqualify the start.
    j = _back(text, s, str.isdigit, 10)
    return None if s - j < 8 or (j > 0 and text[j - 1].isdigit()) else (kind, j, e)


def _terraform(text: str, kind: str, s: int, e: int) -> Hit:
    # "<14 alphanumerics>.atlasv1.<60-70 characters>"
    j = _back(text, s, lambda c: c in _ALNUM, 15)
    return _token(text, kind, j, e) if s - j == 14 else None


_AZ_HEAD = re.compile(r"[\w~.]{3}\d")


def _azure_ad(text: str, kind: str, s: int, e: int) -> Hit:
    # Azure AD client secrets look like "abc8Q~...": three characters and a digit before "Q~".
    return _token(text, kind, s - 4, e) if _AZ_HEAD.fullmatch(text, max(0, s - 4), s) else None


def _sas(text: str, kind: str, s: int, e: int) -> Hit:
    return (kind, s, e) if s >= 5 and text[s - 5] in "?&;" else None


def _bearer(text: str, kind: str, s: int, e: int) -> Hit:
    v = text[s:e]
    return (kind, s, e) if looks_random(v) and not placeholder(v) else None


def _basic(text: str, kind: str, s: int, e: int) -> Hit:
    if "authorization" not in text[max(0, s - 40) : s].lower():
        return None
    v = text[s:e]
    try:
        _, sep, password = base64.b64decode(v + "=" * (-len(v) % 4)).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return (kind, s, e) if sep and not placeholder(password) else None


_W = r"[\w-]"
_END = r"(?![A-Za-z0-9])"
# (kind, literal prefixes separated by "|", rest of the pattern, check). The part replaced is
# the group "v" when the pattern has one, else the prefix and the rest.
RULES: tuple[tuple[str, str, str, Check], ...] = (
    ("aws_access_key_id", "AKIA|ASIA|ABIA|ACCA", rf"[A-Z2-7]{{16}}{_END}", _token),
    ("aws_access_key_id", "A3T", rf"[A-Z0-9][A-Z2-7]{{16}}{_END}", _token),
    ("aws_session_token", "FwoGZXIvYXdz|IQoJb3JpZ2luX2Vj", r"[A-Za-z0-9+/=]{80,}", _token),
    ("google_api_key", "AIza", rf"{_W}{{35}}(?!{_W})", _token),
    ("google_oauth_client_secret", "GOCSPX-", rf"{_W}{{28}}(?!{_W})", _token),
    ("google_oauth_token", "ya29.", rf"{_W}{{30,2000}}(?!{_W})", _token),
    ("google_oauth_token", "1//0", rf"{_W}{{40,500}}(?!{_W})", _token),
    ("azure_storage_key", "AccountKey=", r"(?P<v>[A-Za-z0-9+/]{40,100}={0,2})", _token),
    ("azure_shared_access_key", "SharedAccessKey=", r"(?P<v>[A-Za-z0-9+/]{40,100}={0,2})",
     _token),
    ("azure_sas_token", "sig=", r"(?P<v>[A-Za-z0-9%+/]{40,120}(?:%3[dD]|=){0,2})(?![\w%+/=])",
     _sas),
    ("azure_client_secret", "Q~", r"[\w~.-]{31,34}(?![\w~.-])", _azure_ad),
    ("github_pat", "ghp_", rf"[A-Za-z0-9]{{36}}{_END}", _token),
    ("github_pat", "github_pat_", rf"[A-Za-z0-9]{{22}}_[A-Za-z0-9]{{59}}{_END}", _token),
    ("github_oauth_token", "gho_", rf"[A-Za-z0-9]{{36}}{_END}", _token),
    ("github_app_token", "ghu_|ghs_", rf"[A-Za-z0-9]{{36}}{_END}", _token),
    ("github_refresh_token", "ghr_", rf"[A-Za-z0-9]{{36}}{_END}", _token),
    ("gitlab_pat", "glpat-", rf"{_W}{{20,}}(?:\.[0-9a-z]{{2}}\.[0-9a-z]{{7,9}})?(?!{_W})", _token),
    ("gitlab_token", "gldt-|glrt-|glrtr-|glptt-|glcbt-|gloas-|glsoat-|glffct-|glimt-|glagent-"
     "|glft-|GR1348941", rf"{_W}{{20,}}(?!{_W})", _token),
    ("slack_token", "xoxb-|xoxa-|xoxp-|xoxs-|xoxo-|xoxr-|xoxe-", r"\d[0-9A-Za-z-]{8,}(?![\w-])",
     _token),
    ("slack_token", "xoxe.xoxb-|xoxe.xoxp-|xapp-", r"\d-[0-9A-Za-z-]{20,}(?![\w-])", _token),
    ("slack_webhook_url", "hooks.slack.com/services/|hooks.slack.com/workflows/"
     "|hooks.slack.com/triggers/", r"(?P<v>[\w/-]{20,})", _token),
    ("stripe_key", "sk_live_|sk_test_|rk_live_|rk_test_", rf"[A-Za-z0-9]{{20,247}}{_END}",
     _token),
    ("stripe_webhook_secret", "whsec_", r"[A-Za-z0-9+/=]{32,}", _token),
    ("anthropic_api_key", "sk-ant-", rf"(?:api|admin|sid|oat)\d\d-{_W}{{80,120}}(?!{_W})",
     _token),
    # Project and service keys, or legacy keys carrying "T3BlbkFJ" (base64 of "OpenAI").
    ("openai_api_key", "sk-", r"(?:(?:proj|svcacct|admin|None)-[\w-]{40,300}"
     r"|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})(?![\w-])", _token),
    ("openrouter_api_key", "sk-or-v1-", rf"[a-f0-9]{{64}}{_END}", _token),
    ("huggingface_token", "hf_|api_org_", rf"[A-Za-z0-9]{{34}}{_END}", _varied),
    ("npm_token", "npm_", rf"[A-Za-z0-9]{{36}}{_END}", _token),
    ("pypi_token", "pypi-AgE", rf"{_W}{{50,}}", _token),
    ("twilio_api_key", "SK", rf"[0-9a-fA-F]{{32}}{_END}", _varied),
    ("sendgrid_api_key", "SG.", rf"{_W}{{22}}\.{_W}{{43}}(?!{_W})", _token),
    ("brevo_api_key", "xkeysib-", rf"[a-f0-9]{{64}}-[A-Za-z0-9]{{16}}{_END}", _token),
    ("mailgun_api_key", "key-", rf"[0-9a-f]{{32}}{_END}", _token),
    ("shopify_token", "shpat_|shpca_|shppa_|shpss_", rf"[a-fA-F0-9]{{32}}{_END}", _token),
    ("square_token", "EAAA", rf"{_W}{{60}}(?!{_W})", _token),
    ("square_token", "sq0atp-|sq0csp-", rf"{_W}{{22,43}}(?!{_W})", _token),
    ("discord_bot_token", "M|N|O", rf"{_W}{{23,25}}\.{_W}{{6}}\.{_W}{{27,38}}(?!{_W})", _discord),
    ("discord_webhook_url", "discord.com/api/webhooks/|discordapp.com/api/webhooks/",
     r"(?P<v>\d+/[\w-]{60,80})", _token),
    ("telegram_bot_token", ":AA", rf"{_W}{{33}}(?!{_W})", _telegram),
    ("jwt", "eyJ", r"[\w-]{8,}\.eyJ[\w-]{8,}\.[\w-]*", _token),
    ("digitalocean_token", "dop_v1_|doo_v1_|dor_v1_|dos_v1_", rf"[a-f0-9]{{64}}{_END}", _token),
    ("databricks_token", "dapi", rf"[a-f0-9]{{32}}(?:-\d)?{_END}", _token),
    ("age_secret_key", "AGE-SECRET-KEY-1", rf"[0-9A-Z]{{58}}{_END}", _token),
    ("vault_token", "hvs.|hvb.|hvr.", rf"{_W}{{24,200}}(?!{_W})", _token),
    ("heroku_api_key", "HRKU-", rf"(?:[0-9A-Za-z_-]{{60}}"
     rf"|[0-9a-fA-F]{{8}}(?:-[0-9a-fA-F]{{4}}){{3}}-[0-9a-fA-F]{{12}})(?!{_W})", _token),
    ("doppler_token", "dp.pt.|dp.st.|dp.sa.|dp.ct.|dp.scim.|dp.audit.",
     rf"[A-Za-z0-9]{{40,44}}{_END}", _token),
    ("linear_api_key", "lin_api_", rf"[A-Za-z0-9]{{40}}{_END}", _token),
    ("postman_api_key", "PMAK-", rf"[a-f0-9]{{24}}-[a-f0-9]{{34}}{_END}", _token),
    ("grafana_token", "glsa_", rf"[A-Za-z0-9]{{32}}_[A-Fa-f0-9]{{8}}{_END}", _token),
    ("grafana_token", "glc_", r"[A-Za-z0-9+/]{32,400}={0,2}(?![\w+/=])", _token),
    ("atlassian_api_token", "ATATT3", r"[\w=-]{150,250}(?![\w=-])", _token),
    ("pulumi_token", "pul-", rf"[a-f0-9]{{40}}{_END}", _token),
    ("terraform_token", ".atlasv1.", rf"{_W}{{60,70}}(?!{_W})", _terraform),
    ("sentry_token", "sntrys_", r"eyJ[\w+/=-]{60,800}(?![\w+/=-])", _token),
    ("sentry_token", "sntryu_", rf"[a-f0-9]{{64}}{_END}", _token),
    ("dynatrace_token", "dt0c01.", rf"[A-Z0-9]{{24}}\.[A-Z0-9]{{64}}{_END}", _token),
    ("newrelic_key", "NRAK-", rf"[A-Z0-9]{{27}}{_END}", _token),
    ("newrelic_key", "NRII-", rf"{_W}{{32}}(?!{_W})", _token),
    ("docker_hub_token", "dckr_pat_|dckr_oat_", rf"{_W}{{27,60}}(?!{_W})", _token),
    ("onepassword_token", "ops_", r"eyJ[\w+/=-]{100,2000}(?![\w+/=-])", _token),
    ("supabase_token", "sbp_", rf"[a-f0-9]{{40}}{_END}", _token),
    ("supabase_token", "sb_secret_", rf"{_W}{{31,60}}(?!{_W})", _token),
    ("planetscale_token", "pscale_tkn_|pscale_pw_|pscale_oauth_", r"[\w.-]{32,64}(?![\w.-])",
     _token),
    ("notion_token", "ntn_", rf"\d{{11}}[A-Za-z0-9]{{35}}{_END}", _token),
    ("notion_token", "secret_", rf"[A-Za-z0-9]{{43}}{_END}", _varied),
    ("airtable_token", "pat", rf"[A-Za-z0-9]{{14}}\.[a-f0-9]{{64}}{_END}", _token),
    ("figma_token", "figd_", rf"{_W}{{40,50}}(?!{_W})", _token),
    ("groq_api_key", "gsk_", rf"[A-Za-z0-9]{{52}}{_END}", _token),
    ("replicate_token", "r8_", rf"[A-Za-z0-9]{{37}}{_END}", _token),
    ("perplexity_api_key", "pplx-", rf"[A-Za-z0-9]{{48}}{_END}", _token),
    ("xai_api_key", "xai-", rf"[A-Za-z0-9]{{80}}{_END}", _token),
    ("tailscale_key", "tskey-", rf"(?:api|auth|client|scim|webhook)-[A-Za-z0-9]{{6,20}}"
     rf"-[A-Za-z0-9]{{20,64}}{_END}", _token),
    ("artifactory_token", "AKCp", rf"[A-Za-z0-9]{{69}}{_END}", _token),
    ("nuget_api_key", "oy2", rf"[a-z0-9]{{43}}{_END}", _token),
    ("rubygems_api_key", "rubygems_", rf"[a-f0-9]{{48}}{_END}", _token),
    ("shippo_token", "shippo_live_|shippo_test_", rf"[a-f0-9]{{40}}{_END}", _token),
    ("typeform_token", "tfp_", r"[\w.=-]{59}(?![\w.=-])", _token),
    ("sourcegraph_token", "sgp_", rf"(?:[a-f0-9]{{16}}_|local_)?[a-f0-9]{{40}}{_END}", _token),
    ("clojars_token", "CLOJARS_", rf"[a-z0-9]{{60}}{_END}", _token),
    ("buildkite_token", "bkua_", rf"[a-f0-9]{{40}}{_END}", _token),
    ("prefect_api_key", "pnu_", rf"[A-Za-z0-9]{{36}}{_END}", _token),
    ("readme_api_key", "rdme_", rf"[a-z0-9]{{70}}{_END}", _token),
    ("flyio_token", "fo1_", rf"{_W}{{43}}(?!{_W})", _token),
    ("cloudflare_origin_ca_key", "v1.0-", rf"[a-f0-9]{{24}}-[a-f0-9]{{146}}{_END}", _token),
    ("easypost_api_key", "EZAK|EZTK", rf"[A-Za-z0-9]{{54}}{_END}", _token),
    ("duffel_token", "duffel_live_|duffel_test_", rf"{_W}{{43}}(?!{_W})", _token),
    ("flutterwave_key", "FLWSECK-|FLWSECK_TEST-", rf"[a-h0-9]{{32}}-X{_END}", _token),
    ("adafruit_io_key", "aio_", rf"[A-Za-z0-9]{{28}}{_END}", _token),
    ("alibaba_access_key_id", "LTAI", rf"[A-Za-z0-9]{{20}}{_END}", _varied),
    ("langsmith_api_key", "lsv2_pt_|lsv2_sk_", rf"[a-f0-9]{{32}}_[a-f0-9]{{10}}{_END}", _token),
    ("pinecone_api_key", "pcsk_", rf"[A-Za-z0-9]{{5,6}}_[A-Za-z0-9]{{60,70}}{_END}", _token),
    ("bitbucket_app_password", "ATBB", rf"[A-Za-z0-9]{{32}}{_END}", _varied),
    ("twitter_bearer_token", "AAAAAAAAAAAAAAAAAAAAA", r"[A-Za-z0-9%]{60,}(?![A-Za-z0-9%])",
     _token),
    ("private_key", "-----BEGIN ", r"(?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----",
     keys.pem_begin),
    ("private_key", "-----END ", r"(?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----", keys.pem_end),
    ("putty_private_key", "Private-Lines:", "", keys.putty),
    ("putty_private_key", "Private-MAC:", "", keys.putty_mac),
    ("bearer_token", "Bearer", r"\s+(?P<v>[A-Za-z0-9._~+/-]{16,}=*)(?![\w.~+/=-])", _bearer),
    ("basic_auth", "Basic", r"\s+(?P<v>[A-Za-z0-9+/]{8,}={0,2})(?![\w+/=])", _basic),
)
# Python's regex engine scans fast for a pattern's first literal character, but an alternation
# over many first characters is ~3x slower on code. So each rule is anchored at one character:
# the first of its prefix or, when that is a lower-case letter (frequent in code), the last
# ("ghp_" is found at "_", then a look-behind checks "ghp"). One regex per anchor character;
# frequent anchors get a cheap guard, and a few prefixes move to share another rule's scan.
_GUARDS = {"_": r"(?<=[a-z0-9]_)(?=[\w-][\w+/=-]{15})", "-": r"(?<=[a-z0-9]-)(?=[\w-]{7})",
           "=": r"(?=[A-Za-z0-9%+/]{40})", ":": r"(?=//|AA)", "/": r"(?=[\w/-]{20})",
           "J": r"(?=[\w-]{8})", ".": r"(?<=[a-z0-9]\.)(?=[\w-]{24})", "i": r"(?=[a-f0-9]{32})",
           "t": r"(?=[A-Za-z0-9]{14}\.)", "2": r"(?=[a-z0-9]{43})"}
_ANCHOR_AT = {"FwoGZXIvYXdz": 3, "IQoJb3JpZ2luX2Vj": 3, "-----BEGIN ": 5, "-----END ": 6,
              "EAAA": 1, "pypi-AgE": 5, ".atlasv1.": 7, "1//0": 0, "Private-Lines:": 0,
              "Private-MAC:": 0}
Meta = tuple[str, Check, int, "str | None"]  # kind, check, anchor offset, value group


def _compile() -> tuple[tuple[tuple[str, re.Pattern[str]], ...], list[Meta]]:
    groups: dict[str, list[str]] = {}
    meta: list[Meta] = []
    for kind, prefixes, rest, check in RULES:
        for prefix in prefixes.split("|"):
            i = len(meta)  # named groups: v<i> is the secret, the empty k<i> names the rule
            k = _ANCHOR_AT.get(prefix, len(prefix) - 1 if prefix[0].islower() else 0)
            lookbehind = f"(?<={re.escape(prefix[:k + 1])})" if k else ""
            body = rest.replace("(?P<v>", f"(?P<v{i}>") + f"(?P<k{i}>)"
            groups.setdefault(prefix[k], []).append(lookbehind + re.escape(prefix[k + 1 :]) + body)
            meta.append((kind, check, k, f"v{i}" if "(?P<v>" in rest else None))
    return tuple((a, re.compile(re.escape(a) + _GUARDS.get(a, "") + "(?:" + "|".join(b) + ")"))
                 for a, b in groups.items()), meta


TOKENS, TOKEN_META = _compile()
# Kinds whose value may hold a more specific token; the specific kind wins on overlap.
CONTAINERS = frozenset({"bearer_token", "basic_auth"})


def find(text: str) -> list[tuple[int, int, int, str]]:
    """Token candidates as (rank, start, end, kind); rank 1 for container kinds."""
    out: list[tuple[int, int, int, str]] = []
    for anchor, regex in TOKENS:
        pos = text.find(anchor)  # memchr: 20x faster than the regex scan when it is absent
        while pos >= 0 and (m := regex.search(text, pos)) is not None:
            kind, check, offset, group = TOKEN_META[int(m.lastgroup[1:])]  # type: ignore[index]
            s, e = m.span(group) if group else (m.start() - offset, m.end())
            if hit := check(text, kind, s, e):
                out.append((1 if hit[0] in CONTAINERS else 0, hit[1], hit[2], hit[0]))
            pos = m.start() + 1  # rescan inside: a URL password may itself be a known token
    return out
